// Reading and writing the schema's messages from files, with errors a user can act on:
// a missing file names the path; a text parse error names file:line:column; a layer of
// unknown type names the file, line and layer. Nets in Caffe's V1 and V0 formats (text, and
// .caffemodel weights) are upgraded as they are read (core/upgrade.hpp), with one log line.
#pragma once

#include <map>
#include <string>

#include "core/proto/hogstream.pb.h"

namespace hogstream {

// Where each layer of a net file begins, for messages about that layer.
struct NetSource {
  std::string file;
  std::map<std::string, int> layer_line;  // layer name -> 1-based line
  std::string Where(const std::string& layer) const;  // "file:line: " or "file: " or ""
};

pb::NetParameter ReadNetText(const std::string& path, NetSource* source = nullptr);
// Same from a string (tests); `name` stands in for the file in messages.
pb::NetParameter ParseNetText(const std::string& text, const std::string& name,
                              NetSource* source = nullptr);
pb::SolverParameter ReadSolverText(const std::string& path);

// Any message from text or binary protobuf; Error with the path on failure.
void ReadTextProto(const std::string& path, google::protobuf::Message* msg);
void ReadBinaryProto(const std::string& path, google::protobuf::Message* msg);
// Writes to a temporary file beside `path`, fsyncs, then renames over it: a crash leaves
// either the old file or the new one, never a torn one.
void WriteBinaryProtoAtomic(const std::string& path, const google::protobuf::Message& msg);
void WriteTextProto(const std::string& path, const google::protobuf::Message& msg);

}  // namespace hogstream

#include "core/io.hpp"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/common.hpp"
#include "core/layer.hpp"

namespace hogstream {

namespace gp = google::protobuf;

std::string NetSource::Where(const std::string& layer) const {
  if (file.empty()) return "";
  auto it = layer_line.find(layer);
  if (it == layer_line.end()) return file + ": ";
  return file + ":" + std::to_string(it->second) + ": ";
}

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HS_REQUIRE(in.good()) << path << ": cannot open: " << std::strerror(errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  HS_REQUIRE(!in.bad()) << path << ": read failed";
  return ss.str();
}

// Keeps the first parse error (protobuf reports 0-based lines and columns).
class FirstError : public gp::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!has_) {
      has_ = true;
      line_ = line + 1;
      column_ = column + 1;
      message_ = message;
    }
  }
  void AddWarning(int, int, const std::string&) override {}
  bool has_ = false;
  int line_ = 0, column_ = 0;
  std::string message_;
};

void ParseText(const std::string& text, const std::string& name, gp::Message* msg,
               gp::TextFormat::ParseInfoTree* tree) {
  gp::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (tree) parser.WriteLocationsTo(tree);
  if (parser.ParseFromString(text, msg)) return;
  std::string detail = errors.message_;
  // A V1 net file (`layers { type: CONVOLUTION }`) fails on the field name: say so plainly.
  if (detail.find("\"layers\"") != std::string::npos &&
      msg->GetDescriptor()->name() == "NetParameter") {
    detail = "this is a V1 net ('layers {}' with enum types); hogstream reads the current "
             "format ('layer {}' with string types) — upgrade it with Caffe's "
             "upgrade_net_proto_text";
  }
  HS_FAIL() << name << ":" << errors.line_ << ":" << errors.column_ << ": " << detail;
}

}  // namespace

pb::NetParameter ParseNetText(const std::string& text, const std::string& name,
                              NetSource* source) {
  pb::NetParameter net;
  gp::TextFormat::ParseInfoTree tree;
  ParseText(text, name, &net, &tree);
  const gp::FieldDescriptor* layer_field = net.GetDescriptor()->FindFieldByName("layer");
  NetSource local;
  NetSource& src = source ? *source : local;
  src.file = name;
  src.layer_line.clear();
  for (int i = 0; i < net.layer_size(); ++i) {
    const int line = tree.GetLocation(layer_field, i).line + 1;
    const auto& lp = net.layer(i);
    src.layer_line.emplace(lp.name(), line);
    HS_REQUIRE(lp.has_type() && !lp.type().empty())
        << name << ":" << line << ": layer '" << lp.name() << "' has no type";
    if (!LayerTypeKnown(lp.type())) {
      std::string known;
      for (auto& t : LayerTypeList()) known += (known.empty() ? "" : ", ") + t;
      HS_FAIL() << name << ":" << line << ": layer '" << lp.name() << "' has unknown type '"
                << lp.type() << "' (hogstream knows: " << known << ")";
    }
  }
  return net;
}

pb::NetParameter ReadNetText(const std::string& path, NetSource* source) {
  return ParseNetText(Slurp(path), path, source);
}

pb::SolverParameter ReadSolverText(const std::string& path) {
  pb::SolverParameter sp;
  ParseText(Slurp(path), path, &sp, nullptr);
  return sp;
}

void ReadTextProto(const std::string& path, gp::Message* msg) {
  ParseText(Slurp(path), path, msg, nullptr);
}

void ReadBinaryProto(const std::string& path, gp::Message* msg) {
  int fd = ::open(path.c_str(), O_RDONLY);
  HS_REQUIRE(fd >= 0) << path << ": cannot open: " << std::strerror(errno);
  gp::io::FileInputStream raw(fd);
  raw.SetCloseOnDelete(true);
  gp::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  const bool ok = msg->ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
  HS_REQUIRE(ok) << path << ": not a valid " << msg->GetDescriptor()->name()
                 << " (truncated or corrupt)";
}

void WriteBinaryProtoAtomic(const std::string& path, const gp::Message& msg) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  HS_REQUIRE(fd >= 0) << tmp << ": cannot create: " << std::strerror(errno);
  bool ok;
  {
    gp::io::FileOutputStream out(fd);
    ok = msg.SerializeToZeroCopyStream(&out) && out.Flush();
  }
  ok = ok && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    HS_FAIL() << path << ": write failed: " << std::strerror(ok ? errno : saved);
  }
}

void WriteTextProto(const std::string& path, const gp::Message& msg) {
  std::string text;
  HS_CHECK(gp::TextFormat::PrintToString(msg, &text));
  std::ofstream out(path);
  out << text;
  HS_REQUIRE(out.good()) << path << ": write failed";
}

}  // namespace hogstream

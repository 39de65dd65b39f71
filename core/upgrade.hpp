// Caffe's older net formats, read as the current one. A V1 net (`layers { type: CONVOLUTION
// blobs_lr: 1 }`, Caffe before mid-2015) and a V0 net (`layers { layer { type: "conv" } }`,
// Caffe of 2013, with padding as a layer of its own) become `layer { type: "Convolution"
// param { lr_mult: 1 } }` entries; the rest of hogstream only ever sees the current format.
// core/io.cpp calls this on every net it reads (text nets, .caffemodel weights, the nets
// inside a solver) and logs one line; `hogstream upgrade` writes the result.
//
// Not for: settings of layers hogstream lacks (image/HDF5/window/memory data, MVN). Their
// type names are upgraded; a file that sets their parameters fails with one line.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/proto/hogstream.pb.h"

namespace hogstream {

struct NetUpgrade {
  int version = 2;          // what the file was: 0 (V0), 1 (V1) or 2 (current, untouched)
  int read = 0;             // `layers` entries read, padding layers included
  std::vector<int> origin;  // for each resulting `layer`, the index of its `layers` entry
};

// Rewrites `net`'s `layers` as `layer` entries in place (nothing to do without `layers`).
// `where(i)` is the "file:line: " prefix for messages about the i-th `layers` entry. Error
// (one line) for a file with both `layer` and `layers`, a layer without a known type, or a
// V0 setting with no place in the current format.
NetUpgrade UpgradeNet(pb::NetParameter* net,
                      const std::function<std::string(int)>& where);

// The one log line that says `file` was upgraded on read.
std::string UpgradeNotice(const std::string& file, const NetUpgrade& u);

// Upgrades the nets written inside a solver (net_param, train_net_param, test_net_param);
// returns how many were in an old format.
int UpgradeSolverNets(pb::SolverParameter* solver, const std::string& file);
// The same, and the legacy `solver_type: ADAM` becomes `type: "Adam"` (Error when the file
// gives both). Returns whether anything changed.
bool UpgradeSolver(pb::SolverParameter* solver, const std::string& file);

// What `hogstream upgrade FILE` writes: FILE (a net or a solver, text) in the current format.
struct UpgradedFile {
  std::string text;     // the upgraded message as protobuf text
  std::string summary;  // one line: what the file was and what changed
};
UpgradedFile UpgradeFile(const std::string& path);

}  // namespace hogstream

#include "core/io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/text_format.h>
#include <glog/logging.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "base/common.hpp"
#include "core/layer.hpp"
#include "core/upgrade.hpp"

namespace hogstream {

namespace gp = google::protobuf;

std::string NetSource::Where(const std::string& layer) const {
  if (file.empty()) return "";
  auto it = layer_line.find(layer);
  if (it == layer_line.end()) return file + ": ";
  return file + ":" + std::to_string(it->second) + ": ";
}

namespace {

// Refuses what is not a regular file: a directory used to read as an empty file (an empty
// net, random weights), and a FIFO or device would block or stream forever. `kind` names what
// was expected ("net", "solver", ...).
void RequireRegularFile(const std::string& path, const std::string& kind) {
  struct stat st;
  HS_REQUIRE(::stat(path.c_str(), &st) == 0) << path << ": cannot open: " << ErrnoText(errno);
  HS_REQUIRE(!S_ISDIR(st.st_mode)) << path << " is a directory, not a " << kind << " file";
  HS_REQUIRE(S_ISREG(st.st_mode)) << path << " is not a regular file (expected a " << kind
                                  << " file)";
}

// What a binary message's file is called in messages.
std::string KindOf(const gp::Message& msg) {
  const std::string& name = msg.GetDescriptor()->name();
  if (name == "NetParameter") return "weights (.caffemodel)";
  if (name == "SolverState") return "solver state (.solverstate)";
  return name;
}

std::string Slurp(const std::string& path, const std::string& kind) {
  RequireRegularFile(path, kind);
  std::ifstream in(path, std::ios::binary);
  HS_REQUIRE(in.good()) << path << ": cannot open: " << ErrnoText(errno);
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
  // A setting of the old formats that hogstream left out (image or window data, MVN, ...).
  if (detail.find("V1LayerParameter\"") != std::string::npos ||
      detail.find("V0LayerParameter\"") != std::string::npos)
    detail += " (an old-format setting of a layer hogstream does not have)";
  HS_FAIL() << name << ":" << errors.line_ << ":" << errors.column_ << ": " << detail;
}

// Logs `line` the first time `file` is upgraded in this process: a solver reads its net file
// once per net, and a Hogwild job once per solver.
void AnnounceUpgrade(const std::string& file, const std::string& line) {
  static std::mutex mu;
  static std::set<std::string> announced;
  std::lock_guard<std::mutex> lock(mu);
  if (announced.insert(file).second) LOG(INFO) << line;
}

}  // namespace

pb::NetParameter ParseNetText(const std::string& text, const std::string& name,
                              NetSource* source) {
  pb::NetParameter net;
  gp::TextFormat::ParseInfoTree tree;
  ParseText(text, name, &net, &tree);
  const gp::FieldDescriptor* layer_field = net.GetDescriptor()->FindFieldByName("layer");
  const gp::FieldDescriptor* layers_field = net.GetDescriptor()->FindFieldByName("layers");
  auto where_v1 = [&](int i) {
    return name + ":" + std::to_string(tree.GetLocation(layers_field, i).line + 1) + ": ";
  };
  const NetUpgrade upgrade = UpgradeNet(&net, where_v1);
  if (upgrade.version < 2) AnnounceUpgrade(name, UpgradeNotice(name, upgrade));
  NetSource local;
  NetSource& src = source ? *source : local;
  src.file = name;
  src.layer_line.clear();
  for (int i = 0; i < net.layer_size(); ++i) {
    const int line = 1 + (upgrade.version < 2 ? tree.GetLocation(layers_field, upgrade.origin[i])
                                              : tree.GetLocation(layer_field, i)).line;
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
  return ParseNetText(Slurp(path, "net"), path, source);
}

pb::SolverParameter ReadSolverText(const std::string& path) {
  pb::SolverParameter sp;
  ParseText(Slurp(path, "solver"), path, &sp, nullptr);
  if (const int n = UpgradeSolverNets(&sp, path))
    AnnounceUpgrade(path, path + ": " + std::to_string(n) + " net(s) inside the solver in an old "
                          "format, upgraded on read; 'hogstream upgrade " + path +
                          "' writes the current format");
  return sp;
}

void ReadTextProto(const std::string& path, gp::Message* msg) {
  ParseText(Slurp(path, msg->GetDescriptor()->name()), path, msg, nullptr);
}

void ReadBinaryProto(const std::string& path, gp::Message* msg) {
  RequireRegularFile(path, KindOf(*msg));
  int fd = ::open(path.c_str(), O_RDONLY);
  HS_REQUIRE(fd >= 0) << path << ": cannot open: " << ErrnoText(errno);
  gp::io::FileInputStream raw(fd);
  raw.SetCloseOnDelete(true);
  gp::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  const bool ok = msg->ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
  if (!ok && dynamic_cast<pb::NetParameter*>(msg)) {  // a .solverstate given as weights?
    pb::SolverState state;
    std::ifstream in(path, std::ios::binary);
    HS_REQUIRE(!(state.ParseFromIstream(&in) && state.has_learned_net()))
        << path << ": a solver state (iteration " << state.iter()
        << "), not weights; resume from it with --snapshot";
  }
  HS_REQUIRE(ok) << path << ": not a valid " << msg->GetDescriptor()->name()
                 << " (truncated or corrupt)";
  // Weights saved by Caffe before mid-2015 hold V1 layers: read them by the same names.
  if (auto* net = dynamic_cast<pb::NetParameter*>(msg)) {
    const NetUpgrade u = UpgradeNet(net, [&](int) { return path + ": "; });
    if (u.version < 2)
      AnnounceUpgrade(path, path + ": weights of a V" + std::to_string(u.version) + " net (" +
                                std::to_string(u.read) + " layers), upgraded on read");
  }
}

namespace {

// Removes `NAME.tmp.PID[.N]` files beside `path` whose process PID no longer exists: each
// is what a write killed mid-way left behind (240 MB per AlexNet snapshot). A file whose PID
// is alive, or belongs to another user (EPERM), is another writer's and is left alone. PIDs
// are only meaningful on this machine: a directory shared with other hosts may hold their
// live temporaries, which this would remove.
void RemoveStaleTemporaries(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string prefix = path.substr(dir.size()) + ".tmp.";
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (!d) return;  // the write itself will report a missing directory
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
    if (digits == 0 || digits > 9 || (digits < rest.size() && rest[digits] != '.')) continue;
    const long pid = std::stol(rest.substr(0, digits));
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::unlink((dir + name).c_str());
  }
  ::closedir(d);
}

// Makes a rename inside `path`'s directory durable: without it a power cut after the rename
// can bring back the old file, or no file.
void SyncDirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  HS_REQUIRE(fd >= 0) << dir << ": cannot open to sync: " << ErrnoText(errno);
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  HS_REQUIRE(ok) << dir << ": fsync failed: " << ErrnoText(err);
}

}  // namespace

void WriteBinaryProtoAtomic(const std::string& path, const gp::Message& msg) {
  RemoveStaleTemporaries(path);
  // NAME.tmp.PID.N: the PID tells a later writer whether the file is stale; N keeps two
  // writers of one path in this process apart.
  static std::atomic<unsigned> serial{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(serial.fetch_add(1, std::memory_order_relaxed));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  HS_REQUIRE(fd >= 0) << tmp << ": cannot create: " << ErrnoText(errno);
  bool ok;
  {
    gp::io::FileOutputStream out(fd);
    ok = msg.SerializeToZeroCopyStream(&out) && out.Flush();
  }
  ok = ok && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = ok ? errno : saved;
    ::unlink(tmp.c_str());
    HS_FAIL() << path << ": write failed: " << ErrnoText(err);
  }
  SyncDirectoryOf(path);
}

void WriteTextProto(const std::string& path, const gp::Message& msg) {
  std::string text;
  HS_CHECK(gp::TextFormat::PrintToString(msg, &text));
  std::ofstream out(path);
  out << text;
  HS_REQUIRE(out.good()) << path << ": write failed";
}

}  // namespace hogstream

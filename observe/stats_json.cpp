#include "observe/stats_json.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/common.hpp"

namespace hogstream {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// JSON has no NaN or infinity: a diverging loss is written as null rather than breaking jq.
// `fixed`: decimals after the point, for Unix times (%g would round them to 100 s).
void Number(std::ostringstream& os, double v, int fixed = -1) {
  if (!std::isfinite(v)) {
    os << "null";
    return;
  }
  char buf[48];
  if (fixed >= 0) std::snprintf(buf, sizeof buf, "%.*f", fixed, v);
  else std::snprintf(buf, sizeof buf, "%.9g", v);
  os << buf;
}

void String(std::ostringstream& os, const std::string& s) {
  os << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      os << buf;
    } else {
      os << c;
    }
  }
  os << '"';
}

// {"name": value, ...}; an output with several elements repeats its name, so those keys get
// "[k]" (accuracy[0], accuracy[1]) to stay unique.
void Outputs(std::ostringstream& os, const std::vector<std::pair<std::string, float>>& outputs) {
  std::map<std::string, int> count, seen;
  for (const auto& o : outputs) ++count[o.first];
  os << '{';
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = outputs[i].first;
    if (i) os << ',';
    String(os, count[name] > 1 ? name + "[" + std::to_string(seen[name]++) + "]" : name);
    os << ':';
    Number(os, outputs[i].second);
  }
  os << '}';
}

}  // namespace

JsonLinesSink::JsonLinesSink(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  HS_REQUIRE(file_ != nullptr) << "--stats_json: cannot open '" << path << "' for appending: "
                               << ErrnoText(errno);
}

JsonLinesSink::~JsonLinesSink() {
  if (file_) std::fclose(file_);
}

std::string JsonLinesSink::TrainLine(const TrainFigures& f, double unix_time) {
  std::ostringstream os;
  os << "{\"type\":\"train\",\"iter\":" << f.iter << ",\"max_iter\":" << f.max_iter << ",\"time\":";
  Number(os, unix_time, 6);
  os << ",\"elapsed\":";
  Number(os, f.seconds);
  os << ",\"loss\":";
  Number(os, f.loss);
  os << ",\"lr\":";
  Number(os, f.lr);
  os << ",\"img_per_s\":";
  Number(os, f.img_per_s);
  os << ",\"leader\":" << f.leader << ",\"outputs\":";
  Outputs(os, f.outputs);
  os << ",\"solvers\":[";
  for (size_t i = 0; i < f.solvers.size(); ++i) {
    os << (i ? "," : "") << "{\"rank\":" << f.solvers[i].rank << ",\"iter\":" << f.solvers[i].iter
       << ",\"img_per_s\":";
    Number(os, f.solvers[i].img_per_s);
    os << '}';
  }
  os << "],\"segments\":[";
  for (size_t i = 0; i < f.segments.size(); ++i) {
    const SegmentFigures& s = f.segments[i];
    os << (i ? "," : "") << "{\"rank\":" << s.rank << ",\"bytes\":" << s.bytes << ",\"chunks\":"
       << s.chunks << ",\"dropped\":" << s.dropped << ",\"sweeps\":" << s.sweeps
       << ",\"stale\":" << s.stale << ",\"sweeps_per_s\":";
    Number(os, s.sweeps_per_s);
    os << '}';
  }
  os << "]}";
  return os.str();
}

std::string JsonLinesSink::TestLine(const TestFigures& f, double unix_time) {
  std::ostringstream os;
  os << "{\"type\":\"test\",\"iter\":" << f.iter << ",\"time\":";
  Number(os, unix_time, 6);
  os << ",\"elapsed\":";
  Number(os, f.seconds);
  os << ",\"net\":" << f.net << ",\"outputs\":";
  Outputs(os, f.outputs);
  os << '}';
  return os.str();
}

void JsonLinesSink::OnTrain(TrainFigures& f) { Write(TrainLine(f, UnixNow())); }
void JsonLinesSink::OnTest(const TestFigures& f) { Write(TestLine(f, UnixNow())); }

void JsonLinesSink::Write(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  // One fputs per record, flushed at once: a reader never sees half a line for long, and the
  // records of a job that is killed are all on disk. A full disk must not stop the training.
  std::fputs((line + "\n").c_str(), file_);
  std::fflush(file_);
}

}  // namespace hogstream

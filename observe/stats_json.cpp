#include "observe/stats_json.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "base/common.hpp"

namespace hogstream {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written, as README.md lists them

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A figure as JSON: null when not finite (JSON has no NaN or infinity, and a diverging loss
// must not break jq), else rounded to 9 significant digits, so a float's 0.01 prints as 0.01
// and not as the float's exact 0.009999999776482582.
Json Number(double v) { return std::isfinite(v) ? Json(RoundedTo(v, 9)) : Json(nullptr); }

// {"name": value, ...}; an output with several elements repeats its name, so those keys get
// "[k]" (accuracy[0], accuracy[1]) to stay unique.
Json Outputs(const std::vector<std::pair<std::string, float>>& outputs) {
  std::map<std::string, int> count, seen;
  for (const auto& o : outputs) ++count[o.first];
  Json out = Json::object();
  for (const auto& [name, value] : outputs)
    out[count[name] > 1 ? name + "[" + std::to_string(seen[name]++) + "]" : name] = Number(value);
  return out;
}

}  // namespace

double RoundedTo(double v, int significant) {
  if (!std::isfinite(v)) return v;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  return std::strtod(buf, nullptr);
}

JsonLinesSink::JsonLinesSink(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  HS_REQUIRE(file_ != nullptr) << "--stats_json: cannot open '" << path << "' for appending: "
                               << ErrnoText(errno);
}

JsonLinesSink::~JsonLinesSink() {
  if (file_) std::fclose(file_);
}

std::string JsonLinesSink::TrainLine(const TrainFigures& f, double unix_time) {
  Json solvers = Json::array(), segments = Json::array();
  for (const SolverFigures& s : f.solvers)
    solvers.push_back({{"rank", s.rank}, {"iter", s.iter}, {"img_per_s", Number(s.img_per_s)}});
  for (const SegmentFigures& s : f.segments)
    segments.push_back({{"rank", s.rank}, {"bytes", s.bytes}, {"chunks", s.chunks}, {"dropped", s.dropped},
                        {"sweeps", s.sweeps}, {"stale", s.stale}, {"sweeps_per_s", Number(s.sweeps_per_s)}});
  // The Unix time whole: %.9g would round it to 100 s.
  const Json j = {{"type", "train"}, {"iter", f.iter}, {"max_iter", f.max_iter},
                  {"time", std::isfinite(unix_time) ? Json(unix_time) : Json(nullptr)},
                  {"elapsed", Number(f.seconds)}, {"loss", Number(f.loss)}, {"lr", Number(f.lr)},
                  {"img_per_s", Number(f.img_per_s)}, {"leader", f.leader}, {"leads", f.leads},
                  {"outputs", Outputs(f.outputs)},
                  {"solvers", solvers}, {"segments", segments}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);  // bad UTF-8 in a name: U+FFFD
}

std::string JsonLinesSink::TestLine(const TestFigures& f, double unix_time) {
  const Json j = {{"type", "test"}, {"iter", f.iter},
                  {"time", std::isfinite(unix_time) ? Json(unix_time) : Json(nullptr)},
                  {"elapsed", Number(f.seconds)}, {"net", f.net}, {"outputs", Outputs(f.outputs)}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);  // bad UTF-8 in a name: U+FFFD
}

std::string JsonLinesSink::NetworkLine(const NetworkFigures& f, double unix_time) {
  Json peers = Json::array();
  for (const PeerNetFigures& p : f.peers) {
    Json staleness = Json::array();
    for (uint64_t n : p.staleness) staleness.push_back(n);
    peers.push_back({{"rank", p.rank}, {"name", p.name}, {"self", p.self}, {"live", p.live}, {"ready", p.ready},
                     {"leader", p.leader}, {"straggler", p.straggler}, {"left", p.left},
                     {"iterations", p.iterations},
                     {"iter_per_s", Number(p.iter_per_s)},
                     {"deltas_applied", p.deltas_applied}, {"refused", p.refused},
                     {"staleness_mean", Number(p.deltas_applied ? double(p.staleness_sum) / double(p.deltas_applied) : 0)},
                     {"staleness_buckets", staleness},
                     {"bytes_in", p.bytes_in}, {"bytes_out", p.bytes_out},
                     {"gbit_in", Number(p.gbit_in)}, {"gbit_out", Number(p.gbit_out)},
                     {"frames_lost", p.frames_lost}, {"frames_foreign", p.frames_foreign},
                     {"frames_bad_mac", p.frames_bad_mac}, {"frames_malformed", p.frames_malformed}});
  }
  Json bounds = Json::array();
  for (uint64_t b : kStalenessBounds) bounds.push_back(b);
  const PolicyFigures& pf = f.policy_figures;
  const Json policy = f.policy.empty() ? Json(nullptr)
                                       : Json{{"name", f.policy}, {"waits", pf.waits},
                                              {"wait_seconds", Number(pf.wait_seconds)}, {"rounds", pf.rounds},
                                              {"unsound", pf.unsound}};
  const Json j = {{"type", "network"}, {"time", std::isfinite(unix_time) ? Json(unix_time) : Json(nullptr)},
                  {"machine", f.machine}, {"leader", f.leader}, {"iter", f.global_iter}, {"quorum", f.quorum},
                  {"owned", f.owned}, {"chunks", f.chunks}, {"sweeps_per_s", Number(f.sweeps_per_s)},
                  {"gbit_out", Number(f.gbit_out)}, {"gbit_in", Number(f.gbit_in)}, {"bytes_sent", f.bytes_sent},
                  {"bytes_received", f.bytes_received}, {"messages_sent", f.messages_sent}, {"sweeps", f.sweeps},
                  {"positions_sent", f.positions_sent}, {"deltas_applied", f.deltas_applied},
                  {"positions_answered", f.positions_answered}, {"unanswered", f.unanswered}, {"lost", f.lost},
                  {"foreign", f.foreign}, {"refused_mac", f.refused_mac}, {"refused_value", f.refused_value},
                  {"malformed", f.malformed}, {"kernel_dropped", f.kernel_dropped},
                  {"control_refused", f.control_refused}, {"stale", f.stale}, {"reshares", f.reshares},
                  {"recoveries", f.recoveries}, {"weight", Number(f.weight)}, {"staleness_mean", Number(f.staleness)},
                  {"staleness_max", f.staleness_max}, {"svb_bytes_sent", f.svb_bytes_sent},
                  {"median_iter_per_s", Number(f.median_iter_per_s)},
                  {"policy", policy}, {"aggregation", f.aggregation}, {"staleness_bounds", bounds}, {"peers", peers}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void JsonLinesSink::OnTrain(TrainFigures& f) { Write(TrainLine(f, UnixNow())); }
void JsonLinesSink::OnNetwork(const NetworkFigures& f) { Write(NetworkLine(f, UnixNow())); }
void JsonLinesSink::OnTest(const TestFigures& f) { Write(TestLine(f, UnixNow())); }

void JsonLinesSink::Write(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  // One fputs per record, flushed at once: a reader never sees half a line for long, and the
  // records of a job that is killed are all on disk. A full disk must not stop the training.
  std::fputs((line + "\n").c_str(), file_);
  std::fflush(file_);
}

void RecentRecords::OnTrain(TrainFigures& f) { Keep(trains_, kTrains, JsonLinesSink::TrainLine(f, UnixNow())); }
void RecentRecords::OnTest(const TestFigures& f) { Keep(tests_, kTests, JsonLinesSink::TestLine(f, UnixNow())); }
void RecentRecords::OnNetwork(const NetworkFigures& f) {
  Keep(networks_, kNetworks, JsonLinesSink::NetworkLine(f, UnixNow()));
}

void RecentRecords::Keep(std::deque<std::pair<uint64_t, std::string>>& q, size_t cap, std::string line) {
  std::lock_guard<std::mutex> lock(mu_);
  q.emplace_back(++count_, std::move(line));
  if (q.size() > cap) q.pop_front();
}

std::vector<std::string> RecentRecords::After(uint64_t after, uint64_t* last) const {
  std::lock_guard<std::mutex> lock(mu_);
  // The three queues merged by number (each is in order).
  std::vector<const std::pair<uint64_t, std::string>*> picked;
  for (const auto* q : {&tests_, &trains_, &networks_})
    for (auto it = q->rbegin(); it != q->rend() && it->first > after; ++it) picked.push_back(&*it);
  std::sort(picked.begin(), picked.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::vector<std::string> out;
  out.reserve(picked.size());
  for (const auto* r : picked) out.push_back(r->second);
  *last = count_;
  return out;
}

}  // namespace hogstream

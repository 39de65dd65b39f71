#include "observe/metrics.hpp"

#include <glog/logging.h>

#include <map>
#include <mutex>

#include "base/common.hpp"

#ifdef HOGSTREAM_PROMETHEUS
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#endif

namespace hogstream {

std::string MetricsAddress(const std::string& spec, const char* flag) {
  const auto colon = spec.rfind(':');
  const std::string host = colon == std::string::npos ? "127.0.0.1" : spec.substr(0, colon);
  const std::string port = colon == std::string::npos ? spec : spec.substr(colon + 1);
  HS_REQUIRE(!host.empty() && !port.empty() && port.size() <= 5 &&
             port.find_first_not_of("0123456789") == std::string::npos && std::stoi(port) <= 65535)
      << "--" << flag << " wants [HOST:]PORT (PORT 0-65535), got '" << spec << "'";
  return host + ":" + port;
}

#ifdef HOGSTREAM_PROMETHEUS
namespace {

namespace pm = prometheus;

class PrometheusSink : public MetricsText {
 public:
  PrometheusSink()
      : registry_(std::make_shared<pm::Registry>()),
        iter_(Gauge("hogstream_iteration", "global iteration (sum over all solvers)")),
        max_iter_(Gauge("hogstream_max_iterations", "max_iter of the job")),
        img_(Gauge("hogstream_images_per_second", "all solvers, over the last display interval")),
        loss_(Gauge("hogstream_loss", "train loss, smoothed over average_loss iterations")),
        lr_(Gauge("hogstream_learning_rate", "current learning rate")),
        leader_(Gauge("hogstream_leader_rank", "rank of the solver that tests, displays and snapshots")),
        elapsed_(Gauge("hogstream_elapsed_seconds", "since this run's first iteration")),
        train_out_(Gauge("hogstream_train_output", "train net outputs at the last display")),
        test_out_(Gauge("hogstream_test_output", "mean test net outputs at the last test pass")),
        test_iter_(Gauge("hogstream_test_iteration", "global iteration of the last test pass")),
        solver_iter_(Gauge("hogstream_solver_iteration", "iterations each solver completed")),
        solver_img_(Gauge("hogstream_solver_images_per_second", "per solver, last display interval")),
        seg_bytes_(Counter("hogstream_segment_bytes_total", "payload bytes a sync segment moved")),
        seg_chunks_(Counter("hogstream_segment_chunks_total", "chunks a sync segment posted")),
        seg_drops_(Counter("hogstream_segment_dropped_total", "chunks the transport lost")),
        seg_sweeps_(Counter("hogstream_segment_sweeps_total", "full passes over the weights")),
        seg_stale_(Counter("hogstream_segment_stale_ignored_total",
                           "stale positions and too-old deltas a segment ignored")),
        seg_rate_(Gauge("hogstream_segment_sweeps_per_second", "sweep rate, last ~0.5 s window")),
        leads_(Gauge("hogstream_leads", "1: this process's solvers lead the job (test, snapshot); 0: another machine leads")),
        peer_up_(Gauge("hogstream_peer_up", "1: the machine is heard from (live); 0: taken for dead")),
        peer_ready_(Gauge("hogstream_peer_ready", "1: the machine has the weights and trains")),
        peer_leads_(Gauge("hogstream_peer_leader", "1: the machine leads the job")),
        peer_lags_(Gauge("hogstream_peer_straggler", "1: the machine's rate lags the median of those training (--straggler)")),
        peer_left_(Gauge("hogstream_peer_left", "1: the machine left the job on notice (SIGUSR1), its chunks handed over")),
        peer_iter_(Gauge("hogstream_peer_iterations", "the machine's solvers' iterations (this incarnation)")),
        peer_rate_(Gauge("hogstream_peer_iterations_per_second", "the machine's solvers' rate, last second")),
        peer_deltas_(Counter("hogstream_peer_deltas_applied_total", "its deltas this machine's masters applied")),
        peer_refused_(Counter("hogstream_peer_refused_total", "its deltas refused by value (non-finite, absurd)")),
        peer_in_(Counter("hogstream_peer_received_bytes_total", "payload bytes received from the machine")),
        peer_out_(Counter("hogstream_peer_sent_bytes_total", "payload bytes sent to the machine alone (multicast counts for none)")),
        peer_in_rate_(Gauge("hogstream_peer_received_bits_per_second", "payload received from the machine, last second")),
        peer_out_rate_(Gauge("hogstream_peer_sent_bits_per_second", "payload sent to the machine alone, last second")),
        peer_lost_(Counter("hogstream_peer_frames_lost_total", "frames to the machine dropped on the way, and from it corrupt (bad checksum)")),
        peer_frames_refused_(Counter("hogstream_peer_frames_refused_total",
                                     "frames from the machine's address refused: another job's or claiming another sender (foreign), a failed MAC (mac), no frame of ours (malformed)")),
        peer_stale_(pm::BuildHistogram()
                        .Name("hogstream_peer_staleness_iterations")
                        .Help("global iterations between a delta's base position and its applying, per sender")
                        .Register(*registry_)) {
  }

  std::string Text() const override { return pm::TextSerializer().Serialize(registry_->Collect()); }

  void OnTrain(TrainFigures& f) override {
    std::lock_guard<std::mutex> lock(mu_);
    iter_.Add({}).Set(static_cast<double>(f.iter));
    max_iter_.Add({}).Set(static_cast<double>(f.max_iter));
    img_.Add({}).Set(f.img_per_s);
    loss_.Add({}).Set(f.loss);
    lr_.Add({}).Set(f.lr);
    leader_.Add({}).Set(f.leader);
    leads_.Add({}).Set(f.leads ? 1 : 0);
    elapsed_.Add({}).Set(f.seconds);
    for (const auto& [name, v] : f.outputs) train_out_.Add({{"output", name}}).Set(v);
    for (const SolverFigures& s : f.solvers) {
      const std::string r = std::to_string(s.rank);
      solver_iter_.Add({{"solver", r}}).Set(static_cast<double>(s.iter));
      solver_img_.Add({{"solver", r}}).Set(s.img_per_s);
    }
    for (const SegmentFigures& s : f.segments) {
      const pm::Labels l{{"solver", std::to_string(s.rank)}};
      SegmentTotals& last = last_[s.rank];
      // Counters only go up: add what moved since the last display.
      seg_bytes_.Add(l).Increment(Delta(s.bytes, &last.bytes));
      seg_chunks_.Add(l).Increment(Delta(s.chunks, &last.chunks));
      seg_drops_.Add(l).Increment(Delta(s.dropped, &last.dropped));
      seg_sweeps_.Add(l).Increment(Delta(s.sweeps, &last.sweeps));
      seg_stale_.Add(l).Increment(Delta(s.stale, &last.stale));
      seg_rate_.Add(l).Set(s.sweeps_per_s);
    }
  }

  void OnNetwork(const NetworkFigures& f) override {
    std::lock_guard<std::mutex> lock(mu_);
    // One series per figure, named with its unit (metric names are the README's table).
    const struct { const char* name; const char* help; double v; } gauges[] = {
        {"hogstream_network_machine", "this machine's rank in the job", static_cast<double>(f.machine)},
        {"hogstream_network_leader_machine", "rank of the machine that leads the job", static_cast<double>(f.leader)},
        {"hogstream_network_global_iteration", "the job's global iteration, as this machine sees it", static_cast<double>(f.global_iter)},
        {"hogstream_network_quorum", "1: this machine reaches a majority of the job", f.quorum ? 1.0 : 0.0},
        {"hogstream_network_chunks_owned", "chunks of the weights this machine masters", static_cast<double>(f.owned)},
        {"hogstream_network_chunks", "chunks of the weights in all", static_cast<double>(f.chunks)},
        {"hogstream_network_sweeps_per_second", "passes of this machine's masters over their chunks, per destination, last second", f.sweeps_per_s},
        {"hogstream_network_sent_bits_per_second", "payload sent, last second", f.gbit_out * 1e9},
        {"hogstream_network_received_bits_per_second", "payload received, last second", f.gbit_in * 1e9},
        {"hogstream_network_delta_weight_mean", "mean weight of the deltas applied (the aggregation rule)", f.weight},
        {"hogstream_network_staleness_mean_iterations", "mean global iterations between a delta's base and its applying", f.staleness},
        {"hogstream_network_staleness_max_iterations", "largest such staleness", static_cast<double>(f.staleness_max)},
        {"hogstream_network_median_iterations_per_second", "median rate of the machines training (stragglers lag it)", f.median_iter_per_s}};
    for (const auto& g : gauges) NamedGauge(g.name, g.help).Add({}).Set(g.v);
    const struct { const char* name; const char* help; uint64_t n; } counters[] = {
        {"hogstream_network_sent_bytes_total", "payload bytes sent", f.bytes_sent},
        {"hogstream_network_received_bytes_total", "payload bytes received", f.bytes_received},
        {"hogstream_network_messages_sent_total", "messages sent", f.messages_sent},
        {"hogstream_network_sweeps_total", "passes of this machine's masters over their chunks", f.sweeps},
        {"hogstream_network_positions_sent_total", "positions this machine's masters sent", f.positions_sent},
        {"hogstream_network_deltas_applied_total", "deltas this machine's masters applied", f.deltas_applied},
        {"hogstream_network_positions_answered_total", "positions of the others this machine answered", f.positions_answered},
        {"hogstream_network_positions_unanswered_total", "positions whose delta did not come in time", f.unanswered},
        {"hogstream_network_frames_lost_total", "frames dropped on the way or refused as corrupt", f.lost},
        {"hogstream_network_frames_foreign_total", "frames of another job, or from an address not in the job", f.foreign},
        {"hogstream_network_frames_malformed_total", "datagrams that are no frame or no message of this job's", f.malformed},
        {"hogstream_network_kernel_dropped_total", "datagrams the kernel dropped before this machine read them", f.kernel_dropped},
        {"hogstream_network_stale_dropped_total", "positions and deltas dropped as not current", f.stale},
        {"hogstream_network_reshares_total", "changes of chunk ownership", f.reshares},
        {"hogstream_network_recoveries_total", "times this machine re-took the weights after its copy went non-finite", f.recoveries},
        {"hogstream_network_svb_sent_bytes_total", "--svb: factor bytes sent", f.svb_bytes_sent}};
    for (const auto& c : counters) Count(NamedCounter(c.name, c.help).Add({}), c.n);
    const std::pair<const char*, uint64_t> refused[] = {
        {"mac", f.refused_mac}, {"value", f.refused_value}, {"control", f.control_refused}};
    for (const auto& [why, n] : refused) Count(NamedCounter("hogstream_network_refused_total", "frames (mac), deltas and positions (value) and control messages refused").Add({{"reason", why}}), n);
    if (!f.policy.empty()) {  // what the sharing policy made this machine's solvers do
      const pm::Labels l{{"policy", f.policy}};
      const PolicyFigures& pf = f.policy_figures;
      Count(NamedCounter("hogstream_policy_waits_total", "times a solver waited for the sharing policy (a clock bound, a round)").Add(l), pf.waits);
      Count(NamedCounter("hogstream_policy_rounds_total", "synchronous rounds (bsp, gsp) and easgd exchanges").Add(l), pf.rounds);
      Count(NamedCounter("hogstream_policy_unsound_steps_total", "bsp / gsp: steps left out of a round for a non-finite element").Add(l), pf.unsound);
      pm::Counter& secs = NamedCounter("hogstream_policy_wait_seconds_total", "seconds solvers waited for the sharing policy, summed").Add(l);
      double& last = wait_seconds_[&secs];
      if (pf.wait_seconds > last) secs.Increment(pf.wait_seconds - last);
      last = std::max(last, pf.wait_seconds);
    }
    static const pm::Histogram::BucketBoundaries bounds(std::begin(kStalenessBounds), std::end(kStalenessBounds));
    for (const PeerNetFigures& p : f.peers) {
      const pm::Labels l{{"peer", std::to_string(p.rank)}, {"name", p.name}};
      peer_up_.Add(l).Set(p.live ? 1 : 0);
      peer_ready_.Add(l).Set(p.ready ? 1 : 0);
      peer_leads_.Add(l).Set(p.leader ? 1 : 0);
      peer_lags_.Add(l).Set(p.straggler ? 1 : 0);
      peer_left_.Add(l).Set(p.left ? 1 : 0);
      peer_iter_.Add(l).Set(static_cast<double>(p.iterations));
      peer_rate_.Add(l).Set(p.iter_per_s);
      if (p.self) continue;  // its own deltas go to no master of its own
      Count(peer_deltas_.Add(l), p.deltas_applied);
      Count(peer_refused_.Add(l), p.refused);
      Count(peer_in_.Add(l), p.bytes_in);
      Count(peer_out_.Add(l), p.bytes_out);
      peer_in_rate_.Add(l).Set(p.gbit_in * 1e9);
      peer_out_rate_.Add(l).Set(p.gbit_out * 1e9);
      Count(peer_lost_.Add(l), p.frames_lost);
      const std::pair<const char*, uint64_t> frames[] = {
          {"foreign", p.frames_foreign}, {"mac", p.frames_bad_mac}, {"malformed", p.frames_malformed}};
      for (const auto& [why, n] : frames) {
        pm::Labels lr = l;
        lr.emplace("reason", why);
        Count(peer_frames_refused_.Add(lr), n);
      }
      // The histogram takes what came since the last report, bucket by bucket.
      PeerTotals& last = peers_[p.rank];
      std::vector<double> more(kStalenessBuckets);
      bool any = false;
      for (size_t b = 0; b < kStalenessBuckets; ++b) {
        more[b] = Delta(p.staleness[b], &last.staleness[b]);
        any = any || more[b] > 0;
      }
      const double sum = Delta(p.staleness_sum, &last.staleness_sum);
      if (any) peer_stale_.Add(l, bounds).ObserveMultiple(more, sum);
    }
  }

  void OnTest(const TestFigures& f) override {
    std::lock_guard<std::mutex> lock(mu_);
    test_iter_.Add({}).Set(static_cast<double>(f.iter));
    for (const auto& [name, v] : f.outputs)
      test_out_.Add({{"net", std::to_string(f.net)}, {"output", name}}).Set(v);
  }

 private:
  struct SegmentTotals {
    uint64_t bytes = 0, chunks = 0, dropped = 0, sweeps = 0, stale = 0;
  };
  struct PeerTotals {
    uint64_t staleness[kStalenessBuckets] = {};
    uint64_t staleness_sum = 0;
  };
  // The network's families, made at their first report.
  pm::Family<pm::Gauge>& NamedGauge(const char* name, const char* help) {
    auto it = named_gauges_.find(name);
    if (it == named_gauges_.end()) it = named_gauges_.emplace(name, &Gauge(name, help)).first;
    return *it->second;
  }
  pm::Family<pm::Counter>& NamedCounter(const char* name, const char* help) {
    auto it = named_counters_.find(name);
    if (it == named_counters_.end()) it = named_counters_.emplace(name, &Counter(name, help)).first;
    return *it->second;
  }
  // A counter from a running total (which starts again at 0 when its process restarts).
  void Count(pm::Counter& c, uint64_t total) { c.Increment(Delta(total, &totals_[&c])); }
  static double Delta(uint64_t now, uint64_t* last) {
    const double d = now >= *last ? static_cast<double>(now - *last) : 0.0;
    *last = std::max(now, *last);
    return d;
  }
  pm::Family<pm::Gauge>& Gauge(const char* name, const char* help) {
    return pm::BuildGauge().Name(name).Help(help).Register(*registry_);
  }
  pm::Family<pm::Counter>& Counter(const char* name, const char* help) {
    return pm::BuildCounter().Name(name).Help(help).Register(*registry_);
  }

  std::shared_ptr<pm::Registry> registry_;
  pm::Family<pm::Gauge>&iter_, &max_iter_, &img_, &loss_, &lr_, &leader_, &elapsed_, &train_out_,
      &test_out_, &test_iter_, &solver_iter_, &solver_img_;
  pm::Family<pm::Counter>&seg_bytes_, &seg_chunks_, &seg_drops_, &seg_sweeps_, &seg_stale_;
  pm::Family<pm::Gauge>&seg_rate_, &leads_;
  std::map<std::string, pm::Family<pm::Gauge>*> named_gauges_;
  std::map<std::string, pm::Family<pm::Counter>*> named_counters_;
  pm::Family<pm::Gauge>&peer_up_, &peer_ready_, &peer_leads_, &peer_lags_, &peer_left_, &peer_iter_, &peer_rate_;
  pm::Family<pm::Counter>&peer_deltas_, &peer_refused_, &peer_in_, &peer_out_;
  pm::Family<pm::Gauge>&peer_in_rate_, &peer_out_rate_;
  pm::Family<pm::Counter>&peer_lost_, &peer_frames_refused_;
  pm::Family<pm::Histogram>& peer_stale_;
  std::map<int, SegmentTotals> last_;
  std::map<const pm::Counter*, uint64_t> totals_;
  std::map<const pm::Counter*, double> wait_seconds_;
  std::map<int, PeerTotals> peers_;
  std::mutex mu_;  // last_; the families lock themselves
};

}  // namespace

bool MetricsAvailable() { return true; }

std::unique_ptr<MetricsText> MakeMetricsText() { return std::make_unique<PrometheusSink>(); }
#else
bool MetricsAvailable() { return false; }

std::unique_ptr<MetricsText> MakeMetricsText() {
  HS_FAIL() << "--metrics and --ui: this hogstream was built without prometheus-cpp and civetweb (install "
               "prometheus-cpp-dev and reconfigure)";
}
#endif

}  // namespace hogstream

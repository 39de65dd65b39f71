#include "observe/metrics.hpp"

#include <glog/logging.h>

#include <map>
#include <mutex>

#include "base/common.hpp"

#ifdef HOGSTREAM_PROMETHEUS
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#endif

namespace hogstream {

std::string MetricsAddress(const std::string& spec) {
  const auto colon = spec.rfind(':');
  const std::string host = colon == std::string::npos ? "127.0.0.1" : spec.substr(0, colon);
  const std::string port = colon == std::string::npos ? spec : spec.substr(colon + 1);
  HS_REQUIRE(!host.empty() && !port.empty() && port.size() <= 5 &&
             port.find_first_not_of("0123456789") == std::string::npos && std::stoi(port) <= 65535)
      << "--metrics wants [HOST:]PORT (PORT 0-65535), got '" << spec << "'";
  return host + ":" + port;
}

#ifdef HOGSTREAM_PROMETHEUS
namespace {

namespace pm = prometheus;

class PrometheusSink : public StatsSink {
 public:
  explicit PrometheusSink(const std::string& address)
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
        seg_rate_(Gauge("hogstream_segment_sweeps_per_second", "sweep rate, last ~0.5 s window")) {
    try {
      exposer_ = std::make_unique<pm::Exposer>(address, 1);
    } catch (const std::exception& e) {
      HS_FAIL() << "--metrics: cannot serve on " << address << " (port in use?): " << e.what();
    }
    exposer_->RegisterCollectable(registry_);
    const auto ports = exposer_->GetListeningPorts();
    LOG(INFO) << "Metrics on http://" << address.substr(0, address.rfind(':')) << ":"
              << (ports.empty() ? 0 : ports[0]) << "/metrics";
  }

  void OnTrain(TrainFigures& f) override {
    std::lock_guard<std::mutex> lock(mu_);
    iter_.Add({}).Set(static_cast<double>(f.iter));
    max_iter_.Add({}).Set(static_cast<double>(f.max_iter));
    img_.Add({}).Set(f.img_per_s);
    loss_.Add({}).Set(f.loss);
    lr_.Add({}).Set(f.lr);
    leader_.Add({}).Set(f.leader);
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
  pm::Family<pm::Gauge>& seg_rate_;
  std::map<int, SegmentTotals> last_;
  std::mutex mu_;  // last_; the families lock themselves
  std::unique_ptr<pm::Exposer> exposer_;  // last: stops serving before the registry goes
};

}  // namespace

bool MetricsAvailable() { return true; }

std::shared_ptr<StatsSink> StartMetrics(const std::string& spec) {
  return std::make_shared<PrometheusSink>(MetricsAddress(spec));
}
#else
bool MetricsAvailable() { return false; }

std::shared_ptr<StatsSink> StartMetrics(const std::string& spec) {
  MetricsAddress(spec);
  HS_FAIL() << "--metrics: this hogstream was built without prometheus-cpp (install "
               "prometheus-cpp-dev and reconfigure)";
}
#endif

}  // namespace hogstream

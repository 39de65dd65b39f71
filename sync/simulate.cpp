// The job simulator (simulate.hpp): N machines, one thread, one virtual clock.
// Events, earliest first (ties: deliveries, then daemons' sweeps, then reads, then steps; lower
// machine first): a frame arrives (the receiver's daemon answers positions and applies deltas
// at once), a daemon sweeps (PostPositions as much as its SweepPacer allows), a machine reads
// its weights for its step (read_at < 1), a machine steps (one iteration of its solver, whose
// global count is the job's).
#include "sync/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <memory>
#include <random>
#include <sstream>

#include "base/common.hpp"
#include "base/hash.hpp"
#include "core/context.hpp"
#include "core/group.hpp"
#include "core/io.hpp"
#include "core/net.hpp"
#include "core/proto/hogstream.pb.h"
#include "core/solver.hpp"
#include "sync/aggregate.hpp"
#include "sync/hogwild.hpp"  // SolverSeed
#include "sync/net_job.hpp"  // SweepPacer
#include "sync/segment.hpp"

namespace hogstream {

namespace {

// The job as the engine sees it: one global count that every machine's step claims from.
// Nobody leads (the simulator scores machine 0 itself), nothing stops or pauses.
class SimGroup : public Group {
 public:
  // `stride`: global iterations one claim counts (bsp: the machines whose batches a step takes).
  void set_stride(int64_t stride) { stride_ = stride; }
  int64_t Claim(int64_t stop_iter) override {
    if (iter_ >= stop_iter) return stop_iter;
    const int64_t it = iter_;
    iter_ += stride_;
    return it;
  }
  int64_t Reached() const override { return iter_; }
  void Completed(int rank) override { (void)rank; }
  std::vector<int64_t> Completions() const override { return {}; }
  bool Leads(int rank) const override { return (void)rank, false; }
  void TakeOverIfLeaderGone(int rank) override { (void)rank; }
  bool Stopping() const override { return false; }
  void Stop() override {}
  void AwaitGo() override {}
  void Request(SolverAction a) override { (void)a; }
  SolverAction Pending(int64_t* seen) const override { return (void)seen, SolverAction::NONE; }
  int64_t SnapshotRequests() const override { return 0; }
  End Finish(int rank) override { return (void)rank, End::kFollow; }
  bool StoppedEarly() const override { return false; }
  void Ended(bool ok) override { (void)ok; }

 private:
  int64_t iter_ = 0, stride_ = 1;
};

// The solver with each TRAIN Data layer's batch `times` as large (the net read into net_param).
pb::SolverParameter WithBatchTimes(pb::SolverParameter param, int times) {
  if (!param.has_net_param()) {
    HS_REQUIRE(param.has_net()) << "simulate --bsp: the solver names no net (net or net_param)";
    *param.mutable_net_param() = ReadNetText(param.net());
    param.clear_net();
  }
  int scaled = 0;
  for (pb::LayerParameter& l : *param.mutable_net_param()->mutable_layer()) {
    bool train = false;
    for (const pb::NetStateRule& r : l.include()) train |= r.has_phase() && r.phase() == pb::TRAIN;
    if (!train || !l.has_data_param()) continue;
    l.mutable_data_param()->set_batch_size(l.data_param().batch_size() * static_cast<uint32_t>(times));
    ++scaled;
  }
  HS_REQUIRE(scaled > 0) << "simulate --bsp: the net has no TRAIN-phase Data layer whose batch to scale";
  return param;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Machine {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Solver> solver;
  std::unique_ptr<MasterEndpoint> master;
  std::unique_ptr<SlaveEndpoint> slave;
  std::unique_ptr<Wire> wire;  // the daemon's reader of this machine's endpoint
  SweepPacer pacer{0, 0};
  double next_step_us = 0, next_sweep_us = 0, last_sweep_us = 0;
  double next_read_us = kInf;  // when its step reads the weights (read_at < 1; kInf: not before its end)
  std::vector<float> read;     // the weights as its step read them (read_at < 1)
  std::vector<float> landed;   // the weights at its step's end, what arrived meanwhile included
  int64_t steps = 0, swept_at_steps = 0;
};

class Simulation {
 public:
  Simulation(const pb::SolverParameter& solver, const SimulateOptions& opt,
             const std::function<void(const std::string&)>& progress)
      : opt_(opt), progress_(progress), param_(solver) {
    HS_REQUIRE(opt.machines >= 1 && opt.machines <= 4096)
        << "simulate: --machines from 1 to 4096, not " << opt.machines;
    HS_REQUIRE(opt.step_ms > 0) << "simulate: --step_ms must be > 0";
    HS_REQUIRE(opt.jitter >= 0 && opt.jitter < 1) << "simulate: --jitter in [0, 1)";
    HS_REQUIRE(opt.drift >= 0 && opt.drift <= 1) << "simulate: --drift in [0, 1]";
    HS_REQUIRE(opt.drift_steps >= 1) << "simulate: --drift_steps from 1";
    HS_REQUIRE(opt.read_at >= 0 && opt.read_at <= 1) << "simulate: --read_at in [0, 1]";
    HS_REQUIRE(opt.stragglers >= 0 && opt.stragglers <= opt.machines) << "simulate: --stragglers from 0 to --machines";
    HS_REQUIRE(opt.straggler_factor >= 1) << "simulate: --straggler_factor must be >= 1";
    HS_REQUIRE(opt.test_every > 0) << "simulate: --test_every must be > 0";
  }

  SimulateResult Run() {
    SetUp();
    SimulateResult r;
    r.machines = opt_.machines;
    r.rule = opt_.bsp ? bsp_line_ : opt_.machines > 1 ? aggregate_->Line() : "one machine";
    r.solver_lines = solver_lines_;
    for (double t : opt_.targets) r.crossings.push_back({t});
    Score(r);  // the starting point
    while (group_.Reached() < max_iter_ && !AllCrossed(r) && r.ended_early.empty()) {
      PeerId to = 0;
      const double t_net = net_ ? net_->NextDelivery(&to) : kInf;
      size_t sweeper = 0, reader = 0, stepper = 0;
      double t_sweep = kInf, t_read = kInf, t_step = kInf;
      for (size_t m = 0; m < machines_.size(); ++m) {
        if (net_ && machines_[m].next_sweep_us < t_sweep) t_sweep = machines_[m].next_sweep_us, sweeper = m;
        if (machines_[m].next_read_us < t_read) t_read = machines_[m].next_read_us, reader = m;
        if (machines_[m].next_step_us < t_step) t_step = machines_[m].next_step_us, stepper = m;
      }
      if (t_net <= t_sweep && t_net <= t_read && t_net <= t_step) {
        net_->AdvanceTo(t_net);
        Deliver(machines_[to]);
      } else if (t_sweep <= t_read && t_sweep <= t_step) {
        net_->AdvanceTo(t_sweep);
        Sweep(machines_[sweeper], t_sweep);
      } else if (t_read <= t_step) {
        net_->AdvanceTo(t_read);
        Read(machines_[reader]);
      } else {
        now_us_ = t_step;
        if (net_) net_->AdvanceTo(t_step);
        try {
          StepOne(stepper);
        } catch (const Error& e) {  // a diverged machine ends the job (a result, not a failure)
          r.ended_early = "machine " + std::to_string(stepper) + ": " + e.what();
          break;
        }
        // (a bsp step counts N global iterations: scored when it passes a multiple)
        const int64_t reached = group_.Reached();
        if (reached / opt_.test_every != last_scored_ / opt_.test_every || reached >= max_iter_) Score(r);
      }
    }
    r.iterations = group_.Reached();
    r.virtual_s = now_us_ / 1e6;
    if (net_) {
      r.bytes = net_->bytes_sent();
      r.lost = net_->messages_lost();
    }
    for (Machine& m : machines_) {
      if (!m.master) continue;
      const MasterEndpoint::Stats s = m.master->stats();
      r.deltas_applied += s.deltas_applied;
      r.deltas_refused += s.refused_nonfinite + s.refused_absurd;
      for (const auto& [peer, f] : m.master->source_stats())
        for (size_t b = 0; b < kStalenessBuckets; ++b) r.staleness[b] += f.staleness[b];
    }
    Net& net0 = machines_[0].solver->net();
    r.weights_hash = Digest64(net0.param_data(), net0.param_buffer_size() * sizeof(float));
    return r;
  }

 private:
  void SetUp() {
    const int n = opt_.machines;
    pb::SolverParameter param = param_;
    param.set_display(0);
    param.set_snapshot(0);
    param.set_snapshot_after_train(false);
    param.set_solver_mode(pb::SolverParameter::CPU);
    HS_REQUIRE(param.test_iter_size() > 0) << "simulate: the solver has no test net (test_iter) to score";
    max_iter_ = opt_.max_iter > 0 ? opt_.max_iter : param.max_iter();
    HS_REQUIRE(max_iter_ > 0) << "simulate: no max_iter (the solver's, or --max_iter)";
    param.set_max_iter(static_cast<int>(std::min<int64_t>(max_iter_, std::numeric_limits<int>::max())));
    // Each machine's speed: a straggler factor and its own stream of jitter (bsp draws all N).
    for (int m = 0; m < n; ++m)
      speeds_.push_back({m >= n - opt_.stragglers ? opt_.straggler_factor : 1.0,
                         std::mt19937_64(opt_.seed * 0x100000001B3ULL + static_cast<uint64_t>(m))});
    base_seed_ = param.random_seed() >= 0 ? static_cast<uint64_t>(param.random_seed()) : 0;
    if (opt_.bsp) {
      SetUpBsp(param);
      return;
    }
    if (n > 1) {
      AggregateSetting as;
      as.machines = n;
      as.offers_share = true;
      as.solver = &param;
      as.epoch = opt_.epoch;
      aggregate_ = MakeAggregate(opt_.aggregate, as);
      solver_lines_ = aggregate_->AdjustJobSolver(n, &param);
    }
    machines_.resize(n);
    for (int m = 0; m < n; ++m) {
      Machine& me = machines_[m];
      SolverOptions so = Options(me, m);
      me.ctx->set_data_partition(static_cast<double>(m) / n, 1.0 / n);
      pb::SolverParameter mine = param;
      if (m > 0) {  // only machine 0's copy is scored
        mine.clear_test_iter();
        mine.clear_test_net();
        mine.clear_test_net_param();
        mine.clear_test_state();
        mine.set_test_interval(0);
      }
      if (aggregate_) {
        so.norm_guard = aggregate_->norm_guard();
        so.lr_factor = aggregate_->LrFactor();
      }
      ContextScope scope(me.ctx.get());
      me.solver = CreateSolver(mine, so);
    }
    // Every copy starts from machine 0's weights (a real job's machines take the leader's).
    Net& net0 = machines_[0].solver->net();
    const size_t floats = net0.param_buffer_size();
    for (int m = 1; m < n; ++m) {
      Net& net = machines_[m].solver->net();
      HS_CHECK_EQ(net.param_buffer_size(), floats);
      std::copy(net0.param_data(), net0.param_data() + floats, net.param_data());
    }
    for (int m = 0; m < n; ++m) Schedule(m);
    if (n > 1) Connect(net0);
  }

  // Machine `rank`'s Context (one BLAS thread, its own seed) and the options of its solver.
  SolverOptions Options(Machine& me, int rank) {
    me.ctx = std::make_unique<Context>(Mode::CPU, 0, SolverSeed(base_seed_ + opt_.seed, rank));
    me.ctx->set_threads(1);
    SolverOptions so;
    so.log = opt_.log;
    so.reseed = false;
    so.group = &group_;
    so.rank = rank;
    return so;
  }

  // The synchronous reference: one solver on the N machines' batches at once.
  void SetUpBsp(pb::SolverParameter param) {
    const int n = opt_.machines;
    HS_REQUIRE(opt_.bsp_lr > 0 && opt_.bsp_warmup >= 0) << "simulate --bsp: lr multiplier > 0, warm-up >= 0";
    param = WithBatchTimes(std::move(param), n);
    group_.set_stride(n);
    std::ostringstream os;
    os << "bsp: " << n << " x the batch, base_lr x " << opt_.bsp_lr;
    if (opt_.bsp_warmup > 0) os << " after a linear warm-up over " << opt_.bsp_warmup << " global iterations";
    bsp_line_ = os.str();
    machines_.resize(1);
    Machine& me = machines_[0];
    SolverOptions so = Options(me, 0);
    const double mult = opt_.bsp_lr;
    const auto warmup = static_cast<double>(opt_.bsp_warmup);
    so.lr_factor = [mult, warmup](int64_t it) {
      return warmup > 0 && static_cast<double>(it) < warmup ? 1 + (mult - 1) * static_cast<double>(it) / warmup : mult;
    };
    ContextScope scope(me.ctx.get());
    me.solver = CreateSolver(param, so);
    // The slowest machine's step, then a ring all-reduce: 2 (N - 1) / N of the gradient's
    // bytes over each link, and 2 (N - 1) latencies.
    const double bytes = static_cast<double>(me.solver->net().param_buffer_size()) * sizeof(float);
    if (n > 1)
      allreduce_us_ = 2.0 * (n - 1) / n * bytes * 8 / (opt_.link.gbit_per_s * 1000) + 2.0 * (n - 1) * opt_.link.latency_us;
    me.next_step_us = BspStepUs();
  }

  // Machine m's next step time, in step_ms: its factor, its drift moved on a step, with its
  // jitter drawn.
  double Draw(size_t m) {
    Speed& s = speeds_[m];
    double f = s.factor;
    if (opt_.drift > 0) {
      const double rho = std::exp(-1.0 / opt_.drift_steps);
      s.drift = rho * s.drift + opt_.drift * std::sqrt(1 - rho * rho) * std::normal_distribution<double>()(s.rng);
      f *= std::exp(s.drift);
    }
    if (opt_.jitter <= 0) return f;
    return f * (1 + std::uniform_real_distribution<double>(-opt_.jitter, opt_.jitter)(s.rng));
  }

  double BspStepUs() {
    double slowest = 0;
    for (size_t m = 0; m < speeds_.size(); ++m) slowest = std::max(slowest, Draw(m));
    return now_us_ + opt_.step_ms * 1000.0 * slowest + allreduce_us_;
  }

  // The segments: machine r masters its share of the chunks (ShareChunks, as a job's even
  // shares) and multicasts their positions; it is a slave of every other chunk.
  void Connect(Net& net0) {
    const int n = opt_.machines;
    net_ = std::make_unique<SimNetwork>(n, opt_.link, opt_.seed);
    const uint32_t payload = Wire(net_->endpoint(0)).caps().max_payload;
    uint32_t chunk = opt_.chunk_floats ? opt_.chunk_floats : payload / sizeof(float) / 4 * 4;
    HS_REQUIRE(chunk > 0 && chunk * sizeof(float) <= payload)
        << "simulate: --chunk_floats must be from 1 to " << payload / sizeof(float);
    layout_ = std::make_unique<ChunkLayout>(net0.param_buffer_size(), chunk);
    std::vector<PeerId> peers(n);
    for (int m = 0; m < n; ++m) peers[m] = static_cast<PeerId>(m);
    const std::vector<PeerId> owners = ShareChunks(layout_->count, peers);
    SegmentRule rule;
    rule.aggregate = aggregate_;
    rule.updates = std::make_shared<ChunkUpdates>(layout_->count);
    for (int m = 0; m < n; ++m) {
      Machine& me = machines_[m];
      float* w = me.solver->net().param_data();
      Transport* t = net_->endpoint(static_cast<PeerId>(m));
      std::vector<uint32_t> owned;
      for (uint32_t c = 0; c < layout_->count; ++c)
        if (owners[c] == m) owned.push_back(c);
      if (!owned.empty()) {
        me.master = std::make_unique<MasterEndpoint>(w, *layout_, t, Dest::Group(0), Access::kPlain, FlowOptions{});
        me.master->set_owned(owned);
        me.master->set_receivers(static_cast<uint32_t>(n - 1));
        me.master->set_rule(rule);
        me.master->set_epoch(1);
      }
      me.slave = std::make_unique<SlaveEndpoint>(w, *layout_, t);
      me.slave->set_owners(owners, static_cast<PeerId>(m));
      me.wire = std::make_unique<Wire>(t);
      me.pacer = SweepPacer(opt_.sweep_ms, opt_.sweeps_per_iter);
      // The daemons' sweeps start spread over one period, as machines that started apart.
      me.next_sweep_us = opt_.sweep_ms * 1000.0 * m / n;
      me.last_sweep_us = me.next_sweep_us;
    }
  }

  // Machine m's next step, from now: when it ends and, where the step reads the weights before
  // its end (read_at < 1, in a job of several machines), when it reads them.
  void Schedule(size_t m) {
    Machine& me = machines_[m];
    const double took = opt_.step_ms * 1000.0 * Draw(m);
    me.next_step_us = now_us_ + took;
    me.next_read_us = opt_.read_at < 1 && opt_.machines > 1 ? now_us_ + opt_.read_at * took : kInf;
  }

  // The weights the machine's step computes its gradient on.
  void Read(Machine& me) {
    const Net& net = me.solver->net();
    me.read.assign(net.param_data(), net.param_data() + net.param_buffer_size());
    me.next_read_us = kInf;
  }

  void StepOne(size_t m) {
    Machine& me = machines_[m];
    float* w = me.solver->net().param_data();
    const size_t floats = me.solver->net().param_buffer_size();
    const bool stale = !me.read.empty();
    if (stale) {  // the step on the weights it read; its update onto what landed since
      me.landed.assign(w, w + floats);
      std::copy(me.read.begin(), me.read.end(), w);
    }
    {
      ContextScope scope(me.ctx.get());
      me.solver->Step(1);
    }
    if (stale) {
      for (size_t i = 0; i < floats; ++i) w[i] = me.landed[i] + (w[i] - me.read[i]);
      me.read.clear();
    }
    ++me.steps;
    if (opt_.bsp)
      me.next_step_us = BspStepUs();
    else
      Schedule(m);
  }

  // The daemon's sweep: as NetJob::Post, on virtual time.
  void Sweep(Machine& me, double at) {
    const double seconds = (at - me.last_sweep_us) / 1e6;
    me.last_sweep_us = at;
    me.next_sweep_us = at + std::max(1u, opt_.sweep_ms) * 1000.0;
    if (!me.master) return;
    const int64_t stepped = me.steps - me.swept_at_steps;
    me.swept_at_steps = me.steps;
    me.master->set_clock(static_cast<uint64_t>(group_.Reached()));
    const size_t allowed = me.pacer.Allow(me.master->sweep_length(), seconds, stepped);
    if (allowed > 0) me.pacer.Spent(me.master->PostPositions(allowed));
  }

  // The daemon's receive: every frame that has arrived, through NetJob's data plane (TakeData).
  void Deliver(Machine& me) {
    Message batch[64];
    for (;;) {
      const size_t got = me.wire->Poll(batch, std::size(batch));
      if (got == 0) break;
      for (size_t i = 0; i < got; ++i) {
        const Message& m = batch[i];
        if (m.h.kind == MsgKind::kDelta && me.master) me.master->set_clock(static_cast<uint64_t>(group_.Reached()));
        HS_CHECK(TakeData(m, *me.slave, me.master.get(), *me.wire))
            << "simulate: the simulated network ran out of send slots";
      }
      me.wire->Release(got);
      me.wire->Flush();
    }
  }

  // Scores machine 0's copy; a copy gone non-finite (where Caffe's Accuracy would count every
  // record right: no score above a NaN) ends the job instead (`ended_early`), not scored.
  void Score(SimulateResult& r) {
    Machine& m0 = machines_[0];
    std::vector<std::vector<float>> out;
    {
      ContextScope scope(m0.ctx.get());
      out = m0.solver->TestAll();
    }
    const Net& net0 = m0.solver->net();
    const float* w = net0.param_data();
    const bool finite = AllFinite(w, net0.param_buffer_size()) &&
                        std::all_of(out.begin(), out.end(),
                                    [](const std::vector<float>& o) { return AllFinite(o.data(), o.size()); });
    if (!finite) {
      r.ended_early = "machine 0: its weights or test outputs are not finite at global iteration " +
                      std::to_string(group_.Reached()) + " (diverged: lower base_lr?)";
      return;
    }
    if (score_slot_ < 0) {
      const std::vector<OutputSlot> slots = CaffeOutputOrder(*m0.solver->test_nets()[0]);
      for (const OutputSlot& s : slots)
        if (s.name == opt_.score) score_slot_ = static_cast<int>(s.flat);
      HS_REQUIRE(score_slot_ >= 0) << "simulate: the test net has no output named \"" << opt_.score << "\"";
    }
    last_scored_ = group_.Reached();
    const SimulateResult::Point p{group_.Reached(), now_us_ / 1e6, out[0][score_slot_]};
    for (SimulateResult::Crossing& c : r.crossings) {
      if (c.iter >= 0 || p.score < c.target) continue;
      if (r.curve.empty()) {
        c.iter = static_cast<double>(p.iter), c.virtual_s = p.virtual_s;
        continue;
      }
      const SimulateResult::Point& q = r.curve.back();
      const double f = (c.target - q.score) / (p.score - q.score);  // q.score < target <= p.score
      c.iter = q.iter + f * static_cast<double>(p.iter - q.iter);
      c.virtual_s = q.virtual_s + f * (p.virtual_s - q.virtual_s);
    }
    r.curve.push_back(p);
    if (progress_) {
      std::ostringstream os;
      os << "simulate: " << opt_.machines << " machines, iteration " << p.iter << ", " << std::fixed
         << std::setprecision(1) << p.virtual_s << " s virtual: " << opt_.score << " = " << std::setprecision(4)
         << p.score;
      progress_(os.str());
    }
  }

  bool AllCrossed(const SimulateResult& r) const {
    if (r.crossings.empty()) return false;
    for (const SimulateResult::Crossing& c : r.crossings)
      if (c.iter < 0) return false;
    return true;
  }

  const SimulateOptions opt_;
  std::function<void(const std::string&)> progress_;
  const pb::SolverParameter param_;
  int64_t max_iter_ = 0;
  SimGroup group_;
  std::shared_ptr<AggregateRule> aggregate_;
  std::vector<std::string> solver_lines_;
  std::unique_ptr<SimNetwork> net_;  // (before the machines: their endpoints go first)
  std::unique_ptr<ChunkLayout> layout_;
  std::vector<Machine> machines_;
  double now_us_ = 0;
  int score_slot_ = -1;
  int64_t last_scored_ = 0;
  std::string bsp_line_;
  struct Speed {
    double factor;         // its step time, in step_ms
    std::mt19937_64 rng;   // its steps' jitter and drift
    double drift = 0;      // its log-speed drift now (SimulateOptions::drift)
  };
  std::vector<Speed> speeds_;  // per machine (bsp: the N machines its one solver stands for)
  uint64_t base_seed_ = 0;     // the solver's random_seed (0: none)
  double allreduce_us_ = 0;
};

}  // namespace

SimulateResult Simulate(const pb::SolverParameter& solver, const SimulateOptions& opt,
                        const std::function<void(const std::string&)>& progress) {
  Simulation s(solver, opt, progress);
  return s.Run();
}

}  // namespace hogstream

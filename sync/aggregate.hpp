// Aggregation: how a master takes the progress of others — the one room for it. A rule is one
// class behind AggregateRule, registered by name (HS_REGISTER_AGGREGATE, as Caffe's layers
// are), chosen with --aggregate=NAME[,KEY=VALUE...]. It owns:
//  - the weight (or transform) of each arriving delta: MasterEndpoint (sync/segment.cpp) and
//    GpuSegment (sync/gpu_segment.cpp) both call Take, one code path;
//  - any state it keeps per chunk (an outer optimizer's momentum at the chunk's owner);
//  - how the solvers' lr and momentum change under it (AdjustJobSolver, AdjustLocalSolver), and
//    their norm guard;
//  - its log line (Line) and the text the machines hash to agree on (Agreement, generated from
//    its own fields: a field cannot be left out of the agreement by hand).
// Not for: codecs and weed-out (the policy's, sync/policy.hpp), staleness counting (ChunkUpdates,
// sync/segment.hpp: the rule receives a delta's staleness), the transport.
//
// Adding a rule: a class here (aggregate.cpp) deriving from AggregateRule, its fields declared
// with Field(), one HS_REGISTER_AGGREGATE line, and its test (test/sync/aggregate_test.cc).
//
// Threads: Weight, Line, Agreement and the Adjust calls are const and may be called from any thread.
// Take is called by the thread that drives the master buffer; a rule with per-chunk state
// (stateful() true) must be driven by one thread per master buffer (a job's daemon is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.hpp"  // PeerId

namespace hogstream {

namespace pb {
class SolverParameter;
}

enum class Access;  // sync/segment.hpp

// What a caller offers when it makes a rule: the job around the master.
struct AggregateSetting {
  int machines = 1;          // machines whose deltas the master takes (1: a policy whose rounds average)
  float default_scale = 1;   // the staleness weights' scale: 1 for machines, 2 for private copies, gsp's
  bool policy_weights = false;  // the policy asks for 1/staleness weights (--staleness-weight, gsp)
  bool offers_share = false;    // deltas added whole across machines: the momentum share and local= apply
  const pb::SolverParameter* solver = nullptr;  // the run's solver (max_iter: the run's global iterations)
  // Global iterations in one epoch of the training data (data/'s EpochIterations; 0 or unset:
  // unknown), asked only when a field is given in epochs (a source is opened only then).
  std::function<uint64_t()> epoch;
};

// One delta as a rule sees it.
struct DeltaInfo {
  PeerId source = kNoPeer;
  uint32_t chunk = 0;
  uint64_t staleness = 1;  // in updates: the others' deltas applied to its chunk since the sender's previous one, + 1
  uint64_t age = 0;        // in global iterations: the master's clock - the clock its progress started from
  uint64_t clock = 0;      // the master's clock (the job's global iteration; 0 where none is kept)
};

class AggregateRule {
 public:
  virtual ~AggregateRule() = default;
  const std::string& name() const { return name_; }

  // The weight of one delta, in [0, 1]: the rule's own (Own) times the common envelope (a ramp
  // over the first global iterations, a cool-down, a damping by age; all off by default).
  float Weight(const DeltaInfo& d) const;
  // Applies a delta to the master's chunk (`master` at the chunk's start, `len` floats) and
  // returns the weight it was taken at (0: not applied). The default adds weight x delta.
  float Take(const DeltaInfo& d, float* master, const float* delta, uint32_t len, Access access);
  // Whether Take keeps state per chunk (then Bind before the first Take; one driving thread).
  virtual bool stateful() const { return false; }
  // Sizes the rule's per-chunk state for a master buffer of n floats in `chunks` chunks.
  virtual void Bind(size_t n, uint32_t chunks) { (void)n, (void)chunks; }

  // The solvers' rates under this rule, in two steps: what every machine of a job of
  // `job_machines` does alike (the momentum share), before the machines agree on the solver's
  // settings; then what this machine's own count of solvers asks (local=), after. Each change
  // in one log line (none: empty).
  virtual std::vector<std::string> AdjustJobSolver(int job_machines, pb::SolverParameter* param) const;
  std::string AdjustLocalSolver(int local_solvers, pb::SolverParameter* param) const;
  // > 0: each solver clips a gradient beyond this many times the mean of its recent norms.
  virtual double norm_guard() const { return 0; }
  // Each solver's lr multiplier by global iteration under this rule (SolverOptions::lr_factor;
  // empty: none).
  virtual std::function<double(int64_t)> LrFactor() const { return {}; }
  // The job's speed in machines' steps when the solvers share their momentum (0: they do not).
  virtual double share_speed() const { return 0; }
  double local_speed() const { return local_; }
  // The weight another machine's delta gets at equal pace (staleness machines - 1).
  double EqualPaceWeight(int machines) const;
  // Deltas whose RMS passes `absurd` times both the chunk's recent ones and its values are
  // refused (0: no bound; non-finite ones always are).
  float absurd() const { return static_cast<float>(absurd_); }

  // What it does, in one phrase for the log.
  std::string Line() const;
  // What every machine must share: the name and each field's value.
  std::string Agreement() const;

  // A field a user may set (KEY=VALUE): its key, what it means, and where it lives.
  struct FieldInfo {
    std::string key, help;
    double* value;
    double min, max;
    bool run_share;  // may be "N%" of the run's global iterations, or "Nep": N epochs of the training data
  };
  const std::vector<FieldInfo>& fields() const { return fields_; }
  // Sets a field from text ("N", or "N%" and "Nep" where allowed); a mistake is one line naming it.
  void Set(const std::string& key, const std::string& value);
  // After the fields are set: checks them together (one line on a mistake).
  virtual void Check() const;

 protected:
  AggregateRule(std::string name, const AggregateSetting& setting);
  // The rule's own weight of a delta (the envelope multiplies it).
  virtual double Own(const DeltaInfo& d) const { (void)d; return 1; }
  // The rule's own part of Line(), first.
  virtual std::string OwnLine() const = 0;
  // Applies a taken delta (Take's default: master += weight x delta).
  virtual void Apply(const DeltaInfo& d, float weight, float* master, const float* delta, uint32_t len, Access access);
  void Field(std::string key, double* value, double min, double max, std::string help, bool run_share = false);

  AggregateSetting setting_;
  uint64_t run_ = 0;  // the run's global iterations (0: unknown)
  // The envelope, common to every rule (sync/README.md, "Aggregation").
  double warmup_ = 0, from_ = 1;           // ramp from `from_` at clock 0 to 1 at `warmup_` (0: none)
  double cool_ = 0, cooled_ = 0, to_ = 1;  // from 1 at `cool_` down to `to_` at `cooled_` (cooled_ <= cool_: none)
  double budget_ = 0;                      // age beyond which a delta is damped by budget / age (0: never)
  double absurd_ = 100;
  double local_ = 0;                       // a machine of n solvers moves at min(n, local) solvers' speed

 private:
  std::string name_;
  std::vector<FieldInfo> fields_;
};

using AggregateFactory = std::function<std::unique_ptr<AggregateRule>(const AggregateSetting&)>;

// The registry of rules by name (every rule in aggregate.cpp registers itself).
struct AggregateRegistry {
  struct Entry {
    std::string name, help;
    AggregateFactory make;
  };
  static bool Add(Entry e);
  static const Entry* Find(const std::string& name);
  static std::vector<std::string> Names();
};
#define HS_REGISTER_AGGREGATE(NAME, HELP, CLASS)                                                  \
  static const bool hs_aggregate_registered_##CLASS = ::hogstream::AggregateRegistry::Add(      \
      {NAME, HELP, [](const ::hogstream::AggregateSetting& s) -> std::unique_ptr<::hogstream::AggregateRule> { \
         return std::make_unique<CLASS>(s);                                                     \
       }})

// --aggregate=TEXT: "auto" (or empty), a registered rule's name ("NAME" or "NAME=V", V its
// field of the same name), and KEY=VALUE items over the rule's defaults. Without a name, auto
// picks the rule for the setting (AutoRuleName), where "weight=1" asks for the staleness
// weights and "weight=0" for none. A mistake is one line naming --aggregate.
std::shared_ptr<AggregateRule> MakeAggregate(const std::string& text, const AggregateSetting& setting);
// The rule auto picks: "average" from kAverageFrom machines up where the deltas are added
// across machines (the share is offered), the solver is SGD or Nesterov (the linear scaling
// rule is theirs) and nothing asks for the weights; else "staleness" where the policy asks for
// the weights or from 3 machines up; else "sum". No default follows the run's length.
std::string AutoRuleName(const AggregateSetting& setting);
// The rule of a master that nobody configured: every delta whole (or the policy's weights).
std::shared_ptr<AggregateRule> DefaultAggregate(bool policy_weights = false, float scale = 1);

// --aggregate=schedule's constants (measured at 4 and 8 machines: docs/experiments/).
constexpr int kScheduleSpeed = 4;              // top speed in machines' steps
constexpr uint64_t kScheduleWarmup = 1000;     // global iterations of the ramp
constexpr uint64_t kScheduleBudget = 8;        // age in global iterations before a delta is damped
constexpr double kScheduleWeight = 1.0 / 3;    // the least weight of the others' deltas, early and late
constexpr double kScheduleCoolFrom = 0.25;     // the cool-down's start and end, shares of the run
constexpr double kScheduleCoolUntil = 0.58;
// --aggregate=average's default lr multiplier (AverageLr): the machines M up to kAverageTopLr;
// past that, kAverageTopLr^2 / M, and never below kAverageTopLr / 2. In virtual time (LeNet,
// docs/experiments/2026-12-06-thirty-two-and-sixty-four.md): x 16 held at 16 machines (SE 0.87
// to 0.89), diverged at 32 (ramps of 0.5 and 1 epoch; at 2 epochs it held, at the edge); x 8 held
// at 32 and 64, and x 4 at 64 learnt less than x 8.
constexpr double kAverageTopLr = 16;
double AverageLr(int machines);
// ... and its ramp, in epochs of the training data: half an epoch below kAverageTopLr machines
// (LeNet at 8 machines: one epoch learnt less); from kAverageTopLr machines max(1, M / 32)
// epochs (at 16 machines x 16 diverged after half an epoch in 1 seed of 3 under jitter and a
// straggler, and held after one; at 64 x 8 diverged after half an epoch and held after two).
constexpr double kAverageRampEpochs = 0.5;
// The least machines auto averages: at 3 and 4, in virtual time, averaging reached LeNet's 0.89
// with SE 1.09 and 1.06 where the schedule had 1.09 and 0.93, and cifar10_quick's 0.70 at 3
// machines with SE 0.82 (final 0.747, and 0.745 at 4) where the schedule never reached it
// (final 0.683 and 0.62) (docs/experiments/2026-12-06-average.md). Below it, two machines add
// each other's deltas whole ("sum").
constexpr int kAverageFrom = 3;
// The momentum share of a job of `machines` whose deltas are added whole: each machine's
// solver takes momentum 1 - machines x (1 - momentum) (at least 0), since the asynchrony
// between machines acts as the rest of the momentum, and base_lr such that its speed,
// lr / (1 - momentum), is speed / machines of the solver's: the job moves at `speed` times one
// machine's speed. Only for SGD and Nesterov with momentum; returns one line saying what
// changed ("" = nothing).
constexpr int kShareMomentumSpeed = 3;
// `floor` (<= 0): the least momentum a solver takes; below 0 where the asynchrony between many
// machines acts as more momentum than the recipe's (1 - machines x (1 - momentum) < 0).
std::string ShareMomentum(int machines, double speed, pb::SolverParameter* param, double floor = 0);
// Under the momentum share every solver also guards its gradient's norm (core/solver.hpp's
// NormGuard): a job at several times the recipe's rate, its machines' steps meeting late, can
// run away in a few dozen iterations.
constexpr double kShareNormGuard = 3;
// Several solvers on one machine: each one's base_lr is scaled by min(n, speed) / n, so the
// machine moves at min(n, speed) solvers' speed. Returns one line saying what changed.
constexpr double kJobSolverSpeed = 4;  // measured: 4 machines x 4 solvers, 2 x 4 and 4 x 2
std::string SolverLocalShare(int solvers, double speed, pb::SolverParameter* param);
// gsp across machines: the default `scale` of the 1/staleness weights between its machines,
// min(machines - 1, kJobSolverSpeed - 1) (at least 1). At equal pace each delta reaches a master
// after the other machines' (staleness about machines - 1), so a group mate's delta, which its
// round already made synchronous, and the other groups' come whole; only a machine that falls
// behind is weighted down. With scale 1 every delta was cut to about 1/3 at 4 machines, and gsp
// ended 0.7-0.8 points short of one solver (docs/experiments/2026-11-27-bsp-gsp-across-machines.md).
float GspWeightScale(int machines);
// easgd's rate (docs/experiments/2026-11-27-easgd-centre-rate.md). The centre is the
// mean of its copies, so at the recipe's rate a job of T copies ends where one solver is after
// 1/T of the iterations; and it trails them: a copy drifting v per iteration, pulled toward the
// centre every P iterations, moves the centre at K / (1 + K) v in the steady state, where K is
// how many pulls of that size the centre (or this machine's share of it) takes per period: the
// `solvers` of this process whole, and each other machine's `solvers` pulls (their sum, one
// delta) by `weight`, the aggregation's weight at equal pace:
//   K = solvers (1 + (machines - 1) weight).
// Each solver's base_lr is therefore multiplied by
//   min(machines x solvers, kEasgdSpeed) (1 + K) / K
// so that the centre moves as one solver on min(T, kEasgdSpeed) batches together (the linear
// scaling of larger batches). 1 for a single copy.
constexpr int kEasgdSpeed = 4;  // measured: 8 machines at 8 times the rate diverged in 1 of 3 runs
double EasgdSpeed(int machines, int solvers, double weight);
// Multiplies base_lr by `speed` (EasgdSpeed); returns one line saying so ("" = nothing).
std::string EasgdSpeedUp(int copies, double speed, pb::SolverParameter* param);

// Whether the momentum share can change this solver (SGD or Nesterov with a momentum in (0, 1)).
bool MomentumShareable(const pb::SolverParameter& param);

// The value check every master makes before a rule sees a delta: a non-finite element, or an
// RMS beyond `absurd` times both the chunk's recent deltas' (once 8 were seen) and the chunk's
// own values', is refused. One per master buffer; its driving thread only.
class DeltaCheck {
 public:
  explicit DeltaCheck(uint32_t chunks = 0) : rms_(chunks, 0.f), seen_(chunks, 0) {}
  enum Verdict { kOk, kNonFinite, kAbsurd };
  // `values`: the master's chunk (read only when the delta is beyond the recent ones).
  Verdict Check(uint32_t chunk, const float* delta, const float* values, uint32_t len, float absurd);

 private:
  std::vector<float> rms_;      // per chunk: the recent RMS of its accepted non-zero deltas
  std::vector<uint8_t> seen_;   // per chunk: how many went into it (up to 8)
};

// Sum of squares (vectorised; non-finite if any element is, or if the sum overflows).
float SumSquares(const float* x, size_t n);
// Whether every element is finite (vectorised).
bool AllFinite(const float* x, size_t n);
// w += k d over n floats, with the access the master's writers need.
void AddScaled(float* w, const float* d, size_t n, Access a, float k);

}  // namespace hogstream

// The aggregation rules and their registry (sync/aggregate.hpp says what a rule owns).
#include "sync/aggregate.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>

#include "base/common.hpp"
#include "core/proto/hogstream.pb.h"
#include "sync/segment.hpp"  // Access

namespace hogstream {

// ---------------------------------------------------------------- the arithmetic

float SumSquares(const float* __restrict x, size_t n) {
  float acc[16] = {};  // 16 lanes: vectorised without reassociating flags
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t k = 0; k < 16; ++k) acc[k] += x[i + k] * x[i + k];
  float s = 0;
  for (; i < n; ++i) s += x[i] * x[i];
  for (float a : acc) s += a;
  return s;
}

bool AllFinite(const float* __restrict x, size_t n) {
  float acc[16] = {};  // x * 0 is 0 for a finite x, NaN otherwise; 16 lanes, as above
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t k = 0; k < 16; ++k) acc[k] += x[i + k] * 0.f;
  float rest = 0;
  for (; i < n; ++i) rest += x[i] * 0.f;
  for (float a : acc) rest += a;
  return rest == 0.f;
}

void AddScaled(float* __restrict w, const float* __restrict d, size_t n, Access a, float k) {
  if (a == Access::kPlain && k == 1) {
    for (size_t i = 0; i < n; ++i) w[i] += d[i];
  } else if (a == Access::kPlain) {
    for (size_t i = 0; i < n; ++i) w[i] += k * d[i];
  } else {  // relaxed atomics: the solvers write w concurrently (sync/segment.hpp, Access)
    for (size_t i = 0; i < n; ++i) {
      std::atomic_ref<float> x(w[i]);
      x.store(x.load(std::memory_order_relaxed) + k * d[i], std::memory_order_relaxed);
    }
  }
}

DeltaCheck::Verdict DeltaCheck::Check(uint32_t c, const float* d, const float* values, uint32_t len, float absurd) {
  const float ss = SumSquares(d, len);
  if (!std::isfinite(ss)) return kNonFinite;
  const float per = static_cast<float>(std::max<uint32_t>(len, 1));
  const float rms = std::sqrt(ss / per);
  bool beyond = absurd > 0 && seen_[c] >= 8 && rms > absurd * rms_[c];
  // Beyond the recent deltas (a delta many steps long, after a stall) is absurd only if beyond
  // the chunk's own scale too (a diverging machine's is beyond both).
  if (beyond) beyond = !(rms <= absurd * std::sqrt(SumSquares(values, len) / per));
  if (beyond) return kAbsurd;
  if (rms > 0) {  // a zero delta (a machine with no progress) says nothing of the scale
    rms_[c] = seen_[c] ? 0.9f * rms_[c] + 0.1f * rms : rms;
    if (seen_[c] < 8) ++seen_[c];
  }
  return kOk;
}

// ---------------------------------------------------------------- the base rule

AggregateRule::AggregateRule(std::string name, const AggregateSetting& setting)
    : setting_(setting), name_(std::move(name)) {
  if (setting.solver && setting.solver->max_iter() > 0) run_ = static_cast<uint64_t>(setting.solver->max_iter());
  Field("warmup", &warmup_, 0, 1e18, "global iterations of the ramp of the weights (0: none)", true);
  Field("from", &from_, 0, 1, "the ramp's first weight");
  Field("cool", &cool_, 0, 1e18, "the global iteration where the cool-down starts", true);
  Field("cooled", &cooled_, 0, 1e18, "the global iteration where it ends", true);
  Field("to", &to_, 0, 1, "the weight at the cool-down's end");
  Field("budget", &budget_, 0, 1e18, "age in global iterations beyond which a delta is damped (0: never)");
  Field("absurd", &absurd_, 0, 1e30, "the RMS bound of a delta against the chunk's recent ones (0: none)");
  if (setting.offers_share) {
    // Several solvers on one machine: the job's speed counted in solvers' steps (SolverLocalShare).
    local_ = setting.machines >= 2 ? std::max(1.0, kJobSolverSpeed / setting.machines) : 0;
    Field("local", &local_, 1, 1e9, "a machine of n solvers moves at min(n, F) solvers' speed");
  }
}

void AggregateRule::Field(std::string key, double* value, double min, double max, std::string help, bool run_share) {
  fields_.push_back({std::move(key), std::move(help), value, min, max, run_share});
}

void AggregateRule::Set(const std::string& key, const std::string& value) {
  const std::string item = key + "=" + value;
  auto it = std::find_if(fields_.begin(), fields_.end(), [&](const FieldInfo& f) { return f.key == key; });
  if (it == fields_.end()) {
    std::string keys;
    for (const FieldInfo& f : fields_) keys += (keys.empty() ? "" : ", ") + f.key;
    if (key == "local")
      HS_REQUIRE(false) << "--aggregate=" << item << ": only for a job across machines whose deltas are added (not "
                           "easgd, bsp or gsp, nor private copies in one process)";
    if (key == "share")
      HS_REQUIRE(false) << "--aggregate=share: only for a job across machines whose deltas are added (not "
                           "easgd, bsp or gsp, nor private copies in one process)";
    HS_REQUIRE(false) << "--aggregate: unknown key '" << key << "' for the rule '" << name_ << "' (its keys: " << keys
                      << ")";
  }
  const bool percent = it->run_share && !value.empty() && value.back() == '%';
  const bool epochs = it->run_share && value.size() > 2 && value.compare(value.size() - 2, 2, "ep") == 0;
  const std::string digits = percent ? value.substr(0, value.size() - 1) : epochs ? value.substr(0, value.size() - 2) : value;
  char* end = nullptr;
  double v = std::strtod(digits.c_str(), &end);
  const bool number = !digits.empty() && end && *end == 0 && std::isfinite(v);
  if (key == "share") {
    HS_REQUIRE(number && v >= it->min && v <= it->max)
        << "--aggregate=" << item << ": the job's speed in machines' steps, from 1 to the job's " << it->max
        << " machines";
  } else if (key == "local") {
    HS_REQUIRE(number && v >= 1) << "--aggregate=" << item
                                 << ": a machine of n solvers moves at min(n, F) solvers' speed, F from 1";
  }
  HS_REQUIRE(number && v >= std::min(0.0, it->min) && (!percent || v <= 100))
      << "--aggregate: '" << item << "' is not KEY=NUMBER (" << key << ": " << it->help
      << (it->run_share ? "; may be N% of the run, or Nep: N epochs of the training data" : "") << ")";
  if (percent) {
    HS_REQUIRE(run_) << "--aggregate: '" << item << "' is a share of the run, which has no length here (max_iter)";
    v = std::round(static_cast<double>(run_) * v / 100);
  }
  if (epochs) {
    const uint64_t epoch = setting_.epoch ? setting_.epoch() : 0;
    HS_REQUIRE(epoch) << "--aggregate: '" << item
                      << "' is in epochs of the training data, whose size is not known here (the train net's first "
                         "Data or ImageData layer)";
    v = std::round(static_cast<double>(epoch) * v);
  }
  *it->value = std::clamp(v, it->min, it->max);
}

void AggregateRule::Check() const {
  HS_REQUIRE((cool_ == 0 && cooled_ == 0 && to_ == 1) || cooled_ > cool_)
      << "--aggregate: a cool-down needs cooled= after cool= (got cool=" << cool_ << ", cooled=" << cooled_ << ")";
}

float AggregateRule::Weight(const DeltaInfo& d) const {
  double k = Own(d);
  const auto clock = static_cast<double>(d.clock);
  if (warmup_ > 0 && clock < warmup_) k *= from_ + (1 - from_) * clock / warmup_;
  if (cooled_ > cool_ && clock > cool_) k *= 1 - (1 - to_) * std::min(1.0, (clock - cool_) / (cooled_ - cool_));
  if (budget_ > 0 && static_cast<double>(d.age) > budget_) k *= budget_ / static_cast<double>(d.age);
  return static_cast<float>(k);
}

float AggregateRule::Take(const DeltaInfo& d, float* master, const float* delta, uint32_t len, Access access) {
  const float weight = Weight(d);
  if (weight > 0) Apply(d, weight, master, delta, len, access);
  return weight;
}

void AggregateRule::Apply(const DeltaInfo& d, float weight, float* master, const float* delta, uint32_t len,
                          Access access) {
  (void)d;
  AddScaled(master, delta, len, access, weight);
}

std::vector<std::string> AggregateRule::AdjustJobSolver(int job_machines, pb::SolverParameter* param) const {
  (void)job_machines, (void)param;
  return {};
}

std::string AggregateRule::AdjustLocalSolver(int local_solvers, pb::SolverParameter* param) const {
  return SolverLocalShare(local_solvers, local_, param);
}

double AggregateRule::EqualPaceWeight(int machines) const {
  if (machines < 2) return 1;
  DeltaInfo d;
  d.staleness = static_cast<uint64_t>(machines - 1);
  return std::min(1.0, Own(d));
}

std::string AggregateRule::Line() const {
  std::ostringstream os;
  os << std::setprecision(3) << OwnLine();
  if (warmup_ > 0) os << "; the others' weight from " << from_ << " to 1 over " << warmup_ << " global iterations";
  if (cooled_ > cool_)
    os << (warmup_ > 0 ? ", " : "; the others' weight ") << "down to " << to_ << " from " << cool_ << " to " << cooled_;
  if (budget_ > 0) os << "; damped beyond " << budget_ << " iterations of age";
  return os.str();
}

std::string AggregateRule::Agreement() const {
  std::ostringstream os;
  os << std::setprecision(17) << name_;
  for (const FieldInfo& f : fields_) os << ";" << f.key << "=" << *f.value;
  return os.str();
}

// ---------------------------------------------------------------- the registry

namespace {
std::map<std::string, AggregateRegistry::Entry>& Registry() {
  static std::map<std::string, AggregateRegistry::Entry> r;
  return r;
}
}  // namespace

bool AggregateRegistry::Add(Entry e) {
  HS_CHECK(!Registry().count(e.name)) << "aggregation rule '" << e.name << "' registered twice";
  std::string name = e.name;
  Registry().emplace(std::move(name), std::move(e));
  return true;
}

const AggregateRegistry::Entry* AggregateRegistry::Find(const std::string& name) {
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : &it->second;
}

std::vector<std::string> AggregateRegistry::Names() {
  std::vector<std::string> names;
  for (const auto& [name, e] : Registry()) names.push_back(name);
  return names;
}

// ---------------------------------------------------------------- the rules

bool MomentumShareable(const pb::SolverParameter& param) {
  const std::string& type = param.type();
  const float mu = param.momentum();
  return (type.empty() || type == "SGD" || type == "Nesterov") && mu > 0 && mu < 1;
}

namespace {

// Every delta whole, as soon as it comes (values still checked). Two machines' default.
class SumRule : public AggregateRule {
 public:
  explicit SumRule(const AggregateSetting& s) : AggregateRule("sum", s) {}

 protected:
  std::string OwnLine() const override { return "every delta whole"; }
};
HS_REGISTER_AGGREGATE("sum", "every delta whole, as soon as it comes", SumRule);

// Each delta times min(1, scale / staleness) (MXNet-G's 1/staleness at scale 1): the job as a
// whole moves about `scale` machines' steps whatever the count. The default from 3 machines up
// where the schedule does not apply.
class StalenessRule : public AggregateRule {
 public:
  explicit StalenessRule(const AggregateSetting& s) : AggregateRule("staleness", s), scale_(s.default_scale) {
    Field("scale", &scale_, 1e-3, 1e9, "weights of min(1, scale / staleness)");
  }

 protected:
  double Own(const DeltaInfo& d) const override {
    return std::min(1.0, scale_ / static_cast<double>(std::max<uint64_t>(d.staleness, 1)));
  }
  std::string OwnLine() const override {
    std::ostringstream os;
    os << std::setprecision(3) << "each delta weighted by min(1, " << scale_ << " / its staleness)";
    return os.str();
  }

 private:
  double scale_;
};
HS_REGISTER_AGGREGATE("staleness", "each delta times min(1, scale / its staleness)", StalenessRule);

// The solvers' changes under the momentum share at `speed` machines' steps (ShareMomentum), and
// the norm guard that goes with it: one line each.
std::vector<std::string> ShareLines(int job_machines, double speed, double floor, pb::SolverParameter* param) {
  std::vector<std::string> lines;
  if (speed <= 0) return lines;
  if (std::string l = ShareMomentum(job_machines, speed, param, floor); !l.empty()) lines.push_back(std::move(l));
  std::ostringstream os;
  os << "each solver clips a gradient beyond " << kShareNormGuard
     << " times the mean of its recent norms (the machines' deltas are added whole)";
  lines.push_back(os.str());
  return lines;
}

// Every delta whole and the momentum share (ShareMomentum): the job at `share` machines' steps.
class ShareRule : public AggregateRule {
 public:
  explicit ShareRule(const AggregateSetting& s, const char* name = "share", double speed = kShareMomentumSpeed)
      : AggregateRule(name, s), speed_(std::min<double>(s.machines, speed)) {
    HS_REQUIRE(s.offers_share) << "--aggregate=" << name << ": only for a job across machines whose deltas are added "
                                  "(not easgd, bsp or gsp, nor private copies in one process)";
    Field("share", &speed_, 1, std::max(s.machines, 1), "the job's speed in machines' steps");
    Field("floor", &floor_, -0.99, 0, "the least momentum a machine's solver takes (below 0: negative momentum)");
  }
  double share_speed() const override { return setting_.machines >= 2 ? speed_ : 0; }
  double norm_guard() const override { return share_speed() > 0 ? kShareNormGuard : 0; }
  std::vector<std::string> AdjustJobSolver(int job_machines, pb::SolverParameter* param) const override {
    return ShareLines(job_machines, share_speed(), floor_, param);
  }

 protected:
  std::string OwnLine() const override {
    if (share_speed() <= 0) return "every delta whole";
    std::ostringstream os;
    os << std::setprecision(3) << "every delta whole at " << share_speed() << " machines' steps";
    return os.str();
  }

  double speed_, floor_ = 0;
};
HS_REGISTER_AGGREGATE("share", "every delta whole, the solvers sharing their momentum (share=S: S machines' steps)",
                      ShareRule);

// The share schedule: the share at min(machines, kScheduleSpeed) machines' steps, the others'
// deltas ramped up from W over kScheduleWarmup global iterations (in every run: it is for the
// net's unstable first iterations; in a short run the cool-down starts during it and the two
// multiply), damped beyond kScheduleBudget iterations of age, and cooled down to W from
// kScheduleCoolFrom to kScheduleCoolUntil of the run; W = max(kScheduleWeight, 1 / (machines - 1)).
// Only for SGD or Nesterov with momentum, in a run with a length. Named only (auto averages).
class ScheduleRule : public ShareRule {
 public:
  explicit ScheduleRule(const AggregateSetting& s) : ShareRule(Checked(s), "schedule", kScheduleSpeed) {
    const double w = std::max(kScheduleWeight, 1.0 / std::max(s.machines - 1, 1));
    budget_ = static_cast<double>(kScheduleBudget);
    cool_ = static_cast<double>(std::llround(static_cast<double>(run_) * kScheduleCoolFrom));
    cooled_ = static_cast<double>(std::llround(static_cast<double>(run_) * kScheduleCoolUntil));
    to_ = static_cast<float>(w);
    warmup_ = static_cast<double>(kScheduleWarmup);
    from_ = static_cast<float>(w);
  }

 private:
  static const AggregateSetting& Checked(const AggregateSetting& s) {
    HS_REQUIRE(s.offers_share) << "--aggregate=schedule: only for a job across machines whose deltas are added (not "
                                  "easgd, bsp or gsp, nor private copies in one process)";
    HS_REQUIRE(s.solver && MomentumShareable(*s.solver))
        << "--aggregate=schedule: only for SGD or Nesterov with a momentum in (0, 1), whose momentum the machines share";
    HS_REQUIRE(s.solver->max_iter() > 0)
        << "--aggregate=schedule: its cool-down follows the run's length, which has none here (max_iter)";
    return s;
  }
};
HS_REGISTER_AGGREGATE("schedule", "the share, ramped up, damped by age and cooled down over the run", ScheduleRule);

// Where a stateful rule keeps a chunk's state: chunks laid end to end in the order first seen
// (Take sees the chunk's values, not its offset in the master buffer).
class ChunkSlots {
 public:
  void Bind(size_t n, uint32_t chunks) {
    n_ = n;
    offset_.assign(chunks, kUnbound);
    bound_ = 0;
  }
  bool bound() const { return !offset_.empty(); }
  // The offset of chunk c's `len` floats of state; `fresh`: seen for the first time.
  size_t Slot(uint32_t c, uint32_t len, bool* fresh) {
    HS_CHECK(c < offset_.size()) << "aggregation: chunk " << c << " beyond the bound " << offset_.size();
    *fresh = offset_[c] == kUnbound;
    if (*fresh) {
      HS_CHECK_LE(bound_ + len, n_) << "aggregation: chunks beyond the bound buffer";
      offset_[c] = bound_;
      bound_ += len;
    }
    return offset_[c];
  }

 private:
  static constexpr size_t kUnbound = ~size_t{0};
  size_t n_ = 0, bound_ = 0;
  std::vector<size_t> offset_;
};

// Outer momentum at the chunk's owner (delayed Nesterov, as in streaming local SGD with an outer
// optimizer): each delta goes in at once times `lr` (and the envelope), and is summed into the chunk's pending
// progress; once `every` deltas have come (one round of the others' answers at equal pace), the
// chunk's momentum takes that progress, m = momentum x m + pending, and the master moves on by
// lr x momentum x m as well. Per-chunk state: m and pending (two floats per weight).
class OuterRule : public AggregateRule {
 public:
  explicit OuterRule(const AggregateSetting& s)
      : AggregateRule("outer", s), every_(std::max(1, s.machines - 1)) {
    Field("lr", &lr_, 1e-6, 1, "the outer learning rate: each delta's weight");
    Field("momentum", &momentum_, 0, 0.999, "the outer momentum");
    Field("every", &every_, 1, 1e6, "deltas of a chunk between its momentum steps (default: machines - 1)");
    if (s.offers_share)
      Field("share", &speed_, 0, std::max(s.machines, 1),
            "the solvers' momentum shared as share=S does, at S machines' steps (0: each keeps its own)");
  }
  bool stateful() const override { return true; }
  double share_speed() const override { return setting_.machines >= 2 ? speed_ : 0; }
  double norm_guard() const override { return share_speed() > 0 ? kShareNormGuard : 0; }
  std::vector<std::string> AdjustJobSolver(int job_machines, pb::SolverParameter* param) const override {
    return ShareLines(job_machines, share_speed(), 0, param);
  }
  void Bind(size_t n, uint32_t chunks) override {
    velocity_.assign(n, 0.f);
    pending_.assign(n, 0.f);
    count_.assign(chunks, 0);
    slots_.Bind(n, chunks);
  }

 protected:
  double Own(const DeltaInfo& d) const override { return (void)d, lr_; }
  std::string OwnLine() const override {
    std::ostringstream os;
    os << std::setprecision(3) << "outer Nesterov momentum " << momentum_ << " at the chunk's owner, lr " << lr_
       << ", a momentum step every " << every_ << " deltas of a chunk";
    if (share_speed() > 0) os << "; the solvers' momentum shared at " << share_speed() << " machines' steps";
    return os.str();
  }
  void Apply(const DeltaInfo& d, float weight, float* master, const float* delta, uint32_t len,
             Access access) override {
    HS_CHECK(slots_.bound()) << "outer: Take before Bind";
    bool fresh;
    const size_t at = slots_.Slot(d.chunk, len, &fresh);
    float* v = velocity_.data() + at;
    float* p = pending_.data() + at;
    AddScaled(master, delta, len, access, weight);
    for (uint32_t i = 0; i < len; ++i) p[i] += weight * delta[i];
    if (++count_[d.chunk] < static_cast<uint32_t>(every_)) return;
    count_[d.chunk] = 0;
    const auto mu = static_cast<float>(momentum_);
    for (uint32_t i = 0; i < len; ++i) {
      v[i] = mu * v[i] + p[i];
      p[i] = 0;
    }
    AddScaled(master, v, len, access, mu);
  }

 private:
  double lr_ = 1, momentum_ = 0.5, every_, speed_ = 0;
  std::vector<float> velocity_, pending_;
  std::vector<uint32_t> count_;
  ChunkSlots slots_;
};
HS_REGISTER_AGGREGATE("outer", "outer Nesterov momentum at each chunk's owner (lr, momentum, every)", OuterRule);

// Adasum at the chunk's owner: as Horovod's Adasum combines two gradients a and b into
// (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, each arriving delta a is combined with the last
// one taken on its chunk, b, already in the master: the master moves by the combination less b.
// A delta that repeats the last one counts once between the two, one orthogonal to it whole: no
// count of machines enters. Per-chunk state: the last delta (one float per weight).
class AdasumRule : public AggregateRule {
 public:
  explicit AdasumRule(const AggregateSetting& s) : AggregateRule("adasum", s) {
    Field("scale", &scale_, 0, 1, "of the combination's terms along the last delta (1: Adasum's; 0: the sum)");
  }
  bool stateful() const override { return true; }
  void Bind(size_t n, uint32_t chunks) override {
    last_.assign(n, 0.f);
    slots_.Bind(n, chunks);
  }

 protected:
  std::string OwnLine() const override {
    std::ostringstream os;
    os << std::setprecision(3) << "each delta combined with its chunk's last as Adasum does"
       << (scale_ != 1 ? " (its parallel terms x " : "");
    if (scale_ != 1) os << scale_ << ")";
    return os.str();
  }
  void Apply(const DeltaInfo& d, float weight, float* master, const float* delta, uint32_t len,
             Access access) override {
    HS_CHECK(slots_.bound()) << "adasum: Take before Bind";
    bool fresh;
    float* last = last_.data() + slots_.Slot(d.chunk, len, &fresh);
    double ab = 0, aa = 0, bb = 0;
    for (uint32_t i = 0; i < len; ++i) {
      ab += static_cast<double>(delta[i]) * last[i];
      aa += static_cast<double>(delta[i]) * delta[i];
      bb += static_cast<double>(last[i]) * last[i];
    }
    const double half = scale_ * ab / 2;
    const auto wa = static_cast<float>(weight * (aa > 0 ? 1 - half / aa : 1));
    const auto wb = static_cast<float>(weight * (bb > 0 ? -half / bb : 0));
    AddScaled(master, delta, len, access, wa);
    if (wb != 0) AddScaled(master, last, len, access, wb);
    std::copy(delta, delta + len, last);
  }

 private:
  double scale_ = 1;
  std::vector<float> last_;
  ChunkSlots slots_;
};
HS_REGISTER_AGGREGATE("adasum", "each delta combined with its chunk's last one as Horovod's Adasum (scale)", AdasumRule);

// The machines' models averaged, asynchronously (local SGD with the linear scaling rule, as
// post-local SGD): every machine's progress counts 1/M at the chunk's owner, the owner's own
// included, and each solver's lr is M times the recipe's (after a linear ramp from 1 over half
// an epoch). Each machine's copy moves by its own steps whole until they reach the owner, so a
// steep direction is corrected by each machine's fresh steps, and what the owner adds is an
// average of them, not a sum: summed, M machines' stale steps at that rate overshoot and
// diverge. The others' deltas
// go in at once times 1/M (and the envelope); once `every` of them have come, the owner's own
// progress since the last time (the chunk's values less where they were and less the others'
// deltas taken since) is brought to 1/M as well. Per-chunk state: two floats per weight.
class AverageRule : public AggregateRule {
 public:
  explicit AverageRule(const AggregateSetting& s)
      : AggregateRule("average", s),
        lr_(AverageLr(s.machines)),
        every_(std::max(1, s.machines - 1)) {
    Field("lr", &lr_, 1, 1e6, "the solvers' lr multiplier (default: the machines up to 16; past 16, 256 / machines, at least 8)");
    Field("lr_warmup", &lr_warmup_, 0, 1e18,
          "global iterations of the multiplier's linear ramp from 1 (default: 0.5ep, half an epoch; from 16 machines max(1, M/32) epochs; 0: none)", true);
    Field("every", &every_, 1, 1e6, "the others' deltas of a chunk between the owner's own rescales");
  }
  bool stateful() const override { return true; }
  std::function<double(int64_t)> LrFactor() const override {
    const double k = setting_.machines >= 2 ? lr_ : 1, ramp = Ramp();
    if (k == 1) return {};
    return [k, ramp](int64_t it) {
      const auto at = static_cast<double>(it);
      return ramp > 0 && at < ramp ? 1 + (k - 1) * at / ramp : k;
    };
  }
  std::vector<std::string> AdjustJobSolver(int job_machines, pb::SolverParameter* param) const override {
    (void)job_machines, (void)param;  // (the multiplier is the solvers' lr_factor, not their base_lr)
    if (setting_.machines < 2 || lr_ == 1) return {};
    std::ostringstream os;
    os << std::setprecision(3) << "each solver's lr x " << lr_;
    if (Ramp() > 0) os << " after a linear ramp from x 1 over " << Ramp() << " global iterations";
    return {os.str()};
  }
  void Bind(size_t n, uint32_t chunks) override {
    base_.assign(n, 0.f);
    others_.assign(n, 0.f);
    count_.assign(chunks, 0);
    slots_.Bind(n, chunks);
  }

 protected:
  double Own(const DeltaInfo& d) const override { return (void)d, Mean(); }
  std::string OwnLine() const override {
    std::ostringstream os;
    os << std::setprecision(3) << "the machines' models averaged: each machine's progress at 1/" << setting_.machines
       << ", the owner's own brought to it every " << every_ << " deltas of a chunk";
    return os.str();
  }
  void Apply(const DeltaInfo& d, float weight, float* master, const float* delta, uint32_t len,
             Access access) override {
    HS_CHECK(slots_.bound()) << "average: Take before Bind";
    bool fresh;
    const size_t at = slots_.Slot(d.chunk, len, &fresh);
    float* base = base_.data() + at;
    float* others = others_.data() + at;
    if (fresh) std::copy(master, master + len, base);  // the owner's progress counts from here
    AddScaled(master, delta, len, access, weight);
    for (uint32_t i = 0; i < len; ++i) others[i] += weight * delta[i];
    if (++count_[d.chunk] < static_cast<uint32_t>(every_)) return;
    count_[d.chunk] = 0;
    const auto shrink = static_cast<float>(1 - Mean());
    for (uint32_t i = 0; i < len; ++i) {
      float m = Load(master + i, access);
      m -= shrink * (m - base[i] - others[i]);
      Store(master + i, m, access);
      base[i] = m;
      others[i] = 0;
    }
  }

 private:
  double Mean() const { return 1.0 / std::max(1, setting_.machines); }
  // The lr ramp in global iterations: lr_warmup, or where not given kAverageRampEpochs of the
  // training data below kAverageTopLr machines, and from there max(1, M / (2 kAverageTopLr))
  // epochs (none where the epoch is unknown; measured at 8, 16, 32 and 64 machines:
  // docs/experiments/2026-12-06-average.md, ...-thirty-two-and-sixty-four.md).
  double Ramp() const {
    if (lr_warmup_ >= 0) return lr_warmup_;
    const double epochs = setting_.machines < kAverageTopLr
                              ? kAverageRampEpochs
                              : std::max(1.0, setting_.machines / (2 * kAverageTopLr));
    return setting_.epoch ? std::round(static_cast<double>(setting_.epoch()) * epochs) : 0;
  }
  static float Load(float* x, Access a) {
    return a == Access::kPlain ? *x : std::atomic_ref<float>(*x).load(std::memory_order_relaxed);
  }
  static void Store(float* x, float v, Access a) {
    if (a == Access::kPlain) *x = v;
    else std::atomic_ref<float>(*x).store(v, std::memory_order_relaxed);
  }

  double lr_, lr_warmup_ = -1, every_;
  std::vector<float> base_, others_;
  std::vector<uint32_t> count_;
  ChunkSlots slots_;
};
HS_REGISTER_AGGREGATE("average", "the machines' models averaged, the solvers at lr x machines (post-local SGD)",
                      AverageRule);

}  // namespace

double AverageLr(int machines) {
  const double m = std::max(1, machines);
  if (m <= kAverageTopLr) return m;
  return std::max(kAverageTopLr / 2, kAverageTopLr * kAverageTopLr / m);
}

std::string AutoRuleName(const AggregateSetting& s) {
  const bool averageable = s.offers_share && s.solver && (s.solver->type().empty() || s.solver->type() == "SGD" ||
                                                          s.solver->type() == "Nesterov");
  if (!s.policy_weights && averageable && s.machines >= kAverageFrom) return "average";
  if (s.policy_weights || s.machines > 2) return "staleness";
  return "sum";
}

std::shared_ptr<AggregateRule> MakeAggregate(const std::string& text, const AggregateSetting& setting) {
  struct Item {
    std::string key, value;
    bool has_value;
  };
  std::vector<Item> items;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t eq = item.find('=');
    items.push_back({item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1), eq != std::string::npos});
  }
  // The rule: named first, or picked by auto.
  std::string name;
  size_t first = 0;
  if (!items.empty() && (items[0].key == "auto" || AggregateRegistry::Find(items[0].key))) {
    name = items[0].key;
    HS_REQUIRE(name != "auto" || !items[0].has_value) << "--aggregate=" << text << ": auto takes no value";
    if (name == "auto" || !items[0].has_value) first = 1;  // "NAME=V": V is the rule's field NAME
  }
  if (name.empty() || name == "auto") {
    // weight=1 asks for the staleness weights, weight=0 for none; scale= for the weights; a
    // share key for the share.
    int weight = -1;
    bool scale = false, share = false;
    std::vector<Item> rest;
    for (size_t i = first; i < items.size(); ++i) {
      const Item& it = items[i];
      if (it.key == "weight") {
        HS_REQUIRE(it.value == "0" || it.value == "1")
            << "--aggregate=weight=" << it.value << ": 1 (the staleness weights) or 0 (none)";
        weight = it.value == "1";
        continue;
      }
      scale |= it.key == "scale";
      share |= it.key == "share";
      rest.push_back(it);
    }
    items = std::move(rest);
    first = 0;
    if (share) name = "share";
    else if (weight == 1 || (scale && weight != 0)) name = "staleness";
    else if (weight == 0) name = "sum";
    else name = AutoRuleName(setting);
    HS_REQUIRE(!(scale && name == "sum")) << "--aggregate: scale= is for the staleness weights (weight=1)";
  }
  const AggregateRegistry::Entry* entry = AggregateRegistry::Find(name);
  HS_REQUIRE(entry) << "--aggregate: no rule '" << name << "'";
  std::shared_ptr<AggregateRule> rule = entry->make(setting);
  for (size_t i = first; i < items.size(); ++i) {
    const Item& it = items[i];
    HS_REQUIRE(it.has_value || it.key == name)
        << "--aggregate: '" << it.key << "' is not KEY=NUMBER, nor the name of a rule (auto, "
        << [] {
             std::string s;
             for (const std::string& n : AggregateRegistry::Names()) s += (s.empty() ? "" : ", ") + n;
             return s;
           }()
        << ")";
    if (it.key == name && i > 0 && !it.has_value) continue;  // "schedule,...,schedule": the same rule
    HS_REQUIRE(!(it.key == name && it.has_value && !std::any_of(rule->fields().begin(), rule->fields().end(),
                                                               [&](const auto& f) { return f.key == name; })))
        << "--aggregate=" << it.key << "=" << it.value << ": " << name
        << " takes no value (the keys after it change its parts)";
    rule->Set(it.key, it.value);
  }
  rule->Check();
  return rule;
}

std::shared_ptr<AggregateRule> DefaultAggregate(bool policy_weights, float scale) {
  AggregateSetting s;
  s.default_scale = scale;
  s.policy_weights = policy_weights;
  return MakeAggregate(policy_weights ? "staleness" : "sum", s);
}

std::string ShareMomentum(int machines, double speed, pb::SolverParameter* param, double floor) {
  const float mu = param->momentum();
  if (machines < 2 || !MomentumShareable(*param)) return "";
  const double shared = std::max(floor, 1.0 - machines * (1.0 - mu));
  // lr / (1 - momentum), each machine's speed, times speed / machines: the job moves at
  // `speed` times one machine's.
  const double scale = (1 - shared) / (1 - mu) * speed / machines;
  std::ostringstream os;
  os << machines << " machines add their deltas whole; each machine's momentum " << mu << " -> " << shared
     << " and base_lr " << param->base_lr() << " -> " << param->base_lr() * scale << " (the job moves at " << speed
     << " times one machine's speed; the asynchrony between machines acts as the rest of the momentum)";
  param->set_momentum(static_cast<float>(shared));
  param->set_base_lr(static_cast<float>(param->base_lr() * scale));
  return os.str();
}

std::string SolverLocalShare(int solvers, double speed, pb::SolverParameter* param) {
  if (solvers < 2 || speed <= 0 || speed >= solvers) return "";
  const double scale = speed / solvers;
  std::ostringstream os;
  os << "this machine's " << solvers << " solvers move it at " << speed << (speed == 1 ? " solver's" : " solvers'")
     << " speed: each one's base_lr " << param->base_lr() << " -> " << param->base_lr() * scale
     << " (their steps reach the others as one delta)";
  param->set_base_lr(static_cast<float>(param->base_lr() * scale));
  return os.str();
}

float GspWeightScale(int machines) {
  return static_cast<float>(std::max(1.0, std::min<double>(machines - 1, kJobSolverSpeed - 1)));
}

double EasgdSpeed(int machines, int solvers, double weight) {
  const int copies = machines * solvers;
  if (copies < 2) return 1;
  const double k = solvers * (1 + (machines - 1) * weight);
  return std::min(copies, kEasgdSpeed) * (1 + k) / k;
}

std::string EasgdSpeedUp(int copies, double speed, pb::SolverParameter* param) {
  if (speed == 1) return "";
  std::ostringstream os;
  os << std::setprecision(3) << "easgd: the centre is the mean of its " << copies
     << " copies and trails them, so each solver's base_lr " << param->base_lr() << " -> "
     << param->base_lr() * speed << " (the centre moves as one solver on " << std::min(copies, kEasgdSpeed)
     << " batches together)";
  param->set_base_lr(static_cast<float>(param->base_lr() * speed));
  return os.str();
}

}  // namespace hogstream

// sync/aggregate.*: the rules by name, --aggregate's grammar and defaults, the generated
// agreement, the solvers' rates each rule asks for, and the weights the rules give (through a
// CPU master in test/sync/segment_test.cc, through a GPU segment in gpu_segment_test.cc).
#include "sync/aggregate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/proto/hogstream.pb.h"
#include "sync/net_job.hpp"  // GspWeightScale, EasgdSpeed (the policies' own maths)
#include "sync/segment.hpp"
#include "test/error_of.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

// A rule as bin/ makes one for a job of `machines`: `offer` (deltas added whole across machines:
// the share and local= offered), `solver` (the run's), the policy's weights.
std::shared_ptr<AggregateRule> Make(const std::string& text, int machines, float scale = 1, bool offer = false,
                                    const pb::SolverParameter* solver = nullptr, bool policy_weights = false) {
  AggregateSetting s;
  s.machines = machines;
  s.default_scale = scale;
  s.offers_share = offer;
  s.solver = solver;
  s.policy_weights = policy_weights;
  return MakeAggregate(text, s);
}

double FieldOf(const AggregateRule& r, const std::string& key) {
  for (const auto& f : r.fields())
    if (f.key == key) return *f.value;
  ADD_FAILURE() << r.name() << " has no field " << key;
  return -1;
}

bool Weighted(const AggregateRule& r) { return r.name() == "staleness"; }

// --aggregate: by default, at three and four machines, the share schedule where the run's
// solver can share its momentum, else 1/staleness weights from three up (two machines take
// each other's deltas whole; a round-averaging policy passes 1); "sum", "share", "schedule"
// and every key over the defaults; shares of the run; a mistake is one line naming the flag.
TEST(AggregateTest, DefaultsKeysAndMistakes) {
  EXPECT_EQ(Make("auto", 2)->name(), "sum");
  EXPECT_EQ(Make("auto", 2)->absurd(), 100.f);
  EXPECT_TRUE(Weighted(*Make("", 4)));
  auto s = Make("sum", 8);
  EXPECT_FALSE(Weighted(*s));
  EXPECT_EQ(FieldOf(*s, "warmup"), 0);
  auto k = Make("weight=0,warmup=500,from=0.25,budget=6,absurd=0", 4);
  EXPECT_FALSE(Weighted(*k));
  EXPECT_EQ(FieldOf(*k, "warmup"), 500);
  EXPECT_FLOAT_EQ(FieldOf(*k, "from"), 0.25);
  EXPECT_EQ(FieldOf(*k, "budget"), 6);
  EXPECT_EQ(k->absurd(), 0.f);
  EXPECT_EQ(FieldOf(*k, "cooled"), 0) << "no cool-down unless asked";
  EXPECT_EQ(FieldOf(*Make("", 4), "scale"), 1) << "machines: the master's own solvers train it; others' deltas at most 1/staleness";
  auto cd = Make("share=4,warmup=1000,from=0.33,budget=8,cool=1500,cooled=3500,to=0.33", 4, 1, true);
  EXPECT_EQ(cd->share_speed(), 4);
  EXPECT_FALSE(Weighted(*cd));
  EXPECT_EQ(FieldOf(*cd, "warmup"), 1000);
  EXPECT_EQ(FieldOf(*cd, "cool"), 1500);
  EXPECT_EQ(FieldOf(*cd, "cooled"), 3500);
  EXPECT_FLOAT_EQ(FieldOf(*cd, "to"), 0.33);
  EXPECT_EQ(FieldOf(*cd, "budget"), 8);
  auto p = Make("auto", 4, 2.f);  // private copies in one process
  EXPECT_TRUE(Weighted(*p));
  EXPECT_EQ(FieldOf(*p, "scale"), 2);
  EXPECT_EQ(FieldOf(*Make("scale=3", 4, 2.f), "scale"), 3);
  // "share" (where the caller offers it: machines, not easgd, bsp or gsp): whole deltas and
  // the momentum share (by default only in the schedule, below, with the run's solver).
  // "share=S" sets the job's speed, in machines' steps (at most the job's machines).
  for (int machines : {1, 2, 3, 4, 8}) {
    EXPECT_EQ(Make("auto", machines, 1, true)->share_speed(), 0) << machines;
    auto m = Make("share", machines, 1, true);
    EXPECT_EQ(m->share_speed(), machines >= 2 ? std::min(machines, kShareMomentumSpeed) : 0) << machines;
    EXPECT_FALSE(Weighted(*m)) << machines;
    EXPECT_EQ(Make("share=" + std::to_string(machines), machines, 1, true)->share_speed(), machines >= 2 ? machines : 0);
  }
  EXPECT_EQ(Make("sum", 4, 1, true)->share_speed(), 0);
  EXPECT_EQ(Make("share=2.5", 4, 1, true)->share_speed(), 2.5);
  for (const char* bad : {"share=5", "share=0.5", "share=", "share=x"}) {
    const std::string e = ErrorOf([&] { Make(bad, 4, 1, true); });
    EXPECT_NE(e.find("--aggregate=share"), std::string::npos) << bad << ": " << e;
  }
  // "schedule": the share at up to 4 machines' steps, the others' deltas ramped up from W,
  // damped by age, cooled back to W over the middle of the run (W = max(1/3, 1 / (machines -
  // 1))); named only: auto averages from 3 machines up (and adds whole at 2).
  std::mt19937 rng(TestSeed());
  pb::SolverParameter sgd;
  sgd.set_momentum(0.9f);
  sgd.set_base_lr(0.01f);
  for (int machines : {2, 3, 4, 8}) {
    // Short runs at 3 and 8 machines (the cool-down starts within the ramp), any at 2 and 4.
    const int run = machines == 3 || machines == 8 ? std::uniform_int_distribution<int>(1000, 3900)(rng)
                                                   : std::uniform_int_distribution<int>(2000, 20000)(rng);
    sgd.set_max_iter(run);
    SCOPED_TRACE(::testing::Message() << machines << " machines, " << run << " iterations");
    auto d = Make("auto", machines, 1, true, &sgd);
    auto named = Make("schedule", machines, 1, true, &sgd);
    if (machines >= 3) {  // three and more average their models; the schedule is named only
      EXPECT_EQ(d->name(), "average");
      EXPECT_EQ(d->Agreement(), Make("average", machines, 1, true, &sgd)->Agreement());
      EXPECT_EQ(d->share_speed(), 0);
      EXPECT_NE(d->Agreement(), named->Agreement());
    } else {
      EXPECT_EQ(d->name(), "sum") << "two machines take each other's deltas whole";
      EXPECT_EQ(FieldOf(*d, "cooled"), 0);
    }
    const double w = std::max(1.0 / 3, 1.0 / (machines - 1));
    EXPECT_EQ(named->share_speed(), std::min(machines, 4));
    EXPECT_FALSE(Weighted(*named));
    EXPECT_EQ(FieldOf(*named, "warmup"), kScheduleWarmup) << "the ramp is as long in a short run";
    EXPECT_FLOAT_EQ(FieldOf(*named, "from"), w);
    EXPECT_EQ(FieldOf(*named, "budget"), kScheduleBudget);
    EXPECT_EQ(FieldOf(*named, "cool"), std::llround(run * 0.25));
    EXPECT_EQ(FieldOf(*named, "cooled"), std::llround(run * 0.58));
    EXPECT_FLOAT_EQ(FieldOf(*named, "to"), w);
    const std::string line = named->Line();
    EXPECT_NE(line.find(std::to_string(std::min(machines, 4)) + " machines' steps"), std::string::npos) << line;
    EXPECT_NE(line.find("down to"), std::string::npos) << line;
    EXPECT_NE(line.find("beyond 8 iterations"), std::string::npos) << line;
    // Keys over it, shares of the run among them.
    auto keyed = Make("schedule,budget=4,cool=10%,cooled=50%,share=" + std::to_string(machines), machines, 1, true, &sgd);
    EXPECT_EQ(keyed->share_speed(), machines);
    EXPECT_EQ(FieldOf(*keyed, "budget"), 4);
    EXPECT_EQ(FieldOf(*keyed, "cool"), std::llround(run * 10.0 / 100));
    EXPECT_EQ(FieldOf(*keyed, "cooled"), std::llround(run * 50.0 / 100));
    auto wt = Make("weight=1", machines, 1, true, &sgd);
    EXPECT_EQ(wt->share_speed(), 0);
    EXPECT_TRUE(Weighted(*wt));
    EXPECT_NE(wt->Line().find("/ its staleness"), std::string::npos) << wt->Line();
    EXPECT_EQ(FieldOf(*wt, "cooled"), 0);
    // Keys over the default schedule; --staleness-weight (the policy's rule), a caller that
    // does not offer the share (easgd, bsp, gsp) or a solver that cannot share its momentum
    // leave it out.
    auto k5 = Make("budget=5", machines, 1, true, &sgd);
    EXPECT_EQ(k5->share_speed(), 0);
    EXPECT_EQ(FieldOf(*k5, "budget"), 5);
    auto sw = Make("auto", machines, 1, true, &sgd, /*policy_weights=*/true);
    EXPECT_EQ(sw->share_speed(), 0);
    EXPECT_TRUE(Weighted(*sw));
    auto easgd = Make("auto", machines, 1, false, &sgd);
    EXPECT_EQ(Weighted(*easgd), machines > 2);
    EXPECT_EQ(FieldOf(*easgd, "cooled"), 0);
    pb::SolverParameter adam = sgd;
    adam.set_type("Adam");
    auto a = Make("auto", machines, 1, true, &adam);  // (not the linear scaling rule's: no average)
    EXPECT_EQ(a->share_speed(), 0);
    EXPECT_EQ(Weighted(*a), machines > 2);
    EXPECT_NE(sw->name(), "average") << "the policy's weights asked for";
    EXPECT_NE(easgd->name(), "average") << "deltas not added across machines";
    // "schedule" named where it cannot apply: one line.
    for (const auto& [offer, solver] : {std::pair<bool, const pb::SolverParameter*>{false, &sgd},
                                        {true, &adam}, {true, nullptr}}) {
      const std::string e = ErrorOf([&, offer = offer, solver = solver] { Make("schedule", machines, 1, offer, solver); });
      EXPECT_NE(e.find("--aggregate=schedule"), std::string::npos) << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
  }
  for (const char* bad : {"cool=25%", "cool=120%,cooled=130%", "warmup=%", "schedule=1"}) {
    const std::string e = ErrorOf([&] { Make(bad, 4, 1, true); });
    EXPECT_NE(e.find("--aggregate"), std::string::npos) << bad << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << bad;
  }
  const std::string copies = ErrorOf([&] { Make("share", 4, 2.f); });  // private copies
  EXPECT_NE(copies.find("--aggregate=share"), std::string::npos) << copies;
  for (const char* bad : {"often", "warmup=", "warmup=-1", "speed=2", "budget=x", "cool=100", "cool=500,cooled=100",
                          "to=0.5", "weight=2", "sum,scale=2", "auto=1", "staleness,share=2"}) {
    const std::string e = ErrorOf([&] { Make(bad, 4); });
    EXPECT_NE(e.find("--aggregate"), std::string::npos) << bad << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << bad;
  }
}

// Every registered rule makes itself from a plain setting, names itself, and agrees by every
// field it has: the agreement text is generated, so a field that changes changes it (a field
// left out by hand would not).
TEST(AggregateTest, EveryRuleIsRegisteredAndAgreesOnEachOfItsFields) {
  pb::SolverParameter sgd;
  sgd.set_momentum(0.9f);
  sgd.set_max_iter(5000);
  const std::vector<std::string> names = AggregateRegistry::Names();
  for (const char* expected : {"sum", "staleness", "share", "schedule", "outer", "average", "adasum"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    auto rule = Make(name, 4, 1, true, &sgd);
    EXPECT_EQ(rule->name(), name);
    EXPECT_FALSE(rule->Line().empty());
    const std::string agreed = rule->Agreement();
    EXPECT_EQ(agreed.rfind(name, 0), 0u) << agreed;
    ASSERT_FALSE(rule->fields().empty());
    for (const auto& f : rule->fields()) {
      auto other = Make(name, 4, 1, true, &sgd);
      const double v = *f.value;
      // A value within the field's range that differs from its default.
      const double changed = v + 1 <= f.max ? v + 1 : (v - 0.5 >= f.min ? v - 0.5 : f.min);
      if (changed == v) continue;
      std::ostringstream text;
      text << changed;
      other->Set(f.key, text.str());
      EXPECT_NE(other->Agreement(), agreed) << f.key << ": " << v << " -> " << changed;
    }
    EXPECT_NE(Make(name == "sum" ? "staleness" : "sum", 4, 1, true, &sgd)->Agreement(), agreed);
  }
}

// The weights, straight from the rules (hand-computed): the staleness weights' min(1, s / k);
// the envelope's ramp, cool-down and age damping multiply any rule's own weight.
TEST(AggregateTest, WeightsOfTheRulesAndTheirEnvelope) {
  DeltaInfo d;
  auto st = Make("staleness,scale=2", 4);
  for (uint64_t k : {1u, 2u, 3u, 8u}) {
    d.staleness = k;
    EXPECT_FLOAT_EQ(st->Weight(d), std::min(1.f, 2.f / k)) << k;
  }
  EXPECT_DOUBLE_EQ(st->EqualPaceWeight(5), 0.5);
  EXPECT_DOUBLE_EQ(Make("sum", 5)->EqualPaceWeight(5), 1);
  auto env = Make("staleness,from=0.5,warmup=100,cool=200,cooled=400,to=0.2,budget=10", 4);
  d.staleness = 4;  // own weight 1/4
  d.clock = 50, d.age = 0;
  EXPECT_FLOAT_EQ(env->Weight(d), 0.25f * 0.75f);
  d.clock = 300, d.age = 20;
  EXPECT_FLOAT_EQ(env->Weight(d), 0.25f * 0.6f * 0.5f);
  d.clock = 1000, d.age = 0;
  EXPECT_FLOAT_EQ(env->Weight(d), 0.25f * 0.2f);
  // Take applies exactly weight x delta and says what it took.
  std::vector<float> master(4, 1.f), delta{4, -8, 16, 0.5f};
  d.clock = 0, d.age = 0, d.staleness = 3;
  const float w = st->Take(d, master.data(), delta.data(), 4, Access::kPlain);
  EXPECT_FLOAT_EQ(w, 2.f / 3);
  for (size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(master[i], 1 + w * delta[i]);
}

// The envelope's iteration fields in epochs of the training data ("Nep"): the setting's epoch
// asked only then, and a clear line where it is not known.
TEST(AggregateTest, TheRampInEpochsOfTheTrainingData) {
  int asked = 0;
  AggregateSetting s;
  s.machines = 8;
  s.epoch = [&asked] { return ++asked, uint64_t{300}; };
  auto r = MakeAggregate("staleness,scale=8,from=0.2,warmup=1.5ep", s);
  EXPECT_EQ(asked, 1);
  EXPECT_DOUBLE_EQ(FieldOf(*r, "warmup"), 450);
  DeltaInfo d;
  d.staleness = 1, d.clock = 225;
  EXPECT_FLOAT_EQ(r->Weight(d), 0.2f + 0.8f * 0.5f);
  MakeAggregate("staleness,warmup=450", s);
  EXPECT_EQ(asked, 1);  // not asked for a plain number
  s.epoch = [] { return uint64_t{0}; };
  EXPECT_NE(ErrorOf([&] { MakeAggregate("staleness,warmup=1ep", s); }).find("'warmup=1ep' is in epochs of the training data"),
            std::string::npos);
  s.epoch = nullptr;
  EXPECT_NE(ErrorOf([&] { MakeAggregate("staleness,warmup=2ep", s); }).find("epochs"), std::string::npos);
  s.epoch = [] { return uint64_t{300}; };
  EXPECT_NE(ErrorOf([&] { MakeAggregate("staleness,scale=2ep", s); }).find("not KEY=NUMBER"), std::string::npos);
}

// outer: each delta goes in at once times lr; every `every` deltas of a chunk its momentum
// takes their sum, v = momentum v + pending, and the chunk moves by momentum x v too (delayed
// Nesterov), per chunk, against a reference in doubles on random deltas to two chunks of
// different lengths in a random order.
TEST(AggregateTest, OuterMomentumStepsEveryKDeltasOfAChunk) {
  std::mt19937 gen(TestSeed());
  std::normal_distribution<float> n01(0, 1);
  const double lr = 0.8, mu = 0.6;
  const int every = 3;
  auto rule = Make("outer,lr=0.8,momentum=0.6,every=3", 4);
  ASSERT_TRUE(rule->stateful());
  const uint32_t len[2] = {8, 4};
  const size_t off[2] = {0, 8};
  rule->Bind(12, 2);
  std::vector<float> master(12);
  for (float& v : master) v = n01(gen);
  std::vector<double> ref(master.begin(), master.end()), vel(12, 0), pend(12, 0);
  int count[2] = {0, 0};
  for (int t = 0; t < 40; ++t) {
    const uint32_t c = gen() % 2;
    std::vector<float> d(len[c]);
    for (float& x : d) x = n01(gen);
    DeltaInfo info;
    info.chunk = c;
    info.staleness = 1 + gen() % 5;  // outer does not weigh by staleness
    EXPECT_FLOAT_EQ(rule->Take(info, master.data() + off[c], d.data(), len[c], Access::kPlain), static_cast<float>(lr));
    for (uint32_t i = 0; i < len[c]; ++i) {
      ref[off[c] + i] += lr * d[i];
      pend[off[c] + i] += lr * d[i];
    }
    if (++count[c] == every) {
      count[c] = 0;
      for (uint32_t i = 0; i < len[c]; ++i) {
        vel[off[c] + i] = mu * vel[off[c] + i] + pend[off[c] + i];
        pend[off[c] + i] = 0;
        ref[off[c] + i] += mu * vel[off[c] + i];
      }
    }
  }
  for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(master[i], ref[i], 1e-4) << i;
  // With share=S (where offered) the solvers' momentum is shared as share=S shares it.
  pb::SolverParameter a, b;
  a.set_momentum(0.9f);
  a.set_base_lr(0.01f);
  b = a;
  EXPECT_EQ(Make("outer,share=4", 8, 1, true)->AdjustJobSolver(8, &a),
            Make("share=4", 8, 1, true)->AdjustJobSolver(8, &b));
  EXPECT_EQ(a.momentum(), b.momentum());
  EXPECT_EQ(a.base_lr(), b.base_lr());
  EXPECT_EQ(Make("outer,share=4", 8, 1, true)->norm_guard(), kShareNormGuard);
  EXPECT_TRUE(Make("outer", 8, 1, true)->AdjustJobSolver(8, &a).empty());
  EXPECT_EQ(Make("outer", 8, 1, true)->norm_guard(), 0);
  // Its default: a momentum step per round of the others' answers (machines - 1 deltas).
  EXPECT_EQ(FieldOf(*Make("outer", 8), "every"), 7);
  EXPECT_EQ(Make("outer", 8)->Agreement(), Make("outer,every=7", 8)->Agreement());
}

// average: the others' deltas go in at once times 1/M; every `every` of a chunk's, the owner's
// own progress since the last time (what its solver moved the chunk by, between the Takes) is
// brought to 1/M too — against a reference in doubles that keeps the owner's progress and the
// others' apart, on random moves and deltas to two chunks of different lengths in random order.
// The solvers' lr multiplier: M by default, after a linear ramp of half an epoch (or lr_warmup).
// Adasum at the owner, against hand-computed combinations: the chunk's first delta is taken
// whole; one that repeats the last leaves the master where Adasum(b, b) = b puts it; one
// orthogonal to the last is added whole; otherwise the master moves to its state before the last
// delta plus Adasum(a, b). Each chunk keeps its own last delta; scale=0 is the plain sum.
TEST(AggregateTest, AdasumCombinesEachDeltaWithItsChunksLast) {
  auto r = Make("adasum", 4);
  ASSERT_TRUE(r->stateful());
  r->Bind(4, 2);
  DeltaInfo d;
  d.chunk = 0;
  std::vector<float> m(2, 0.f);
  auto take = [&](std::vector<float>* master, std::vector<float> delta) {
    EXPECT_FLOAT_EQ(r->Take(d, master->data(), delta.data(), 2, Access::kPlain), 1.f);
  };
  take(&m, {1, 2});
  EXPECT_EQ(m, (std::vector<float>{1, 2})) << "the first, whole";
  take(&m, {1, 2});
  EXPECT_EQ(m, (std::vector<float>{1, 2})) << "Adasum(b, b) = b";
  take(&m, {2, -1});
  EXPECT_EQ(m, (std::vector<float>{3, 1})) << "orthogonal: whole";
  // a = (3, 1) after b = (2, -1): a.b = 5, |a|^2 = 10, |b|^2 = 5; Adasum = 0.75 a + 0.5 b.
  take(&m, {3, 1});
  EXPECT_FLOAT_EQ(m[0], 1 + 0.75f * 3 + 0.5f * 2);
  EXPECT_FLOAT_EQ(m[1], 2 + 0.75f * 1 - 0.5f * 1);
  std::vector<float> other(2, 0.f);
  d.chunk = 1;
  take(&other, {3, 1});
  EXPECT_EQ(other, (std::vector<float>{3, 1})) << "chunk 1's first delta, whole";
  auto sum = Make("adasum,scale=0", 4);
  sum->Bind(2, 1);
  d.chunk = 0;
  std::vector<float> s(2, 0.f), a{1, 2};
  for (int i = 0; i < 3; ++i) sum->Take(d, s.data(), a.data(), 2, Access::kPlain);
  EXPECT_EQ(s, (std::vector<float>{3, 6}));
}

TEST(AggregateTest, AverageTakesEveryMachinesProgressAtOneInM) {
  std::mt19937 gen(TestSeed());
  std::normal_distribution<float> n01(0, 1);
  const int machines = 5, every = 3;
  auto rule = Make("average,every=3", machines);
  ASSERT_TRUE(rule->stateful());
  const uint32_t len[2] = {8, 4};
  const size_t off[2] = {0, 8};
  rule->Bind(12, 2);
  std::vector<float> master(12);
  for (float& v : master) v = n01(gen);
  // The reference: where each chunk was at its last rescale, the owner's own moves and the
  // others' weighted deltas since.
  std::vector<double> base(master.begin(), master.end()), own(12, 0), others(12, 0);
  int count[2] = {0, 0};
  bool seen[2] = {false, false};
  for (int t = 0; t < 60; ++t) {
    const uint32_t c = gen() % 2;
    for (uint32_t i = 0; i < len[c]; ++i) {  // the owner's solver moves its chunk
      const float step = n01(gen);
      master[off[c] + i] += step;
      own[off[c] + i] += step;
    }
    if (!seen[c]) {  // the owner's progress counts from the chunk's first Take: before it, whole
      seen[c] = true;
      for (uint32_t i = 0; i < len[c]; ++i) base[off[c] + i] += std::exchange(own[off[c] + i], 0);
    }
    std::vector<float> d(len[c]);
    for (float& x : d) x = n01(gen);
    DeltaInfo info;
    info.chunk = c;
    info.staleness = 1 + gen() % 5;  // average does not weigh by staleness
    EXPECT_FLOAT_EQ(rule->Take(info, master.data() + off[c], d.data(), len[c], Access::kPlain), 1.f / machines);
    for (uint32_t i = 0; i < len[c]; ++i) others[off[c] + i] += d[i] / machines;
    if (++count[c] == every) {
      count[c] = 0;
      for (uint32_t i = 0; i < len[c]; ++i) {
        const size_t k = off[c] + i;
        base[k] += own[k] / machines + others[k];
        own[k] = others[k] = 0;
      }
    }
    for (uint32_t i = 0; i < len[c]; ++i) {
      const size_t k = off[c] + i;
      ASSERT_NEAR(master[k], base[k] + own[k] + others[k], 1e-3) << "chunk " << c << ", step " << t;
    }
  }
  // The solvers' lr: x M after a linear ramp of half an epoch (asked of the setting), or lr_warmup.
  AggregateSetting s;
  s.machines = 8;
  s.epoch = [] { return uint64_t{400}; };
  const auto f = MakeAggregate("average", s)->LrFactor();
  ASSERT_TRUE(f);
  EXPECT_DOUBLE_EQ(f(0), 1);
  EXPECT_DOUBLE_EQ(f(100), 4.5);
  EXPECT_DOUBLE_EQ(f(200), 8);
  EXPECT_DOUBLE_EQ(f(100000), 8);
  // From 16 machines the ramp is at least an epoch, and M / 32 epochs past 32.
  s.machines = 16;
  const auto sixteen = MakeAggregate("average", s)->LrFactor();
  ASSERT_TRUE(sixteen);
  EXPECT_DOUBLE_EQ(sixteen(200), 1 + 15 * 200.0 / 400) << "x 16 at 16 machines, reached over an epoch";
  s.machines = 64;
  const auto wide = MakeAggregate("average", s)->LrFactor();
  ASSERT_TRUE(wide);
  EXPECT_DOUBLE_EQ(wide(400), 1 + 7 * 400.0 / 800) << "x 8 at 64 machines, reached over 2 epochs";
  EXPECT_DOUBLE_EQ(wide(800), 8);
  s.machines = 8;
  const auto g = MakeAggregate("average,lr=4,lr_warmup=0", s)->LrFactor();
  ASSERT_TRUE(g);
  EXPECT_DOUBLE_EQ(g(0), 4);
  EXPECT_FALSE(MakeAggregate("average,lr=1", s)->LrFactor()) << "no multiplier: no factor";
  EXPECT_FALSE(Make("sum", 8)->LrFactor());
  pb::SolverParameter p;
  p.set_base_lr(0.01f);
  const auto lines = MakeAggregate("average", s)->AdjustJobSolver(8, &p);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "each solver's lr x 8 after a linear ramp from x 1 over 200 global iterations");
  EXPECT_EQ(p.base_lr(), 0.01f) << "the multiplier is the solvers' lr_factor, not their base_lr";
  EXPECT_EQ(FieldOf(*Make("average", 8), "every"), 7);
  EXPECT_EQ(FieldOf(*Make("average", 8), "lr"), 8);
  EXPECT_EQ(FieldOf(*Make("average", 16), "lr"), 16);
  EXPECT_DOUBLE_EQ(FieldOf(*Make("average", 24), "lr"), 256.0 / 24) << "past 16 machines, 256 / M";
  EXPECT_EQ(FieldOf(*Make("average", 32), "lr"), 8);
  EXPECT_EQ(FieldOf(*Make("average", 64), "lr"), 8) << "at least half the top";
}

// The value check every master makes before a rule sees a delta: a non-finite element always
// refused; once 8 deltas set the chunk's scale, one 100 times beyond both it and the values.
TEST(AggregateTest, DeltaCheckRefusesNonFiniteAndAbsurdDeltas) {
  std::mt19937 gen(TestSeed());
  std::normal_distribution<float> n01(0, 1);
  DeltaCheck check(2);
  std::vector<float> values(16), d(16);
  for (float& v : values) v = 0.1f * n01(gen);
  d[3] = std::nanf("");
  EXPECT_EQ(check.Check(0, d.data(), values.data(), 16, 100), DeltaCheck::kNonFinite);
  for (int i = 0; i < 8; ++i) {
    for (float& x : d) x = 1e-3f * n01(gen);
    EXPECT_EQ(check.Check(0, d.data(), values.data(), 16, 100), DeltaCheck::kOk);
  }
  for (float& x : d) x = 50 * n01(gen);  // beyond the recent deltas and the values
  EXPECT_EQ(check.Check(0, d.data(), values.data(), 16, 100), DeltaCheck::kAbsurd);
  EXPECT_EQ(check.Check(0, d.data(), values.data(), 16, 0), DeltaCheck::kOk) << "absurd=0: no bound";
  EXPECT_EQ(check.Check(1, d.data(), values.data(), 16, 100), DeltaCheck::kOk) << "a chunk of no history yet";
}

// The momentum share gives each machine momentum 1 - machines x (1 - momentum) and the speed
// lr / (1 - momentum) times the job's speed / machines; other update rules, and SGD without
// momentum, are left alone. The share rule asks for it (and the norm guard); sum does not.
TEST(AggregateTest, ShareMomentumKeepsEachMachinesSpeed) {
  std::mt19937 rng(TestSeed());
  std::uniform_real_distribution<double> mu_of(0.5, 0.99), lr_of(1e-4, 0.1);
  for (int machines : {2, 3, 4, 8, 40}) {
    pb::SolverParameter p;
    const float mu = static_cast<float>(mu_of(rng)), lr = static_cast<float>(lr_of(rng));
    p.set_momentum(mu);
    p.set_base_lr(lr);
    const double job_speed = std::uniform_real_distribution<double>(1, machines)(rng);
    pb::SolverParameter q = p;
    const std::string line = ShareMomentum(machines, job_speed, &p);
    SCOPED_TRACE(line);
    const double want_mu = std::max(0.0, 1.0 - machines * (1.0 - mu));
    EXPECT_NEAR(p.momentum(), want_mu, 1e-6) << machines;
    const double speed = lr / (1 - mu) * job_speed / machines;
    EXPECT_NEAR(p.base_lr() / (1 - p.momentum()), speed, 1e-5 * speed) << machines;
    EXPECT_NE(line.find(std::to_string(machines) + " machines"), std::string::npos);
    // Through the rule: the same change, and the guard.
    std::ostringstream text;
    text << "share=" << std::setprecision(17) << job_speed;
    auto rule = Make(text.str(), machines, 1, true);
    const std::vector<std::string> lines = rule->AdjustJobSolver(machines, &q);
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0], line);
    EXPECT_EQ(q.momentum(), p.momentum());
    EXPECT_EQ(q.base_lr(), p.base_lr());
    EXPECT_EQ(rule->norm_guard(), kShareNormGuard);
    pb::SolverParameter untouched;
    untouched.set_momentum(mu);
    EXPECT_TRUE(Make("sum", machines, 1, true)->AdjustJobSolver(machines, &untouched).empty());
    EXPECT_EQ(untouched.momentum(), mu);
    EXPECT_EQ(Make("sum", machines, 1, true)->norm_guard(), 0);
  }
  pb::SolverParameter adam;
  adam.set_type("Adam");
  adam.set_momentum(0.9f);
  adam.set_base_lr(0.001f);
  EXPECT_EQ(ShareMomentum(4, 3, &adam), "");
  EXPECT_FLOAT_EQ(adam.momentum(), 0.9f);
  pb::SolverParameter plain;
  plain.set_base_lr(0.01f);
  EXPECT_EQ(ShareMomentum(4, 3, &plain), "");
  EXPECT_FLOAT_EQ(plain.base_lr(), 0.01f);
  pb::SolverParameter one;
  one.set_momentum(0.9f);
  EXPECT_EQ(ShareMomentum(1, 1, &one), "");
  // floor=F (<= 0): the momentum may go below 0, down to F, at the same speed.
  for (const double floor : {-0.3, -0.9}) {
    pb::SolverParameter many;
    many.set_momentum(0.9f);
    many.set_base_lr(0.01f);
    auto rule = Make("share=4,floor=" + std::to_string(floor), 16, 1, true);
    rule->AdjustJobSolver(16, &many);
    const double want = std::max(floor, 1 - 16 * 0.1);  // 1 - 16 x 0.1 = -0.6
    EXPECT_NEAR(many.momentum(), want, 1e-6) << floor;
    EXPECT_NEAR(many.base_lr() / (1 - many.momentum()), 0.01 / 0.1 * 4 / 16, 1e-6) << floor;
  }
  EXPECT_NE(ErrorOf([] { Make("share,floor=-1", 8, 1, true); }), "") << "a floor of -1 or below";
}

// gsp across machines: the 1/staleness weights between its machines take a delta of the
// staleness of equal pace (machines - 1, at most 3) whole; `scale=` still sets it.
TEST(AggregateTest, GspTakesTheDeltasOfEqualPaceWhole) {
  EXPECT_EQ(GspWeightScale(2), 1.f);
  EXPECT_EQ(GspWeightScale(3), 2.f);
  EXPECT_EQ(GspWeightScale(4), 3.f);
  EXPECT_EQ(GspWeightScale(8), 3.f) << "beyond 4 machines, the job's speed bounds it";
  auto r = Make("auto", 1, GspWeightScale(4), false, nullptr, /*policy_weights=*/true);  // gsp's rule
  EXPECT_TRUE(Weighted(*r));
  EXPECT_EQ(FieldOf(*r, "scale"), 3);
  EXPECT_NE(r->Line().find("min(1, 3 / its staleness)"), std::string::npos) << r->Line();
  EXPECT_EQ(FieldOf(*Make("scale=1", 1, GspWeightScale(4), false, nullptr, true), "scale"), 1);
}

// easgd: the centre is its copies' mean and trails them, so each solver's rate is multiplied
// by min(copies, kEasgdSpeed) (1 + K) / K, K = solvers (1 + (machines - 1) w), w the
// aggregation's weight of another machine's delta at equal pace; a single copy keeps the
// recipe's rate.
TEST(AggregateTest, EasgdMovesTheCentreAtTheCopiesCount) {
  std::mt19937 rng(TestSeed());
  for (int machines = 1; machines <= 16; ++machines) {
    const double w = Make("auto", machines)->EqualPaceWeight(machines);  // easgd's default: 1/staleness from 3
    EXPECT_DOUBLE_EQ(w, machines <= 2 ? 1 : 1.0 / (machines - 1)) << machines << " machines";
    for (int solvers = 1; solvers <= 8; solvers *= 2) {
      const double speed = EasgdSpeed(machines, solvers, w);
      // one solver per machine: K = 2 whatever the count (whole at 2, 1/(machines - 1) beyond);
      // one machine: K = solvers (each pull whole)
      const int copies = machines * solvers;
      const double k = machines == 1 ? solvers : 2.0 * solvers;
      EXPECT_DOUBLE_EQ(speed, copies == 1 ? 1 : std::min(copies, kEasgdSpeed) * (1 + k) / k)
          << machines << " x " << solvers;
      const float lr = std::uniform_real_distribution<float>(1e-4f, 0.1f)(rng);
      pb::SolverParameter p;
      p.set_base_lr(lr);
      p.set_momentum(0.9f);
      const std::string line = EasgdSpeedUp(copies, speed, &p);
      EXPECT_FLOAT_EQ(p.base_lr(), static_cast<float>(lr * speed)) << machines << " x " << solvers;
      EXPECT_FLOAT_EQ(p.momentum(), 0.9f) << "the momentum is the recipe's";
      EXPECT_EQ(line.empty(), copies == 1) << line;
      if (copies > 1) {
        EXPECT_NE(line.find("the mean of its " + std::to_string(copies) + " copies"), std::string::npos) << line;
      }
    }
  }
  EXPECT_DOUBLE_EQ(EasgdSpeed(1, 4, 1), 5) << "4 copies in one process: 4 x 5/4";
  EXPECT_DOUBLE_EQ(EasgdSpeed(4, 1, 1.0 / 3), 6) << "4 machines of one solver: 4 x 3/2";
  // The aggregation's weights decide K: whole deltas at 4 machines, or 3 / staleness: K = 4.
  EXPECT_DOUBLE_EQ(EasgdSpeed(4, 1, Make("sum", 4)->EqualPaceWeight(4)), 4 * 5.0 / 4);
  EXPECT_DOUBLE_EQ(EasgdSpeed(4, 1, Make("scale=3", 4)->EqualPaceWeight(4)), 4 * 5.0 / 4);
}

// Several solvers on one machine: the job's speed is counted in solvers' steps. By default a
// machine of n solvers moves at min(n, max(1, 4 / machines)) solvers' speed (local=F sets F);
// each solver's base_lr is scaled by that / n, its momentum left alone; one solver, or F >= n,
// changes nothing.
TEST(AggregateTest, SeveralSolversPerMachineCountTheJobInSolvers) {
  pb::SolverParameter sgd;
  sgd.set_momentum(0.9f);
  sgd.set_base_lr(0.01f);
  sgd.set_max_iter(6000);
  for (int machines : {1, 2, 3, 4, 8}) {
    for (const char* text : {"auto", "sum", "schedule", "weight=1"}) {
      if (machines < 2 && std::string(text) == "schedule") continue;
      EXPECT_DOUBLE_EQ(Make(text, machines, 1, true, &sgd)->local_speed(),
                       machines >= 2 ? std::max(1.0, kJobSolverSpeed / machines) : 0)
          << machines << " " << text;
    }
    if (machines < 2) continue;
    EXPECT_EQ(Make("local=3", machines, 1, true, &sgd)->local_speed(), 3);
    EXPECT_EQ(Make("schedule,local=2.5", machines, 1, true, &sgd)->local_speed(), 2.5);
  }
  for (const char* bad : {"local=0.5", "local=", "local=x", "local=50%"}) {
    const std::string e = ErrorOf([&] { Make(bad, 4, 1, true, &sgd); });
    EXPECT_NE(e.find("--aggregate"), std::string::npos) << bad << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << bad;
  }
  // Not offered (easgd, bsp, gsp; private copies in one process): one line.
  const std::string e = ErrorOf([&] { Make("local=2", 4, 1, false, &sgd); });
  EXPECT_NE(e.find("--aggregate=local=2"), std::string::npos) << e;

  std::mt19937 rng(TestSeed());
  std::uniform_real_distribution<double> lr_of(1e-4, 0.1);
  for (int solvers : {2, 3, 4, 8, 16}) {
    const double machine_speed = std::uniform_real_distribution<double>(1, solvers)(rng);
    pb::SolverParameter p = sgd;
    const float lr = static_cast<float>(lr_of(rng));
    p.set_base_lr(lr);
    const std::string line = SolverLocalShare(solvers, machine_speed, &p);
    SCOPED_TRACE(line);
    EXPECT_NEAR(p.base_lr() * solvers, lr * machine_speed, 1e-5 * lr * machine_speed) << solvers;
    EXPECT_FLOAT_EQ(p.momentum(), 0.9f);
    EXPECT_NE(line.find(std::to_string(solvers) + " solvers"), std::string::npos);
    pb::SolverParameter q = sgd;
    EXPECT_EQ(SolverLocalShare(solvers, solvers, &q), "");
    EXPECT_EQ(SolverLocalShare(solvers, 0, &q), "") << "0: not a job across machines";
    EXPECT_FLOAT_EQ(q.base_lr(), sgd.base_lr());
    // Through a rule: local=F over `solvers`.
    pb::SolverParameter r = sgd;
    r.set_base_lr(lr);
    std::ostringstream text;
    text << "sum,local=" << std::setprecision(17) << machine_speed;
    EXPECT_EQ(Make(text.str(), 4, 1, true, &sgd)->AdjustLocalSolver(solvers, &r), line);
    EXPECT_EQ(r.base_lr(), p.base_lr());
  }
  pb::SolverParameter one = sgd;
  EXPECT_EQ(SolverLocalShare(1, 1, &one), "");
  EXPECT_FLOAT_EQ(one.base_lr(), sgd.base_lr());
}

}  // namespace
}  // namespace hogstream

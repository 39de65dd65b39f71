#include "core/solver.hpp"

#include <google/protobuf/text_format.h>
#include "test/test_seed.hpp"
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/io.hpp"
#include "sync/group.hpp"
#include "sync/solver_group.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

namespace fs = std::filesystem;

// Least squares: y_hat = W x + b over a fixed batch of 4, EuclideanLoss. Bias has lr_mult 2
// and decay_mult 0, so the multipliers are exercised.
const char kLinearNet[] = R"(
  layer { name: "in" type: "Input" top: "x" top: "y"
          input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
  layer { name: "ip" type: "InnerProduct" bottom: "x" top: "yhat"
          param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
          inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
                                bias_filler { type: "gaussian" std: 0.5 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "yhat" bottom: "y" top: "loss" })";

// The linear net with defaults; `extra` (solver fields) overrides them.
pb::SolverParameter LinearSolver(const std::string& extra) {
  pb::SolverParameter p, over;
  const std::string text = std::string("net_param {") + kLinearNet + "}\n" +
                           "base_lr: 0.1 lr_policy: 'fixed' max_iter: 100 solver_mode: CPU\n" +
                           "random_seed: 7 weight_decay: 0.01\n";
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p));
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(extra, &over)) << extra;
  p.MergeFrom(over);
  return p;
}

SolverOptions Quiet() {
  SolverOptions o;
  o.log = false;
  return o;
}

void SetInputs(Solver& s, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  for (Blob* b : s.net().input_blobs())
    for (int i = 0; i < b->count(); ++i) b->mutable_cpu_data()[i] = d(gen);
}

// Batch i of an ordinary run: one random batch (of `seed`) and a tenth of fresh noise (of seed +
// 1 + i), so that the gradients' norms keep one spread (fresh batches of this small a net now
// and then come out 3 times their mean, which a norm guard rightly clips).
void SetOrdinaryInputs(Solver& s, uint32_t seed, int i) {
  std::mt19937 base(seed), noise(seed + 1 + static_cast<uint32_t>(i));
  std::normal_distribution<float> d;
  for (Blob* b : s.net().input_blobs())
    for (int k = 0; k < b->count(); ++k) b->mutable_cpu_data()[k] = d(base) + 0.1f * d(noise);
}

// Runs `f` after each iteration: a test's window into the solver's loop.
struct AfterEach final : SolverCallback {
  explicit AfterEach(std::function<void()> f) : f(std::move(f)) {}
  void AfterIteration() override { f(); }
  std::function<void()> f;
};

// Writes what its solver tells it, by name, into a log shared with other recorders; says stop
// at its `stop_at`-th BeforeIteration, and restores a divergence when `restores`.
struct Recorder final : SolverCallback {
  Recorder(std::string name, std::vector<std::string>* log) : name(std::move(name)), log(log) {}
  bool BeforeIteration() override {
    log->push_back(name + " before");
    return ++befores != stop_at;
  }
  void AfterBackward(Net& n) override {
    log->push_back(name + " backward");
    net = &n;
  }
  void AfterIteration() override { log->push_back(name + " after"); }
  bool Diverged(std::string* why) override {
    log->push_back(name + " diverged");
    *why = name + " could not";
    return restores;
  }
  void TrainEnd() override { log->push_back(name + " end"); }
  std::string name;
  std::vector<std::string>* log;
  int befores = 0, stop_at = -1;
  bool restores = false;
  Net* net = nullptr;
};

// The reference: plain loops, straight from the published rules.
struct Reference {
  std::string type;
  float lr = 0.1f, momentum = 0, momentum2 = 0.999f, delta = 1e-8f, rms = 0.99f, decay = 0.01f;
  std::vector<double> w, h, h2;  // params: W (6) then b (2)

  void Step(int iter, const std::vector<float>& x, const std::vector<float>& y) {
    // Gradient of 1/(2N) sum ||W x + b - y||^2.
    std::vector<double> g(8, 0.0);
    for (int n = 0; n < 4; ++n)
      for (int o = 0; o < 2; ++o) {
        double r = w[6 + o] - y[n * 2 + o];
        for (int k = 0; k < 3; ++k) r += w[o * 3 + k] * x[n * 3 + k];
        for (int k = 0; k < 3; ++k) g[o * 3 + k] += r * x[n * 3 + k] / 4;
        g[6 + o] += r / 4;
      }
    for (int i = 0; i < 6; ++i) g[i] += decay * w[i];
    for (int i = 0; i < 8; ++i) {
      const double l = lr * (i < 6 ? 1 : 2);
      double step = 0;
      if (type == "SGD") {
        step = h[i] = momentum * h[i] + l * g[i];
      } else if (type == "Nesterov") {
        const double prev = h[i];
        h[i] = momentum * h[i] + l * g[i];
        step = (1 + momentum) * h[i] - momentum * prev;
      } else if (type == "AdaGrad") {
        h[i] += g[i] * g[i];
        step = l * g[i] / (std::sqrt(h[i]) + delta);
      } else if (type == "RMSProp") {
        h[i] = rms * h[i] + (1 - rms) * g[i] * g[i];
        step = l * g[i] / (std::sqrt(h[i]) + delta);
      } else if (type == "AdaDelta") {
        h[i] = momentum * h[i] + (1 - momentum) * g[i] * g[i];
        const double u = g[i] * std::sqrt((h2[i] + delta) / (h[i] + delta));
        h2[i] = momentum * h2[i] + (1 - momentum) * u * u;
        step = l * u;
      } else if (type == "Adam") {
        h[i] = momentum * h[i] + (1 - momentum) * g[i];
        h2[i] = momentum2 * h2[i] + (1 - momentum2) * g[i] * g[i];
        const double t = iter + 1;
        const double c = std::sqrt(1 - std::pow(momentum2, t)) / (1 - std::pow(momentum, t));
        step = l * c * h[i] / (std::sqrt(h2[i]) + delta);
      }
      w[i] -= step;
    }
  }
};

struct RuleCase {
  const char* type;
  float momentum;
  const char* extra;
};

std::ostream& operator<<(std::ostream& os, const RuleCase& c) {
  return os << c.type << " momentum " << c.momentum << " " << c.extra;
}

class SolverRule : public ::testing::TestWithParam<RuleCase> {};

TEST_P(SolverRule, MatchesHandComputedUpdates) {
  const RuleCase c = GetParam();
  auto solver = CreateSolver(LinearSolver(std::string("type: '") + c.type + "' momentum: " +
                                          std::to_string(c.momentum) + " " + c.extra),
                             Quiet());
  SetInputs(*solver, TestSeed());
  Reference ref;
  ref.type = c.type;
  ref.momentum = c.momentum;
  if (ref.type == "AdaDelta") ref.delta = 1e-6f, ref.lr = 1.0f;
  if (ref.type == "RMSProp") ref.rms = 0.95f;
  const auto& params = solver->net().learnable_params();
  for (int i = 0; i < 6; ++i) ref.w.push_back(params[0]->cpu_data()[i]);
  for (int i = 0; i < 2; ++i) ref.w.push_back(params[1]->cpu_data()[i]);
  ref.h.assign(8, 0);
  ref.h2.assign(8, 0);
  const Blob* x = solver->net().input_blobs()[0];
  const Blob* y = solver->net().input_blobs()[1];
  const std::vector<float> xs(x->cpu_data(), x->cpu_data() + 12), ys(y->cpu_data(), y->cpu_data() + 8);
  for (int it = 0; it < 5; ++it) {
    solver->Step(1);
    ref.Step(it, xs, ys);
    for (int i = 0; i < 8; ++i) {
      const float got = i < 6 ? params[0]->cpu_data()[i] : params[1]->cpu_data()[i - 6];
      ASSERT_NEAR(got, ref.w[i], 1e-5 * (1 + std::fabs(ref.w[i]))) << c.type << " iter " << it << " param " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllRules, SolverRule,
    ::testing::Values(RuleCase{"SGD", 0.9f, ""}, RuleCase{"SGD", 0.f, ""},
                      RuleCase{"Nesterov", 0.9f, ""}, RuleCase{"AdaGrad", 0.f, ""},
                      RuleCase{"RMSProp", 0.f, "rms_decay: 0.95"},
                      RuleCase{"AdaDelta", 0.95f, "delta: 1e-6 base_lr: 1.0"},
                      RuleCase{"Adam", 0.9f, "momentum2: 0.999"}),
    [](const auto& info) { return std::string(info.param.type) + std::to_string(info.index); });

// A solver alone acts on its own stop and snapshot requests; a leave on notice is for a machine
// of a job across machines: a warning, which a solver told not to log (SolverOptions::log)
// keeps to itself.
TEST(LoneGroupTest, StopAndSnapshotAreItsOwnALeaveIsAWarningUnlessLogIsOff) {
  int iter = 7;
  bool log = true;
  LoneGroup g(&iter, &log);
  EXPECT_EQ(g.Reached(), 7);
  int64_t seen = 0;
  ::testing::internal::CaptureStderr();
  g.Request(SolverAction::LEAVE);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("SIGUSR1 (leave on notice) is for one machine"),
            std::string::npos);
  EXPECT_EQ(g.Pending(&seen), SolverAction::NONE) << "a leave is not acted upon";
  log = false;
  ::testing::internal::CaptureStderr();
  g.Request(SolverAction::LEAVE);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "log off: not a word";
  g.Request(SolverAction::SNAPSHOT);
  EXPECT_EQ(g.Pending(&seen), SolverAction::SNAPSHOT);
  EXPECT_EQ(g.Pending(&seen), SolverAction::NONE) << "one snapshot per request";
  g.Request(SolverAction::STOP);
  EXPECT_EQ(g.Pending(&seen), SolverAction::STOP);
}

TEST(Solver, LegacySolverTypeEnum) {
  auto s = CreateSolver(LinearSolver("solver_type: NESTEROV momentum: 0.9"), Quiet());
  EXPECT_STREQ(s->type(), "Nesterov");
}

TEST(Solver, LearningRatePolicies) {
  struct P {
    const char* text;
    std::function<double(int)> f;
  };
  const double b = 0.1;
  const std::vector<P> policies = {
      {"lr_policy: 'fixed'", [&](int) { return b; }},
      {"lr_policy: 'step' gamma: 0.5 stepsize: 3", [&](int i) { return b * std::pow(0.5, i / 3); }},
      {"lr_policy: 'exp' gamma: 0.9", [&](int i) { return b * std::pow(0.9, i); }},
      {"lr_policy: 'inv' gamma: 0.0001 power: 0.75",
       [&](int i) { return b * std::pow(1 + 0.0001 * i, -0.75); }},
      {"lr_policy: 'poly' power: 2 max_iter: 10", [&](int i) { return b * std::pow(1 - i / 10.0, 2); }},
      {"lr_policy: 'sigmoid' gamma: -0.5 stepsize: 4",
       [&](int i) { return b / (1 + std::exp(0.5 * (i - 4))); }},
      {"lr_policy: 'multistep' gamma: 0.1 stepvalue: 2 stepvalue: 5",
       [&](int i) { return b * std::pow(0.1, (i >= 2) + (i >= 5)); }},
  };
  for (const auto& p : policies) {
    auto s = CreateSolver(LinearSolver(std::string(p.text) + " momentum: 0"), Quiet());
    SetInputs(*s, 1);
    for (int i = 0; i < 8; ++i) {
      // multistep advances its step inside the update; compare the rate the update used.
      const bool multistep = std::string(p.text).find("multistep") != std::string::npos;
      if (!multistep) {
        EXPECT_NEAR(s->GetLearningRate(), p.f(i), 1e-7) << p.text << " iter " << i;
      }
      s->Step(1);
      if (multistep) {
        EXPECT_NEAR(s->GetLearningRate(), p.f(i), 1e-7) << p.text << " iter " << i;
      }
    }
  }
}

TEST(Solver, IterSizeAveragesGradients) {
  // The same batch twice with iter_size 2 is the same step as once with iter_size 1.
  auto a = CreateSolver(LinearSolver("momentum: 0.9"), Quiet());
  auto b = CreateSolver(LinearSolver("momentum: 0.9 iter_size: 2"), Quiet());
  SetInputs(*a, 3);
  SetInputs(*b, 3);
  a->Step(4);
  b->Step(4);
  for (size_t i = 0; i < a->net().param_buffer_size(); ++i)
    ASSERT_NEAR(a->net().param_data()[i], b->net().param_data()[i], 1e-6);
}

TEST(Solver, ClipGradientsBoundsTheStep) {
  auto s = CreateSolver(LinearSolver("momentum: 0 weight_decay: 0 clip_gradients: 0.01"), Quiet());
  SetInputs(*s, 5);
  std::vector<float> before(s->net().param_data(), s->net().param_data() + s->net().param_buffer_size());
  s->Step(1);
  // lr 0.1; bias has lr_mult 2, so the step norm is between 0.1 * 0.01 and 0.2 * 0.01.
  double norm = 0;
  for (size_t i = 0; i < before.size(); ++i) norm += std::pow(s->net().param_data()[i] - before[i], 2);
  norm = std::sqrt(norm);
  EXPECT_GE(norm, 0.001 * 0.999);
  EXPECT_LE(norm, 0.002 * 1.001);
}

TEST(NormGuard, LeavesOrdinaryNormsAloneAndHoldsSpikesAndRunawaysToTheBound) {
  std::mt19937 gen(TestSeed());
  std::uniform_real_distribution<double> ordinary(0.5, 1.5);  // a minibatch's spread about 1
  NormGuard g(3, /*warmup=*/20, /*decay=*/0.95, /*give_up=*/1000);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(g.Scale(ordinary(gen)), 1.0) << "step " << i;
  EXPECT_EQ(g.clipped(), 0u);
  EXPECT_NEAR(g.mean(), 1.0, 0.2);
  // One spike: scaled down to exactly 3 times the mean before it.
  double mean = g.mean();
  EXPECT_NEAR(g.Scale(40) * 40, 3 * mean, 1e-9);
  EXPECT_EQ(g.clipped(), 1u);
  // A non-finite norm is the divergence handling's: untouched, and the mean with it.
  mean = g.mean();
  EXPECT_EQ(g.Scale(std::nan("")), 1.0);
  EXPECT_EQ(g.Scale(INFINITY), 1.0);
  EXPECT_EQ(g.mean(), mean);
  // A runaway (each norm 1.5 times the last): every applied norm stays within the bound, which
  // grows by at most 1 + (3 - 1)(1 - 0.95) = 1.1 a step, far slower than the runaway.
  double norm = 1, bound = 3 * g.mean();
  for (int i = 0; i < 40; ++i) {
    norm *= 1.5;
    const double applied = norm * g.Scale(norm);
    EXPECT_LE(applied, bound * (1 + 1e-12)) << "step " << i;
    bound *= 1.1;
  }
  EXPECT_LT(3 * g.mean(), 1e-3 * norm);
  // Nothing is clipped during the warm-up, whatever comes.
  NormGuard fresh(3, 20, 0.95);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(fresh.Scale(i % 2 ? 100.0 : 0.01), 1.0);
}

TEST(NormGuard, LetsARunawayGoAfterGiveUpStepsBeyondItsBoundAndIsArmedAgainByReset) {
  std::mt19937 gen(TestSeed());
  std::uniform_real_distribution<double> ordinary(0.5, 1.5);
  NormGuard g(3, 20, 0.95, /*give_up=*/10);
  for (int i = 0; i < 100; ++i) g.Scale(ordinary(gen));
  // Spikes with ordinary steps between them are held, however many.
  for (int i = 0; i < 200; ++i) {
    const double s = g.Scale(i % 3 ? ordinary(gen) : 50.0);
    if (i % 3) ASSERT_EQ(s, 1.0) << i;
    else ASSERT_LT(s, 1.0) << i;
  }
  EXPECT_FALSE(g.let_go());
  const uint64_t before = g.clipped();
  EXPECT_GE(before, 60u);
  // A runaway: the first 9 beyond the bound are clipped, the 10th goes through, and from then
  // on every gradient does, until Reset.
  double norm = 10 * g.mean();
  for (int i = 0; i < 9; ++i, norm *= 1.5) EXPECT_LT(g.Scale(norm), 1.0) << i;
  EXPECT_FALSE(g.let_go());
  EXPECT_EQ(g.Scale(norm), 1.0);
  EXPECT_TRUE(g.let_go());
  EXPECT_EQ(g.let_gos(), 1u);
  for (int i = 0; i < 20; ++i, norm *= 1.5) EXPECT_EQ(g.Scale(norm), 1.0);
  EXPECT_EQ(g.clipped(), before + 9);
  // Reset: a fresh warm-up from the restored weights' norms, then clipping again.
  g.Reset();
  EXPECT_FALSE(g.let_go());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(g.Scale(i % 2 ? 100.0 : ordinary(gen)), 1.0);
  for (int i = 0; i < 50; ++i) g.Scale(ordinary(gen));
  EXPECT_LT(g.Scale(1000 * g.mean()), 0.01);
  EXPECT_EQ(g.let_gos(), 1u);
}

TEST(Solver, NormGuardClipsASpikedGradientAndNoOrdinaryOne) {
  const pb::SolverParameter p = LinearSolver("momentum: 0 weight_decay: 0");
  SolverOptions guarded = Quiet();
  guarded.norm_guard = 3;
  auto a = CreateSolver(p, Quiet());
  auto b = CreateSolver(p, guarded);
  const size_t n = a->net().param_buffer_size();
  const uint32_t seed = TestSeed();
  for (int i = 0; i < 30; ++i) {  // fresh batches of one spread: the guard leaves them be
    SetOrdinaryInputs(*a, seed, i);
    SetOrdinaryInputs(*b, seed, i);
    a->Step(1);
    b->Step(1);
  }
  ASSERT_NE(b->norm_guard(), nullptr);
  EXPECT_EQ(b->norm_guard()->clipped(), 0u);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(a->net().param_data()[i], b->net().param_data()[i]);
  EXPECT_EQ(a->norm_guard(), nullptr);
  // A batch 100 times larger: a's step follows it, b's is held to 3 times its recent norms.
  for (Solver* s : {a.get(), b.get()}) {
    SetInputs(*s, seed + 99);
    for (Blob* in : s->net().input_blobs()) in->scale_data(100.f);
  }
  std::vector<float> wa(a->net().param_data(), a->net().param_data() + n);
  std::vector<float> wb(b->net().param_data(), b->net().param_data() + n);
  const double mean = b->norm_guard()->mean();
  a->Step(1);
  b->Step(1);
  double sa = 0, sb = 0;
  for (size_t i = 0; i < n; ++i) {
    sa += std::pow(a->net().param_data()[i] - wa[i], 2);
    sb += std::pow(b->net().param_data()[i] - wb[i], 2);
  }
  EXPECT_EQ(b->norm_guard()->clipped(), 1u);
  // lr 0.1, the bias at lr_mult 2: the step's norm is 0.1 to 0.2 times the gradient's.
  EXPECT_LE(std::sqrt(sb), 0.2 * 3 * mean * 1.001);
  EXPECT_GE(std::sqrt(sb), 0.1 * 3 * mean * 0.999);
  EXPECT_GT(std::sqrt(sa), 20 * std::sqrt(sb));
}

// A solver calls its callbacks in the order they were added, at each point of its loop; the
// first that says stop ends training (the others are not asked); a divergence is offered to
// each in turn until one restores (the step skipped, the weights as they were), and where none
// does the solver ends with one line carrying the last reason.
TEST(SolverCallbacks, AreCalledInOrderAndTheFirstToStopOrRestoreDecides) {
  std::vector<std::string> log;
  Recorder a("a", &log), b("b", &log);
  SolverOptions o = Quiet();
  o.callbacks = {&a};
  auto s = CreateSolver(LinearSolver("max_iter: 2 snapshot_after_train: false"), o);
  s->AddCallback(&b);
  SetInputs(*s, TestSeed());
  s->Solve();
  const std::vector<std::string> one = {"a before", "b before", "a backward", "b backward", "a after", "b after"};
  std::vector<std::string> want;
  for (int i = 0; i < 2; ++i) want.insert(want.end(), one.begin(), one.end());
  want.insert(want.end(), {"a before", "b before", "a end", "b end"});  // the third is not claimed
  EXPECT_EQ(log, want);
  EXPECT_EQ(a.net, &s->net());
  EXPECT_EQ(s->iter(), 2);

  for (const bool first : {true, false}) {  // the first to stop decides; after it, nobody is asked
    SCOPED_TRACE(first ? "a stops" : "b stops");
    log.clear();
    Recorder c("a", &log), d("b", &log);
    (first ? c : d).stop_at = 2;
    SolverOptions q = Quiet();
    q.callbacks = {&c, &d};
    auto t = CreateSolver(LinearSolver("max_iter: 5 snapshot_after_train: false"), q);
    SetInputs(*t, TestSeed());
    t->Solve();
    want.assign(one.begin(), one.end());
    want.push_back("a before");
    if (!first) want.push_back("b before");
    want.insert(want.end(), {"a end", "b end"});
    EXPECT_EQ(log, want);
    EXPECT_EQ(t->iter(), 1);
  }

  // Lost weights: the loss is NaN. b restores: the step is skipped, both asked in turn.
  log.clear();
  Recorder e("a", &log), f("b", &log);
  f.restores = true;
  SolverOptions r = Quiet();
  r.callbacks = {&e, &f};
  auto u = CreateSolver(LinearSolver("max_iter: 5 snapshot_after_train: false"), r);
  SetInputs(*u, TestSeed());
  u->net().input_blobs()[0]->mutable_cpu_data()[1] = std::numeric_limits<float>::quiet_NaN();
  const size_t n = u->net().param_buffer_size();
  const std::vector<float> before(u->net().param_data(), u->net().param_data() + n);
  u->Step(1);
  EXPECT_EQ(log, (std::vector<std::string>{"a before", "b before", "a diverged", "b diverged", "a after", "b after",
                                            "a before", "b before"}));  // (the next, not claimed)
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(u->net().param_data()[i], before[i]) << i << ": the lost step was taken";
  // a restores: b is not asked.
  log.clear();
  e.restores = true;
  f.restores = false;
  u->Step(1);
  EXPECT_EQ(log, (std::vector<std::string>{"a before", "b before", "a diverged", "a after", "b after",
                                            "a before", "b before"}));
  // Nobody restores: one line, with the last reason.
  e.restores = false;
  try {
    u->Step(1);
    ADD_FAILURE() << "a divergence nobody restored went on";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("loss is nan"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("b could not"), std::string::npos) << err.what();
  }
}

// The leader's display asks every callback for its own lines (OnDisplay), at each display and
// only where the solver logs: what a solver trains within logs its figures there, not through
// text the engine carries.
TEST(SolverCallbacks, OnDisplayComesAtEachDisplayWhereTheSolverLogs) {
  struct Display final : SolverCallback {
    void OnDisplay() override { at.push_back(solver->iter()); }
    const Solver* solver = nullptr;
    std::vector<int> at;
  };
  for (const bool log : {true, false}) {
    SCOPED_TRACE(log ? "logging" : "quiet");
    Display d;
    SolverOptions o;
    o.log = log;
    o.callbacks = {&d};
    auto s = CreateSolver(LinearSolver("max_iter: 7 display: 3 snapshot_after_train: false"), o);
    d.solver = s.get();
    SetInputs(*s, TestSeed());
    s->Solve();
    EXPECT_EQ(d.at, (log ? std::vector<int>{0, 3, 6} : std::vector<int>{}));
  }
}

TEST(Solver, SameSeedSameLossesDifferentSeedDifferent) {
  // DummyData with a gaussian filler draws new data every pass from the solver's RNG.
  const std::string net = R"(net_param {
    layer { name: "d" type: "DummyData" top: "x" top: "y"
            dummy_data_param { shape { dim: 8 dim: 5 } shape { dim: 8 dim: 2 }
                               data_filler { type: "gaussian" } } }
    layer { name: "ip" type: "InnerProduct" bottom: "x" top: "p"
            inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "p" bottom: "y" top: "loss" } }
    base_lr: 0.05 lr_policy: 'fixed' momentum: 0.9 max_iter: 30 solver_mode: CPU )";
  auto run = [&](int seed) {
    pb::SolverParameter p;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(net + " random_seed: " + std::to_string(seed), &p));
    auto s = CreateSolver(p, Quiet());
    std::vector<float> losses;
    for (int i = 0; i < 20; ++i) {
      s->Step(1);
      losses.push_back(s->smoothed_loss());
    }
    return losses;
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
}

// A two-layer classifier on a fixed synthetic task: loss falls and accuracy rises.
TEST(Solver, ShortTrainingLearns) {
  const std::string text = R"(
    net_param {
      layer { name: "in" type: "Input" top: "x" top: "label"
              input_param { shape { dim: 64 dim: 10 } shape { dim: 64 } } }
      layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h"
              inner_product_param { num_output: 32 weight_filler { type: "xavier" } } }
      layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
      layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "score"
              inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
      layer { name: "acc" type: "Accuracy" bottom: "score" bottom: "label" top: "accuracy"
              include { phase: TEST } }
      layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" } }
    base_lr: 0.1 lr_policy: 'fixed' momentum: 0.9 weight_decay: 0.0005 max_iter: 300
    test_iter: 1 test_interval: 1000 test_initialization: false solver_mode: CPU random_seed: 3)";
  pb::SolverParameter p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p));
  auto s = CreateSolver(p, Quiet());
  // Labels from a random linear teacher; the test net sees the same inputs (Input blobs are
  // per net, so fill both).
  std::mt19937 gen(TestSeed());
  std::normal_distribution<float> d;
  std::vector<float> teacher(30);
  for (auto& t : teacher) t = d(gen);
  auto fill = [&](Net& net, std::mt19937 g) {
    Blob* x = net.input_blobs()[0];
    Blob* l = net.input_blobs()[1];
    for (int n = 0; n < 64; ++n) {
      float best = -1e9f;
      int arg = 0;
      for (int k = 0; k < 10; ++k) x->mutable_cpu_data()[n * 10 + k] = d(g);
      for (int c = 0; c < 3; ++c) {
        float v = 0;
        for (int k = 0; k < 10; ++k) v += teacher[c * 10 + k] * x->cpu_data()[n * 10 + k];
        if (v > best) best = v, arg = c;
      }
      l->mutable_cpu_data()[n] = static_cast<float>(arg);
    }
  };
  const uint32_t data_seed = gen();
  fill(s->net(), std::mt19937(data_seed));
  fill(*s->test_nets()[0], std::mt19937(data_seed));
  const float acc0 = s->TestAll()[0][0];
  s->Step(1);
  const float loss0 = s->smoothed_loss();
  s->Step(299);
  EXPECT_LT(s->smoothed_loss(), 0.3f * loss0);
  const float acc = s->TestAll()[0][0];
  EXPECT_GT(acc, 0.9f);
  EXPECT_GT(acc, acc0);
}

class SolverSnapshot : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hs_snap_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(SolverSnapshot, SnapshotAt100ResumeTo200EqualsUninterrupted) {
  for (const char* type : {"SGD", "Adam"}) {
    const std::string extra = std::string("type: '") + type + "' momentum: 0.9 max_iter: 200 " +
                              "lr_policy: 'step' gamma: 0.5 stepsize: 60 snapshot: 100 " +
                              "snapshot_after_train: false snapshot_prefix: '" +
                              (dir_ / type).string() + "'";
    auto straight = CreateSolver(LinearSolver(extra), Quiet());
    SetInputs(*straight, 9);
    straight->Solve();
    ASSERT_TRUE(fs::exists(dir_ / (std::string(type) + "_iter_100.caffemodel")));
    ASSERT_TRUE(fs::exists(dir_ / (std::string(type) + "_iter_200.solverstate")));

    auto resumed = CreateSolver(LinearSolver(extra + " random_seed: 12345"), Quiet());
    SetInputs(*resumed, 9);
    resumed->Solve((dir_ / (std::string(type) + "_iter_100.solverstate")).string());
    EXPECT_EQ(resumed->iter(), 200);
    for (size_t i = 0; i < straight->net().param_buffer_size(); ++i)
      ASSERT_EQ(straight->net().param_data()[i], resumed->net().param_data()[i]) << type << " " << i;
  }
}

// A solver alone (its own null group) snapshots at each multiple its Step reaches, the last
// one included, as Caffe's Step does; and once per multiple.
TEST_F(SolverSnapshot, AStepAloneSnapshotsAtEveryMultipleItReachesTheLastToo) {
  auto s = CreateSolver(LinearSolver("max_iter: 1000 snapshot: 5 snapshot_after_train: false snapshot_prefix: '" +
                                     (dir_ / "step").string() + "'"),
                        Quiet());
  SetInputs(*s, 4);
  s->Step(10);
  EXPECT_TRUE(fs::exists(dir_ / "step_iter_5.caffemodel"));
  EXPECT_TRUE(fs::exists(dir_ / "step_iter_10.caffemodel")) << "the multiple the Step ended on";
  const auto written = fs::last_write_time(dir_ / "step_iter_10.caffemodel");
  s->Step(2);
  EXPECT_EQ(fs::last_write_time(dir_ / "step_iter_10.caffemodel"), written) << "not written twice";
  EXPECT_FALSE(fs::exists(dir_ / "step_iter_12.caffemodel"));
}

TEST_F(SolverSnapshot, TruncatedFilesAreClearErrors) {
  auto s = CreateSolver(LinearSolver("momentum: 0.9 snapshot_prefix: '" + (dir_ / "t").string() + "'"), Quiet());
  SetInputs(*s, 1);
  s->Step(3);
  const std::string model = s->Snapshot();
  const std::string state = (dir_ / "t_iter_3.solverstate").string();
  fs::resize_file(model, fs::file_size(model) / 2);
  EXPECT_THROW(s->Restore(state), Error);
  fs::resize_file(state, fs::file_size(state) / 2);
  EXPECT_THROW(s->Restore(state), Error);
  EXPECT_THROW(s->Restore((dir_ / "missing.solverstate").string()), Error);
}

TEST(Solver, BadSettingsAreErrors) {
  EXPECT_THROW(CreateSolver(LinearSolver("lr_policy: 'cosine'"), Quiet()), Error);
  EXPECT_THROW(CreateSolver(LinearSolver("type: 'LBFGS'"), Quiet()), Error);
  EXPECT_THROW(CreateSolver(LinearSolver("type: 'AdaGrad' momentum: 0.9"), Quiet()), Error);
  EXPECT_THROW(CreateSolver(LinearSolver("regularization_type: 'L3'"), Quiet()), Error);
  EXPECT_THROW(CreateSolver(LinearSolver("test_iter: 5"), Quiet()), Error);  // no test_interval
  if (!GpuAvailable()) {
    try {
      CreateSolver(LinearSolver("solver_mode: GPU"), Quiet());
      FAIL() << "GPU mode without a GPU must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("solver_mode: CPU"), std::string::npos) << e.what();
    }
  }
}

TEST(Solver, L1RegularizationUsesTheSign) {
  auto s = CreateSolver(LinearSolver("momentum: 0 regularization_type: 'L1' weight_decay: 0.5"), Quiet());
  SetInputs(*s, 2);
  // Zero inputs and targets: the data gradient vanishes and only the L1 term moves W.
  for (Blob* b : s->net().input_blobs()) std::fill_n(b->mutable_cpu_data(), b->count(), 0.f);
  Blob* w = s->net().learnable_params()[0];
  std::vector<float> before(w->cpu_data(), w->cpu_data() + w->count());
  s->Step(1);
  for (int i = 0; i < w->count(); ++i)
    EXPECT_NEAR(w->cpu_data()[i], before[i] - 0.1f * 0.5f * ((before[i] > 0) - (before[i] < 0)), 1e-6);
}


// Settings that can only fail at a snapshot fail before the first iteration, as in Caffe (they
// used to fail after the whole run).
TEST_F(SolverSnapshot, SnapshotSettingsAreCheckedBeforeTraining) {
  auto missing = CreateSolver(
      LinearSolver("snapshot_prefix: '" + (dir_ / "nowhere" / "x").string() + "'"), Quiet());
  SetInputs(*missing, 1);
  try {
    missing->Solve();
    FAIL() << "a missing snapshot directory must be an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  EXPECT_EQ(missing->iter(), 0) << "it trained before failing";
  auto hdf5 = CreateSolver(
      LinearSolver("snapshot_format: HDF5 snapshot: 0 snapshot_after_train: false snapshot_prefix: '" +
                   (dir_ / "h").string() + "'"),
      Quiet());
  SetInputs(*hdf5, 1);
  EXPECT_THROW(hdf5->Solve(), Error);
  EXPECT_EQ(hdf5->iter(), 0);
}

// A snapshot directory that goes away during training: the snapshots due meanwhile fail (one
// warning), training goes on, and the next snapshot once it is back is written; only the final
// one must succeed. A periodic file written during this run by another leader of the job (a
// leader that took over catches up) is left as it is; a file of an earlier run is overwritten.
TEST_F(SolverSnapshot, AnUnwritableDirectoryIsRetriedAtTheNextSnapshot) {
  const fs::path sub = dir_ / "snaps";
  fs::create_directories(sub);
  {  // an earlier run's iteration 2, and this run's other leader's iteration 8 (written below)
    std::ofstream(sub / "u_iter_2.caffemodel") << "old";
  }
  fs::last_write_time(sub / "u_iter_2.caffemodel", fs::file_time_type::clock::now() - std::chrono::hours(1));
  SolverOptions o = Quiet();
  int iteration = 0;
  bool overwrote_old = false;
  AfterEach after([&] {
    ++iteration;
    if (iteration == 3) {
      overwrote_old = fs::file_size(sub / "u_iter_2.caffemodel") != 3;
      fs::remove_all(sub);
    }
    if (iteration == 7) {
      fs::create_directories(sub);
      std::ofstream(sub / "u_iter_8.caffemodel") << "another leader's";
    }
  });
  o.callbacks = {&after};
  auto s = CreateSolver(LinearSolver("max_iter: 10 snapshot: 2 snapshot_prefix: '" + (sub / "u").string() + "'"), o);
  SetInputs(*s, 1);
  ASSERT_NO_THROW(s->Solve());
  EXPECT_EQ(s->iter(), 10);
  EXPECT_TRUE(overwrote_old) << "an earlier run's file was kept";
  EXPECT_FALSE(fs::exists(sub / "u_iter_4.caffemodel"));
  EXPECT_FALSE(fs::exists(sub / "u_iter_6.caffemodel"));
  EXPECT_TRUE(fs::exists(sub / "u_iter_10.caffemodel")) << "the final snapshot";
  std::ifstream eight(sub / "u_iter_8.caffemodel");
  std::string text((std::istreambuf_iterator<char>(eight)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "another leader's") << "another leader's file of this run was overwritten";
}

// A solver that begins to lead after the count passed some multiples of `snapshot` (a
// takeover; a machine back with a majority): those multiples belonged to the leader of that
// time. Files it wrote stay; where none was written, the later weights are written once under
// the global iteration they are of, never under an earlier multiple's name.
TEST_F(SolverSnapshot, MultiplesPassedBeforeLeadingAreNotWrittenUnderTheirNames) {
  for (const bool other_wrote_eight : {false, true}) {
    SCOPED_TRACE(other_wrote_eight ? "the other leader wrote iteration 8" : "nothing written before");
    const fs::path sub = dir_ / (other_wrote_eight ? "b" : "a");
    fs::create_directories(sub);
    SolverGroup g;
    g.solvers.store(1);
    MachineGroup job(&g, false);
    job.SetLeads(false);  // another machine leads at first
    SolverOptions o = Quiet();
    o.group = &job;
    int iteration = 0;
    AfterEach after([&] {
      if (++iteration == 6 && other_wrote_eight) std::ofstream(sub / "l_iter_8.caffemodel") << "another leader's";
      if (iteration == 9) job.SetLeads(true);  // this one leads from global iteration 9
    });
    o.callbacks = {&after};
    auto s = CreateSolver(LinearSolver("max_iter: 20 snapshot: 4 snapshot_prefix: '" + (sub / "l").string() + "'"), o);
    SetInputs(*s, 1);
    ASSERT_NO_THROW(s->Solve());
    EXPECT_FALSE(fs::exists(sub / "l_iter_4.caffemodel")) << "later weights under a passed multiple's name";
    if (other_wrote_eight) {
      std::ifstream eight(sub / "l_iter_8.caffemodel");
      std::string text((std::istreambuf_iterator<char>(eight)), std::istreambuf_iterator<char>());
      EXPECT_EQ(text, "another leader's");
    } else {
      EXPECT_FALSE(fs::exists(sub / "l_iter_8.caffemodel")) << "later weights under a passed multiple's name";
    }
    // Written at the first iteration it led through (it claimed 9, then the count was 10).
    ASSERT_TRUE(fs::exists(sub / "l_iter_10.caffemodel"));
    pb::SolverState state;
    ReadBinaryProto((sub / "l_iter_10.solverstate").string(), &state);
    EXPECT_EQ(state.iter(), 10) << "the state says the iteration its weights are of";
    for (int k : {12, 16, 20}) EXPECT_TRUE(fs::exists(sub / ("l_iter_" + std::to_string(k) + ".caffemodel"))) << k;
  }
}

// The final snapshot into a directory that went away: the job ends with one line, and the
// weights and state are kept in $TMPDIR under the prefix's name, from which it resumes.
TEST_F(SolverSnapshot, AFailedFinalSnapshotKeepsTheWeightsInTmpdir) {
  const fs::path sub = dir_ / "gone", rescue = dir_ / "tmp";
  fs::create_directories(sub);
  fs::create_directories(rescue);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  setenv("TMPDIR", rescue.c_str(), 1);
  SolverOptions o = Quiet();
  int iteration = 0;
  AfterEach after([&] {
    if (++iteration == 9) fs::remove_all(sub);
  });
  o.callbacks = {&after};
  auto s = CreateSolver(LinearSolver("max_iter: 10 snapshot_after_train: true snapshot_prefix: '" +
                                     (sub / "f").string() + "'"),
                        o);
  SetInputs(*s, 1);
  std::string what;
  try {
    s->Solve();
  } catch (const Error& e) {
    what = e.what();
  }
  if (old) setenv("TMPDIR", saved.c_str(), 1); else unsetenv("TMPDIR");
  const fs::path model = rescue / "f_rescued_iter_10.caffemodel", state = rescue / "f_rescued_iter_10.solverstate";
  EXPECT_NE(what.find("the final snapshot failed"), std::string::npos) << what;
  EXPECT_NE(what.find(model.string()), std::string::npos) << what;
  ASSERT_TRUE(fs::exists(model));
  ASSERT_TRUE(fs::exists(state));
  auto r = CreateSolver(LinearSolver("max_iter: 10"), Quiet());
  r->Restore(state.string());
  EXPECT_EQ(r->iter(), 10);
  const Net& a = s->net();
  const Net& b = r->net();
  ASSERT_EQ(a.param_buffer_size(), b.param_buffer_size());
  for (size_t i = 0; i < a.param_buffer_size(); ++i) ASSERT_EQ(a.param_data()[i], b.param_data()[i]) << i;
}

// A .solverstate with an impossible iteration is refused, not trained from.
TEST_F(SolverSnapshot, SolverstateWithAbsurdIterationIsRefused) {
  auto s = CreateSolver(LinearSolver("snapshot_prefix: '" + (dir_ / "a").string() + "'"), Quiet());
  SetInputs(*s, 1);
  s->Step(3);
  const std::string model = s->Snapshot();
  const std::string state_file = model.substr(0, model.size() - 11) + ".solverstate";
  for (int64_t iter : {int64_t{-5}, int64_t{1} << 30}) {
    pb::SolverState state;
    ReadBinaryProto(state_file, &state);
    state.set_iter(static_cast<int>(iter));
    const std::string bad = (dir_ / ("bad" + std::to_string(iter) + ".solverstate")).string();
    WriteBinaryProtoAtomic(bad, state);
    auto r = CreateSolver(LinearSolver(""), Quiet());
    try {
      r->Restore(bad);
      ADD_FAILURE() << "iteration " << iter << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("iteration"), std::string::npos) << e.what();
    }
  }
}

// In a group a solver's iterations are not consecutive; average_loss must still average its
// last `average_loss` losses (the window index used to come from the global iteration, so
// with a stride of 2 it kept overwriting one slot).
TEST(Solver, SmoothedLossWindowInAGroup) {
  SolverGroup group;
  std::vector<float> losses;
  Solver* solver = nullptr;
  SolverOptions o = Quiet();
  o.action = [&] {
    const Blob* loss = solver->net().output_blobs()[0];
    losses.push_back(loss->cpu_data()[0]);
    group.iter.fetch_add(1);  // another solver took the next iteration
    return SolverAction::NONE;
  };
  auto s = CreateSolver(LinearSolver("average_loss: 4 max_iter: 1000"), o);
  solver = s.get();
  SharedGroup job(&group, false);
  s->JoinGroup(&job, 0);
  SetInputs(*s, 3);
  s->Step(40);
  ASSERT_GE(losses.size(), 10u);
  const size_t n = losses.size();
  const double want = (double{losses[n - 1]} + losses[n - 2] + losses[n - 3] + losses[n - 4]) / 4;
  EXPECT_NEAR(s->smoothed_loss(), want, 1e-5 * std::max(1.0, std::fabs(want)));
}

// Large losses, then small ones: the smoothed loss is the mean of the last ones, not what
// rounding left of the large ones (a running "+= (new - old) / window" went negative).
TEST(Solver, SmoothedLossForgetsLargeLossesExactly) {
  std::vector<float> losses;
  Solver* solver = nullptr;
  std::mt19937 gen(TestSeed());
  std::normal_distribution<float> d;
  // Inputs and weights at `scale`: W x + b - y, and the loss, grow with it.
  auto set_scale = [&](float scale) {
    for (Blob* b : solver->net().input_blobs())
      for (int i = 0; i < b->count(); ++i) b->mutable_cpu_data()[i] = scale * d(gen);
    for (Blob* b : solver->net().learnable_params())
      for (int i = 0; i < b->count(); ++i) b->mutable_cpu_data()[i] = scale * d(gen);
  };
  SolverOptions o = Quiet();
  o.action = [&] {  // after each iteration; from the 10th on, the losses are tiny
    losses.push_back(solver->net().output_blobs()[0]->cpu_data()[0]);
    if (losses.size() == 10) set_scale(1e-3f);
    return SolverAction::NONE;
  };
  auto s = CreateSolver(LinearSolver("average_loss: 1 base_lr: 0 weight_decay: 0"), o);
  solver = s.get();
  set_scale(3000.f);  // losses ~1e13
  s->Step(20);
  ASSERT_EQ(losses.size(), 20u);
  ASSERT_GT(losses[0], 1e6f);
  ASSERT_LT(losses.back(), 1e-3f);
  EXPECT_GE(s->smoothed_loss(), 0.f);
  EXPECT_FLOAT_EQ(s->smoothed_loss(), losses.back()) << "average_loss 1: the last loss itself";
}

// lr_policy poly is finite even past max_iter (1 - iter/max_iter < 0 used to give NaN).
TEST(Solver, PolyLearningRatePastMaxIterIsFinite) {
  auto s = CreateSolver(LinearSolver("lr_policy: 'poly' power: 0.5 max_iter: 10"), Quiet());
  SetInputs(*s, 2);
  s->Step(15);
  EXPECT_TRUE(std::isfinite(s->GetLearningRate()));
  EXPECT_EQ(s->GetLearningRate(), 0.f);
  for (size_t i = 0; i < s->net().param_buffer_size(); ++i)
    ASSERT_TRUE(std::isfinite(s->net().param_data()[i])) << i;
}

}  // namespace
}  // namespace hogstream

// The job simulator (sync/simulate.hpp): machines that share through the real segments learn
// what none of them sees alone, one seed gives one result bit for bit, and a crossing is found.
#include <gtest/gtest.h>
#include <google/protobuf/text_format.h>

#include <cmath>
#include <random>
#include <utility>

#include "core/proto/hogstream.pb.h"
#include "sync/simulate.hpp"
#include "test/data/data_test_util.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

constexpr int kClasses = 4;

// Records of 4 classes, each a bright 4x4 block at its own place in an 8x8 image over noise;
// sorted by class, so that machine r of 4 (its partition the r-th quarter) sees class r alone.
void WriteClasses(const std::string& path, int per_class, std::mt19937& gen) {
  std::uniform_int_distribution<int> noise(0, 90);
  std::vector<pb::Datum> data;
  for (int k = 0; k < kClasses; ++k)
    for (int i = 0; i < per_class; ++i) {
      std::string px(64, '\0');
      for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 8; ++x) {
          const bool block = (y / 4) * 2 + (x / 4) == k;
          px[y * 8 + x] = static_cast<char>(noise(gen) + (block ? 120 : 0));
        }
      data.push_back(test::MakeDatum(1, 8, 8, px, k));
    }
  test::WriteLmdb(path, data);
}

pb::SolverParameter Solver(const std::string& train, const std::string& test, int max_iter) {
  const std::string data = R"(type: "Data" top: "x" top: "label"
      transform_param { scale: 0.00390625 } )";
  const std::string text = R"(
    net_param {
      layer { name: "train" )" + data + R"( include { phase: TRAIN }
              data_param { source: ")" + train + R"(" batch_size: 8 backend: LMDB } }
      layer { name: "test" )" + data + R"( include { phase: TEST }
              data_param { source: ")" + test + R"(" batch_size: 50 backend: LMDB } }
      layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h"
              inner_product_param { num_output: 16 weight_filler { type: "xavier" } } }
      layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
      layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "score"
              inner_product_param { num_output: 4 weight_filler { type: "xavier" } } }
      layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
      layer { name: "accuracy" type: "Accuracy" bottom: "score" bottom: "label" top: "accuracy"
              include { phase: TEST } }
    }
    base_lr: 0.02 momentum: 0.9 lr_policy: "fixed" solver_mode: CPU random_seed: 3
    test_iter: 4 test_interval: 1000 max_iter: )" + std::to_string(max_iter);
  pb::SolverParameter p;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p));
  return p;
}

class SimulateJob : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 gen(TestSeed());
    WriteClasses(dir_ / "train", 64, gen);
    WriteClasses(dir_ / "test", 50, gen);
  }
  test::TempDir dir_;
};

// Each of 4 machines trains on one class only: a copy scores about 1/4 alone (it answers its
// own class), and nearly every record only with the others' progress, which reaches it
// through the segments, the simulated network and the aggregation rule. So too where each step
// computes on the weights it read at its start (read_at 0): what the others sent during the
// step must stay in the weights under the step's update, or the copy keeps to its own class.
// And so under the averaging rule, where each machine's progress counts 1/4 at the owner.
TEST_F(SimulateJob, MachinesLearnTogetherWhatNoneSeesAlone) {
  for (const auto& [read_at, rule] : {std::pair{1.0, "auto"}, std::pair{0.0, "auto"}, std::pair{0.0, "average"}}) {
    SCOPED_TRACE("read_at " + std::to_string(read_at) + ", " + rule);
    SimulateOptions o;
    o.aggregate = rule;
    o.machines = kClasses;
    o.test_every = 100;
    o.sweep_ms = 20;
    o.step_ms = 10;
    o.read_at = read_at;
    const SimulateResult r = Simulate(Solver(dir_ / "train", dir_ / "test", 600), o);
    ASSERT_FALSE(r.curve.empty());
    EXPECT_EQ(r.iterations, 600);
    EXPECT_GE(r.curve.back().score, 0.9) << "machine 0's copy did not learn the classes it never saw";
    EXPECT_GT(r.deltas_applied, 0u);
    EXPECT_GT(r.bytes, 0u);
    uint64_t histogram = 0;
    for (uint64_t b : r.staleness) histogram += b;
    EXPECT_EQ(histogram, r.deltas_applied) << "every delta applied has a staleness";
  }
}

// One seed: the same curve and the same weights, bit for bit, with jitter, drift, a straggler,
// loss and mid-step reads in play; another seed: another run; the drift moves the machines'
// times, and where a step reads its weights moves the weights.
TEST_F(SimulateJob, OneSeedGivesOneResult) {
  SimulateOptions o;
  o.machines = 3;
  o.test_every = 50;
  o.jitter = 0.2;
  o.drift = 0.3;
  o.drift_steps = 10;
  o.read_at = 0.5;
  o.stragglers = 1;
  o.link.loss = 0.05;
  o.seed = TestSeed() % 1000 + 1;
  const pb::SolverParameter param = Solver(dir_ / "train", dir_ / "test", 200);
  const SimulateResult a = Simulate(param, o);
  const SimulateResult b = Simulate(param, o);
  EXPECT_EQ(a.weights_hash, b.weights_hash);
  ASSERT_EQ(a.curve.size(), b.curve.size());
  for (size_t k = 0; k < a.curve.size(); ++k) {
    EXPECT_EQ(a.curve[k].score, b.curve[k].score) << "score " << k;
    EXPECT_EQ(a.curve[k].virtual_s, b.curve[k].virtual_s) << "score " << k;
  }
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.lost, b.lost);
  EXPECT_GT(a.lost, 0u);
  SimulateOptions drifting = o, still = o;  // no jitter: only the drift can move the times
  drifting.jitter = still.jitter = still.drift = 0;
  EXPECT_NE(Simulate(param, drifting).curve.back().virtual_s, Simulate(param, still).curve.back().virtual_s)
      << "the drift moved nothing";
  SimulateOptions at_end = o;
  at_end.read_at = 1;
  EXPECT_NE(Simulate(param, at_end).weights_hash, a.weights_hash) << "reading the weights mid-step changed nothing";
  o.seed += 1;
  EXPECT_NE(Simulate(param, o).weights_hash, a.weights_hash) << "another seed, the same run";
}

// A target is crossed between two scores: the crossing lies between them, and the run stops
// at the last target.
TEST_F(SimulateJob, ACrossingIsInterpolatedAndTheRunStopsThere) {
  SimulateOptions o;
  o.machines = 2;
  o.test_every = 20;
  o.targets = {0.6};
  const SimulateResult r = Simulate(Solver(dir_ / "train", dir_ / "test", 2000), o);
  ASSERT_EQ(r.crossings.size(), 1u);
  const SimulateResult::Crossing& c = r.crossings[0];
  ASSERT_GE(c.iter, 0) << "0.6 never reached in 2000 iterations";
  ASSERT_GE(r.curve.size(), 2u);
  const auto& last = r.curve.back();
  const auto& before = r.curve[r.curve.size() - 2];
  EXPECT_GE(last.score, 0.6);
  EXPECT_LT(before.score, 0.6);
  EXPECT_GT(c.iter, static_cast<double>(before.iter));
  EXPECT_LE(c.iter, static_cast<double>(last.iter));
  EXPECT_EQ(r.iterations, last.iter) << "the run went on past its last target";
}

// A machine whose loss goes non-finite ends the job early: a result that says so (and where),
// not an exception, so that a table of job sizes goes on to the next.
TEST_F(SimulateJob, ADivergedJobIsAResult) {
  pb::SolverParameter param = Solver(dir_ / "train", dir_ / "test", 400);
  param.set_base_lr(1e30f);
  SimulateOptions o;
  o.machines = 3;
  o.test_every = 50;
  SimulateResult r;
  ASSERT_NO_THROW(r = Simulate(param, o));
  EXPECT_NE(r.ended_early.find("machine "), std::string::npos) << r.ended_early;
  EXPECT_NE(r.ended_early.find("nan"), std::string::npos) << r.ended_early;
  EXPECT_LT(r.iterations, 400);
  EXPECT_TRUE(Simulate(Solver(dir_ / "train", dir_ / "test", 100), o).ended_early.empty());
}

// A copy whose weights went non-finite in the step just before a score is not scored (Caffe's
// Accuracy counts a record right where no score is above its label's, and none is above a NaN):
// the job ends there, and no target is crossed. Here each bsp step is scored, right after its
// update: a step blows the weights up before any loss of it is seen.
TEST_F(SimulateJob, ACopyGoneNonFiniteIsNotScoredButEndsTheJob) {
  pb::SolverParameter param = Solver(dir_ / "train", dir_ / "test", 300);
  param.set_base_lr(1e30f);
  SimulateOptions o;
  o.machines = 3;
  o.bsp = true;
  o.bsp_lr = 3;
  o.test_every = 3;  // every step of 3 machines' batches
  o.targets = {0.9};
  SimulateResult r;
  ASSERT_NO_THROW(r = Simulate(param, o));
  EXPECT_NE(r.ended_early.find("not finite"), std::string::npos) << r.ended_early;
  EXPECT_LT(r.crossings[0].iter, 0) << "a diverged copy crossed " << o.targets[0];
  for (const SimulateResult::Point& p : r.curve) EXPECT_TRUE(std::isfinite(p.score)) << p.iter;
  EXPECT_LT(r.iterations, 300);
}

// The synchronous reference: N machines' batches averaged each step are one solver on N x the
// batch, its base_lr times the multiplier (lr_factor), each step counting N global iterations.
TEST_F(SimulateJob, TheBspReferenceIsOneSolverOnTheMachinesBatches) {
  auto solver = [&](int batch, float lr, int max_iter) {
    pb::SolverParameter p = Solver(dir_ / "train", dir_ / "test", max_iter);
    p.set_base_lr(lr);
    for (auto& l : *p.mutable_net_param()->mutable_layer())
      if (l.name() == "train") l.mutable_data_param()->set_batch_size(batch);
    return p;
  };
  SimulateOptions one;
  one.machines = 1;
  one.test_every = 40;
  SimulateOptions bsp = one;
  bsp.machines = 3;
  bsp.bsp = true;
  bsp.bsp_lr = 2;
  bsp.test_every = 120;
  const SimulateResult a = Simulate(solver(8, 0.01f, 120), bsp);
  const SimulateResult b = Simulate(solver(24, 0.02f, 40), one);
  EXPECT_EQ(a.iterations, 120);
  EXPECT_EQ(b.iterations, 40);
  EXPECT_EQ(a.weights_hash, b.weights_hash) << "bsp x2 at 3 machines is not one solver on batch 24 at lr x 2";
  EXPECT_NE(Simulate(solver(8, 0.01f, 120), [&] {
              SimulateOptions w = bsp;
              w.bsp_warmup = 60;  // from lr x 1 up: another run
              return w;
            }()).weights_hash,
            a.weights_hash);
  EXPECT_NE(a.rule.find("bsp"), std::string::npos) << a.rule;
}

TEST_F(SimulateJob, BadSettingsAreOneLine) {
  const pb::SolverParameter param = Solver(dir_ / "train", dir_ / "test", 100);
  SimulateOptions o;
  o.machines = 0;
  EXPECT_THROW(Simulate(param, o), Error);
  o = {};
  o.score = "no_such_output";
  EXPECT_THROW(Simulate(param, o), Error);
  o = {};
  o.aggregate = "no_such_rule";
  EXPECT_THROW(Simulate(param, o), Error);
  o = {};
  o.jitter = 1;
  EXPECT_THROW(Simulate(param, o), Error);
  o = {};
  o.drift = 1.5;
  EXPECT_THROW(Simulate(param, o), Error);
  o = {};
  o.drift_steps = 0.5;
  EXPECT_THROW(Simulate(param, o), Error);
  o = {};
  o.read_at = -0.1;
  EXPECT_THROW(Simulate(param, o), Error);
}

}  // namespace
}  // namespace hogstream

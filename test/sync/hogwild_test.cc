// Hogwild on one host: solver threads on one buffer, /dev/shm processes, and what happens
// when one of them is killed.
#include "sync/hogwild.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/io.hpp"
#include "sync/shm_region.hpp"

namespace hogstream {
namespace {

namespace fs = std::filesystem;

// A small classifier on DummyData: no dataset needed, every pass draws fresh inputs.
std::string NetText(int hidden) {
  return R"(
    layer { name: "d" type: "DummyData" top: "x" top: "label"
            dummy_data_param { shape { dim: 16 dim: 1 dim: 8 dim: 8 } shape { dim: 16 }
                               data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }
    layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
            convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
    layer { name: "relu" type: "ReLU" bottom: "c" top: "c" }
    layer { name: "ip" type: "InnerProduct" bottom: "c" top: "h"
            inner_product_param { num_output: )" + std::to_string(hidden) + R"( weight_filler { type: "xavier" } } }
    layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "score"
            inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" })";
}

pb::SolverParameter SolverFor(const std::string& net, int max_iter, const std::string& prefix) {
  pb::SolverParameter p;
  const std::string text = "net_param {" + net + "}\n base_lr: 0.01 momentum: 0.9 lr_policy: 'fixed'"
                           " solver_mode: CPU display: 0 snapshot_after_train: false max_iter: " +
                           std::to_string(max_iter) + " snapshot_prefix: '" + prefix + "'";
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p));
  return p;
}

class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hs_hogwild_" + std::to_string(getpid()) + "_" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

using HogwildThreads = ScratchDir;

// N solver threads hammer one weight buffer without locks: the job ends at max_iter global
// iterations with finite weights, and it learned (label is constant 1: easy).
TEST_F(HogwildThreads, FourSolversOnOneBufferFinishFiniteAndLearn) {
  HogwildOptions opt;
  opt.solvers.cpus = 4;
  auto param = SolverFor(NetText(16), 400, (dir_ / "h").string());
  param.set_snapshot_after_train(true);
  RunHogwild(param, opt);
  pb::NetParameter weights;
  ReadBinaryProto((dir_ / "h_iter_400.caffemodel").string(), &weights);
  int values = 0;
  for (const auto& l : weights.layer())
    for (const auto& b : l.blobs())
      for (float v : b.data()) {
        ASSERT_TRUE(std::isfinite(v));
        ++values;
      }
  EXPECT_GT(values, 1000);
  // The final net predicts the constant label with high confidence: loss well below ln(3).
  NetOptions no;
  no.phase = pb::TRAIN;
  Net net(param.net_param(), no);
  net.CopyTrainedLayersFrom(weights);
  EXPECT_LT(net.Forward(), 0.1f);
}

TEST_F(HogwildThreads, PrivateCopiesSyncThroughSegments) {
  HogwildOptions opt;
  opt.solvers.cpus = 2;
  opt.private_copies = true;
  opt.chunk_floats = 100;
  auto param = SolverFor(NetText(16), 300, (dir_ / "p").string());
  param.set_snapshot_after_train(true);
  RunHogwild(param, opt);
  pb::NetParameter weights;
  ReadBinaryProto((dir_ / "p_iter_300.caffemodel").string(), &weights);
  NetOptions no;
  no.phase = pb::TRAIN;
  Net net(param.net_param(), no);
  net.CopyTrainedLayersFrom(weights);
  EXPECT_LT(net.Forward(), 0.2f);
}

TEST(SolverSpec, ParsesGpuAndCpuCounts) {
  auto s = ParseSolverSpec("4");
  EXPECT_EQ(s.cpus, 4);
  EXPECT_TRUE(s.gpus.empty());
  s = ParseSolverSpec("0:1:2");
  EXPECT_EQ(s.gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.cpus, 2);
  EXPECT_THROW(ParseSolverSpec("two"), Error);
  EXPECT_THROW(ParseSolverSpec("0"), Error);
  EXPECT_THROW(ParseSolverSpec("1::2"), Error);
}

// ---------------------------------------------------------------- /dev/shm

bool ShmUsable() { return fs::is_directory("/dev/shm") && access("/dev/shm", W_OK) == 0; }

std::string UniqueName(const char* what) {
  return std::string("test_") + what + "_" + std::to_string(getpid()) + "_" +
         std::to_string(std::random_device{}() % 100000);
}

TEST(ShmRegion, HeaderMismatchIsRefused) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("mismatch");
  bool created = false;
  auto a = ShmRegion::CreateOrAttach(name, 1000, 42, &created);
  ASSERT_TRUE(created);
  a->MarkReady();
  try {
    ShmRegion::CreateOrAttach(name, 1000, 43, &created);
    FAIL() << "a different shape hash must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another net"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ShmRegion::CreateOrAttach(name, 2000, 42, &created), Error);
  auto b = ShmRegion::CreateOrAttach(name, 1000, 42, &created);
  EXPECT_FALSE(created);
  // Both map the same memory; the file is private to its owner.
  a->weights()[7] = 3.5f;
  EXPECT_EQ(b->weights()[7], 3.5f);
  EXPECT_EQ(fs::status(a->path()).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  const std::string path = a->path();
  a.reset();
  EXPECT_TRUE(fs::exists(path));  // b still attached
  b.reset();
  EXPECT_FALSE(fs::exists(path));  // the last one out removes it
}

TEST(ShmRegion, StaleSegmentFromCrashedJobIsRefused) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("stale");
  const pid_t child = fork();
  if (child == 0) {
    bool created = false;
    auto r = ShmRegion::CreateOrAttach(name, 100, 7, &created);
    r->MarkReady();
    _exit(0);  // "crash": no detach
  }
  int status = 0;
  waitpid(child, &status, 0);
  const std::string path = "/dev/shm/hogstream." + name;
  ASSERT_TRUE(fs::exists(path));
  bool created = false;
  try {
    ShmRegion::CreateOrAttach(name, 100, 7, &created);
    FAIL() << "a segment whose processes are gone must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("crashed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  fs::remove(path);
}

// Two hogwild.bin processes on one --shm job; one is killed with SIGKILL mid-run: the other
// finishes the job (taking over as leader when the killed one led).
class ShmKill : public ScratchDir, public ::testing::WithParamInterface<bool> {};

TEST_P(ShmKill, SurvivorFinishesTheJob) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const bool kill_leader = GetParam();
  const std::string solver = (dir_ / "solver.prototxt").string();
  {
    // ~5 s of work for one process on this machine: long enough to be killed mid-run.
    auto p = SolverFor(NetText(64), 100000, (dir_ / "k").string());
    p.set_display(1000);
    p.set_snapshot_after_train(true);
    std::ofstream(solver) << p.DebugString();
  }
  const std::string name = UniqueName("kill");
  auto launch = [&](const std::string& log) {
    const pid_t pid = fork();
    if (pid == 0) {
      freopen(log.c_str(), "w", stderr);
      freopen("/dev/null", "w", stdout);
      execl(HS_HOGWILD_BIN, HS_HOGWILD_BIN, solver.c_str(), "1", ("--shm=" + name).c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  };
  const std::string log0 = (dir_ / "p0.log").string(), log1 = (dir_ / "p1.log").string();
  const pid_t first = launch(log0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the first one creates
  const pid_t second = launch(log1);
  // Kill once both processes are in the job and it is visibly under way: the second has
  // attached and the leader has logged progress after that.
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  for (int i = 0; i < 600 && read(log1).find("Solving") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(read(log1).find("Solving"), std::string::npos) << read(log1);
  const size_t seen = read(log0).size();
  for (int i = 0; i < 600 && read(log0).find("Progress", seen) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t victim = kill_leader ? first : second, survivor = kill_leader ? second : first;
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  int status = 0;
  waitpid(victim, &status, 0);
  // The survivor must finish on its own, within a bounded time.
  int rc = -1;
  for (int i = 0; i < 1200 && rc < 0; ++i) {
    if (waitpid(survivor, &status, WNOHANG) == survivor) rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    else std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (rc < 0) {
    kill(survivor, SIGKILL);
    waitpid(survivor, &status, 0);
  }
  const std::string log = read(kill_leader ? log1 : log0);
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("Optimization Done"), std::string::npos) << log;
  if (kill_leader) {
    EXPECT_NE(log.find("takes over"), std::string::npos) << log;
  }
  EXPECT_TRUE(fs::exists(dir_ / "k_iter_100000.caffemodel")) << log;
  EXPECT_FALSE(fs::exists("/dev/shm/hogstream." + name));  // the survivor removed it
}

INSTANTIATE_TEST_SUITE_P(Victim, ShmKill, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "KillLeader" : "KillFollower"; });

}  // namespace
}  // namespace hogstream

// Hogwild on one host: solver threads on one buffer, /dev/shm processes, and what happens
// when one of them is killed.
#include "sync/hogwild.hpp"

#include <google/protobuf/text_format.h>
#include "test/test_seed.hpp"
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <regex>
#include <sys/stat.h>
#include <thread>

#include "core/context.hpp"
#include "core/io.hpp"
#include "core/layer.hpp"
#include "sync/shm_region.hpp"
#include "sync/solver_group.hpp"  // (a corrupt header written by hand)
#include "test/data/data_test_util.hpp"
#include "test/program_runner.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

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

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Polls `done` every 10 ms until it holds or `seconds` pass; returns whether it held.
template <class F>
bool WaitFor(F&& done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A child process running hogwild.bin ARGS with stderr to `log`.
pid_t LaunchHogwild(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(log.c_str(), "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(126);
    std::vector<char*> argv{const_cast<char*>(HS_HOGWILD_BIN)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(HS_HOGWILD_BIN, argv.data());
    _exit(127);
  }
  return pid;
}

// How a child ended: its exit code, 128 + signal, or -1 when it outlived the deadline (then
// it is killed, so no test leaves a process behind).
int WaitExit(pid_t pid, double seconds) {
  int status = 0;
  const bool ended = WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, seconds);
  if (!ended) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs `f` in a forked child (for what may hang or crash); the child's exit code is what `f`
// returns, or 2 for an uncaught Error (message on stderr), 128 + signal for a crash, -1 for a
// hang past `seconds`.
template <class F>
int InChild(F&& f, double seconds) {
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    try {
      rc = f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      rc = 2;
    }
    _exit(rc);
  }
  return WaitExit(pid, seconds);
}

// A net's trained values (a .caffemodel's): how many, and how many of them are not finite.
struct WeightCount {
  size_t values = 0, non_finite = 0;
};
WeightCount CountWeights(const pb::NetParameter& weights) {
  WeightCount c;
  for (const auto& layer : weights.layer())
    for (const auto& blob : layer.blobs())
      for (float v : blob.data()) {
        ++c.values;
        c.non_finite += !std::isfinite(v);
      }
  return c;
}

std::vector<std::string> SnapshotsIn(const fs::path& dir, const std::string& ext) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hs_hogwild_" + std::to_string(getpid()) + "_" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A net on data one solver alone cannot learn (test::WriteSplitLmdbs: `classes` classes,
  // the training records sorted by class, so each of `classes` solvers reads one class): the
  // job classifies every class only where every solver's progress reached the weights.
  std::string SplitNetText(int classes) {
    const std::string train = (dir_ / "split_train").string(), test = (dir_ / "split_test").string();
    if (!fs::exists(train)) test::WriteSplitLmdbs(train, test, classes, TestSeed());
    return R"(
    layer { name: "d" type: "Data" top: "x" top: "label" include { phase: TRAIN }
            transform_param { scale: 0.00390625 } data_param { source: ")" + train + R"(" batch_size: 16 backend: LMDB } }
    layer { name: "t" type: "Data" top: "x" top: "label" include { phase: TEST }
            transform_param { scale: 0.00390625 }
            data_param { source: ")" + test + R"(" batch_size: )" + std::to_string(50 * classes) + R"( backend: LMDB } }
    layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h"
            inner_product_param { num_output: 32 weight_filler { type: "xavier" } } }
    layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
    layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "score"
            inner_product_param { num_output: )" + std::to_string(classes) + R"( weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
    layer { name: "acc" type: "Accuracy" bottom: "score" bottom: "label" top: "accuracy" include { phase: TEST } })";
  }
  // The accuracy of the weights in `caffemodel` on SplitNetText's whole test set, per class.
  static std::vector<double> SplitAccuracy(const pb::SolverParameter& param, const fs::path& caffemodel) {
    pb::NetParameter weights;
    ReadBinaryProto(caffemodel.string(), &weights);
    NetOptions no;
    no.phase = pb::TEST;
    Net net(param.net_param(), no);
    net.CopyTrainedLayersFrom(weights);
    net.Forward();
    const Blob& score = *net.blob_by_name("score");
    const Blob& label = *net.blob_by_name("label");
    const int n = score.shape(0), classes = score.count() / n;
    std::vector<double> right(classes), seen(classes);
    for (int i = 0; i < n; ++i) {
      const float* s = score.cpu_data() + i * classes;
      const int want = static_cast<int>(label.cpu_data()[i]);
      seen[want] += 1;
      right[want] += std::max_element(s, s + classes) - s == want;
    }
    for (int k = 0; k < classes; ++k) right[k] /= seen[k];
    return right;
  }
  fs::path dir_;
};

using HogwildThreads = ScratchDir;

// The action callback runs once per iteration on each solver's thread, with its Context
// installed: tests count iterations per thread and read each solver's random stream there.
struct PerThread {
  std::mutex mu;
  std::map<std::thread::id, int64_t> iterations;
  std::map<std::thread::id, uint64_t> seeds;
  std::map<std::thread::id, double> shards;
  std::atomic<int64_t> total{0};
  std::atomic<bool> joined{false};
  // `hold_at` >= 0: once the job has run that many iterations, wait (30 s at most) until a
  // solver of another runner (one whose action was made with `joiner`) has run one, so a
  // second process always joins a job that is still running, however loaded the machine.
  std::function<SolverAction()> Action(int64_t hold_at = -1, bool joiner = false) {
    return [this, hold_at, joiner] {
      {
        std::lock_guard<std::mutex> lock(mu);
        const auto id = std::this_thread::get_id();
        ++iterations[id];
        seeds[id] = Context::Get().seed();
        shards[id] = Context::Get().data_shard();
      }
      if (joiner) joined.store(true);
      if (total.fetch_add(1) + 1 >= hold_at && hold_at >= 0 && !joined.load())
        WaitFor([this] { return joined.load(); }, 30);
      return SolverAction::NONE;
    };
  }
};

// N solver threads hammer one weight buffer without locks: the job ends at exactly max_iter
// global iterations with finite weights, every solver did a share of them, and it learned
// (label is constant 1: easy).
TEST_F(HogwildThreads, FourSolversOnOneBufferFinishFiniteAndLearn) {
  HogwildOptions opt;
  opt.solvers.cpus = 4;
  opt.log = false;
  PerThread seen;
  opt.action = seen.Action();
  // Long enough (~0.3 s) that the scheduler gives every thread a share even on a loaded machine.
  auto param = SolverFor(NetText(16), 4000, (dir_ / "h").string());
  param.set_snapshot_after_train(true);
  const HogwildReport report = RunHogwild(param, opt);
  EXPECT_EQ(report.global_iter, 4000);
  EXPECT_EQ(seen.total.load(), 4000);
  ASSERT_EQ(seen.iterations.size(), 4u) << "every solver ran iterations";
  for (const auto& [id, n] : seen.iterations) EXPECT_GE(n, 4000 / 100) << "a solver starved";
  int64_t done = 0;
  for (int64_t d : report.done) done += d;
  EXPECT_EQ(done, 4000);
  pb::NetParameter weights;
  ReadBinaryProto((dir_ / "h_iter_4000.caffemodel").string(), &weights);
  const WeightCount counted = CountWeights(weights);
  ASSERT_EQ(counted.non_finite, 0u);
  EXPECT_GT(counted.values, 1000u);
  // The final net predicts the constant label with high confidence: loss well below ln(3).
  NetOptions no;
  no.phase = pb::TRAIN;
  Net net(param.net_param(), no);
  net.CopyTrainedLayersFrom(weights);
  EXPECT_LT(net.Forward(), 0.1f);
}

// Private copies: the master learns only through the segments, and the leader's snapshot is
// the master (not its own copy); each solver reads one class of two, so a segment that moved
// nothing (or one solver's that did not) fails here.
TEST_F(HogwildThreads, PrivateCopiesSyncThroughSegments) {
  HogwildOptions opt;
  opt.solvers.cpus = 2;
  opt.private_copies = true;
  opt.chunk_floats = 100;
  opt.log = false;
  auto param = SolverFor(SplitNetText(2), 300, (dir_ / "p").string());
  param.set_snapshot_after_train(true);
  const HogwildReport report = RunHogwild(param, opt);
  ASSERT_EQ(report.segments.size(), 2u);
  for (const SegmentStats& st : report.segments) {
    EXPECT_GT(st.sweeps, 0u);
    EXPECT_GT(st.bytes_moved, 0u);
  }
  const std::vector<double> acc = SplitAccuracy(param, dir_ / "p_iter_300.caffemodel");
  ASSERT_EQ(acc.size(), 2u);
  int asked = 0;
  for (size_t k = 0; k < 2; ++k) {
    if (report.done[k] < 300 / 8) continue;  // starved of CPU on a loaded host (as HogwildPolicies)
    ++asked;
    EXPECT_GE(acc[k], 0.9) << "solver " << k << "'s class (read by it alone; " << report.done[k] << " iterations)";
  }
  EXPECT_GE(asked, 1);
}

// The lead bound: with a daemon that sweeps only 20 times a second and solvers far faster, a
// copy runs at most copy_lead iterations per completed sweep of its segment (the bound waits
// for the daemon); with the bound off (0) the same run leaves the segment far behind.
TEST_F(HogwildThreads, PrivateCopiesRunAtMostCopyLeadIterationsPerSweep) {
  for (const int lead : {2, 0}) {
    HogwildOptions opt;
    opt.solvers.cpus = 2;
    opt.private_copies = true;
    opt.chunk_floats = 100;
    opt.log = false;
    opt.sweep_pause_us = 50000;
    opt.copy_lead = lead;
    auto param = SolverFor(NetText(16), 160, (dir_ / "lead").string());
    const HogwildReport report = RunHogwild(param, opt);
    ASSERT_EQ(report.segments.size(), 2u);
    EXPECT_EQ(report.global_iter, 160);
    bool beyond = false;  // some solver ran more than the bound allows
    for (size_t k = 0; k < 2; ++k) {
      // Its last sweep is the final synchronous one, after its last iteration.
      const int64_t allowed = static_cast<int64_t>(report.segments[k].sweeps) * 2 + 2;
      beyond = beyond || report.done[k] > allowed;
      if (lead) {
        EXPECT_LE(report.done[k], allowed) << "solver " << k << ": " << report.segments[k].sweeps << " sweeps";
      }
    }
    // Unbounded, the two share 160 iterations in a fraction of a second (one of them may get
    // few of them on a loaded machine, so the pair is asked, not each).
    if (!lead) {
      EXPECT_TRUE(beyond) << "the unbounded run kept pace with a daemon sweeping 20 times a second";
    }
  }
}

// Every policy and switch end to end through the runner (four solvers with private copies,
// each reading one class of four): the job runs to max_iter, the master learns every class, and the policy did what it says: bsp one round
// per four solver iterations, gsp one per group and two (groups run apart, so one may end on a
// round of one), easgd an exchange every second iteration of each solver.
class HogwildPolicies : public HogwildThreads, public ::testing::WithParamInterface<const char*> {};

TEST_P(HogwildPolicies, TrainToMaxIterAndLearn) {
  const std::string spec = GetParam();
  const size_t space = spec.find(' ');
  HogwildOptions opt;
  opt.solvers.cpus = 4;
  opt.chunk_floats = 100;
  opt.log = false;
  opt.policy = Policy::Parse(spec.substr(0, space), spec.find("--staleness-weight") != std::string::npos,
                             spec.find("--compress=int8") != std::string::npos ? "int8" : "");
  constexpr int kIters = 800;
  auto param = SolverFor(SplitNetText(4), kIters, (dir_ / "pol").string());
  param.set_snapshot_after_train(true);
  const HogwildReport report = RunHogwild(param, opt);
  EXPECT_EQ(report.global_iter, kIters);
  const PolicyFigures f = report.policy;
  switch (opt.policy.kind) {
    case Policy::Kind::kBsp: EXPECT_EQ(f.rounds, kIters / 4u); break;
    case Policy::Kind::kGsp:  // a group may end on a round of one (the other got no iteration)
      EXPECT_GE(f.rounds, kIters / 2u);
      EXPECT_LE(f.rounds, kIters / 2u + 2);
      break;
    case Policy::Kind::kEasgd:
      EXPECT_GE(f.rounds, kIters / 2u - 4);
      EXPECT_LE(f.rounds, kIters / 2u);
      break;
    default: EXPECT_EQ(f.rounds, 0u);
  }
  // Solver k read class k alone. Where a policy does not bound the solvers' spread (async and
  // its switches), a solver starved of CPU on a small host may run a few dozen iterations:
  // every class whose solver ran an eighth of the job is asked of the master.
  // easgd's centre is the mean of the copies, each of which only ever saw its own class and
  // pushes the others' scores down, with nothing bounding their spread: a copy that ran its
  // iterations early is forgotten by the end (in 300 runs here, classes of solvers of 174-450
  // iterations scored 0.00-0.62; beside a build, one solver ran 653 of 800 and the centre
  // knew its class alone). So under easgd the centre must have learned as many classes as
  // solvers ran an eighth of the job, up to two (it is the mean of several copies, not one);
  // a centre the exchange never reached knows one class at most (its initial guess).
  // weedout streams private copies to the master with nothing bounding their spread either:
  // under a loaded host (the sanitizer build beside three busy loops, 4 runs in 20 here) a
  // solver of ~200 iterations, a fifth of its deltas weeded, the rest applied, was forgotten
  // by the end as under easgd: its class scored 0.00-0.86 while the other three scored >= 0.9.
  const std::vector<double> acc = SplitAccuracy(param, dir_ / ("pol_iter_" + std::to_string(kIters) + ".caffemodel"));
  ASSERT_EQ(acc.size(), 4u);
  if (opt.policy.kind == Policy::Kind::kEasgd || opt.policy.kind == Policy::Kind::kWeedout) {
    const int learned = static_cast<int>(std::count_if(acc.begin(), acc.end(), [](double a) { return a >= 0.9; }));
    const int ran = static_cast<int>(
        std::count_if(report.done.begin(), report.done.end(), [](int64_t d) { return d >= kIters / 8; }));
    uint64_t weeded = 0;
    for (const SegmentStats& s : report.segments) weeded += s.weeded;
    EXPECT_GE(learned, std::min(2, ran))
        << opt.policy.name() << ": the master learned " << learned << " classes: " << acc[0] << " " << acc[1]
        << " " << acc[2] << " " << acc[3] << " (solvers' iterations " << report.done[0] << " " << report.done[1]
        << " " << report.done[2] << " " << report.done[3] << "; deltas weeded " << weeded << ")";
    return;
  }
  int asked = 0;
  for (size_t k = 0; k < 4; ++k) {
    if (report.done[k] < kIters / 8) continue;
    ++asked;
    EXPECT_GE(acc[k], 0.9) << "the master (what the leader snapshots) learned solver " << k << "'s class ("
                           << report.done[k] << " iterations)";
  }
  EXPECT_GE(asked, 1);
}

INSTANTIATE_TEST_SUITE_P(Each, HogwildPolicies,
                         ::testing::Values("bsp", "ssp:1", "max-advance:2", "weedout:4", "easgd:0.5:2",
                                         "gsp:0,1;2,3", "async --staleness-weight", "async --compress=int8"));

bool ShmUsable() { return fs::is_directory("/dev/shm") && access("/dev/shm", W_OK) == 0; }

std::string UniqueName(const char* what) {
  return std::string("test_") + what + "_" + std::to_string(getpid()) + "_" +
         std::to_string(std::random_device{}() % 100000);
}

// Removes /dev/shm/hogstream.NAME when the test ends, whatever happened.
struct ShmGuard {
  std::string path;
  explicit ShmGuard(const std::string& name) : path("/dev/shm/hogstream." + name) {}
  ~ShmGuard() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

JobIdentity IdentityOf(const pb::SolverParameter& param) {
  NetOptions no;
  no.phase = pb::TRAIN;
  Net net(param.net_param(), no);
  JobIdentity id;
  id.floats = net.param_buffer_size();
  id.shape_hash = ParamShapeHash(net);
  return id;
}

// Two runners of one --shm job, as two processes would be (one solver each): the first starts
// and holds at iteration `hold_at` until the second has joined (see PerThread), then both run
// to the end. The second's report goes to *second. Returns false, with a test failure, when
// the first never got that far (60 s); an error of either runner fails the test.
bool RunTwoOnShm(const pb::SolverParameter& param, const std::string& name, PerThread& seen,
                 int64_t hold_at, HogwildReport* second = nullptr) {
  HogwildOptions opt;
  opt.solvers.cpus = 1;
  opt.shm = name;
  opt.log = false;
  opt.action = seen.Action(hold_at);
  std::string first_error;
  std::thread first([&] {
    try {
      RunHogwild(param, opt);
    } catch (const std::exception& e) {
      first_error = e.what();
    }
  });
  const bool started = WaitFor([&] { return seen.total.load() >= hold_at; }, 60);
  if (started) {
    HogwildOptions late = opt;
    late.action = seen.Action(-1, true);
    HogwildReport report;
    EXPECT_NO_THROW(report = RunHogwild(param, late));
    if (second) *second = report;
  }
  first.join();
  EXPECT_TRUE(started) << "the first runner never reached iteration " << hold_at;
  EXPECT_EQ(first_error, "");
  return started;
}

// --private over a --shm master: an observer attached to the job reads the master after the
// run; the final snapshot must equal it, so it holds every solver's last deltas (the leader
// used to snapshot its private copy, and the final sweeps came after the final snapshot).
TEST_F(HogwildThreads, PrivateCopiesSnapshotTheMasterAfterTheFinalSweeps) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("private");
  ShmGuard guard(name);
  auto param = SolverFor(NetText(16), 300, (dir_ / "m").string());
  param.set_snapshot_after_train(true);
  std::unique_ptr<ShmRegion> observer;
  std::once_flag attach;
  HogwildOptions opt;
  opt.solvers.cpus = 2;
  opt.private_copies = true;
  opt.chunk_floats = 100;
  opt.shm = name;
  opt.log = false;
  opt.action = [&] {
    std::call_once(attach, [&] {
      bool created = true;
      observer = ShmRegion::CreateOrAttach(name, IdentityOf(param), &created);
    });
    return SolverAction::NONE;
  };
  RunHogwild(param, opt);
  ASSERT_TRUE(observer);
  pb::NetParameter weights;
  ReadBinaryProto((dir_ / "m_iter_300.caffemodel").string(), &weights);
  NetOptions no;
  no.phase = pb::TRAIN;
  Net net(param.net_param(), no);
  net.CopyTrainedLayersFrom(weights);
  size_t differ = 0;
  for (size_t i = 0; i < net.param_buffer_size(); ++i) differ += net.param_data()[i] != observer->weights()[i];
  EXPECT_EQ(differ, 0u) << "of " << net.param_buffer_size() << " weights, the snapshot is not the master";
}

// Resuming with several solvers: every solver runs against the global count, which ends at
// max_iter exactly (solvers other than the one that restored used to run max_iter each).
TEST_F(HogwildThreads, ResumeWithSeveralSolversRunsToGlobalMaxIter) {
  auto param = SolverFor(NetText(16), 100, (dir_ / "r").string());
  param.set_snapshot_after_train(true);
  HogwildOptions first;
  first.solvers.cpus = 2;
  first.log = false;
  RunHogwild(param, first);
  ASSERT_TRUE(fs::exists(dir_ / "r_iter_100.solverstate"));
  param.set_max_iter(200);
  HogwildOptions resume = first;
  resume.resume = (dir_ / "r_iter_100.solverstate").string();
  PerThread seen;
  resume.action = seen.Action();
  RunHogwild(param, resume);
  EXPECT_EQ(seen.total.load(), 100) << "iterations run after resuming at 100 of 200";
  EXPECT_TRUE(fs::exists(dir_ / "r_iter_200.caffemodel"));
}

// A process that joins a running --shm job at global iteration ~300 of 1000 runs only what is
// left: the global count ends at 1000 (it used to run 1000 of its own, ending near 1600, past
// max_iter where poly's lr is NaN and the NaN step landed in the shared weights).
TEST_F(HogwildThreads, LateJoinerStopsAtGlobalMaxIter) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("late");
  ShmGuard guard(name);
  auto param = SolverFor(NetText(16), 1000, (dir_ / "l").string());
  param.set_lr_policy("poly");
  param.set_power(2);
  param.set_snapshot_after_train(true);
  PerThread seen;
  HogwildReport joined;
  ASSERT_TRUE(RunTwoOnShm(param, name, seen, 300, &joined));
  EXPECT_FALSE(joined.created);
  EXPECT_EQ(seen.total.load(), 1000);
  EXPECT_LE(joined.global_iter, 1000);
  pb::NetParameter weights;
  ReadBinaryProto((dir_ / "l_iter_1000.caffemodel").string(), &weights);
  ASSERT_EQ(CountWeights(weights).non_finite, 0u);
}

// A process whose solver settings differ from the job's (base_lr here) is refused with the
// field named; it used to join and make the job diverge.
TEST_F(HogwildThreads, JoinerWithOtherSolverSettingsIsRefused) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("settings");
  ShmGuard guard(name);
  auto param = SolverFor(NetText(16), 100000, (dir_ / "s").string());
  PerThread seen;
  HogwildOptions opt;
  opt.solvers.cpus = 1;
  opt.shm = name;
  opt.log = false;
  std::atomic<bool> stop{false};
  opt.action = [&] {
    seen.total.fetch_add(1);
    return stop.load() ? SolverAction::STOP : SolverAction::NONE;
  };
  std::thread first([&] {
    try {
      RunHogwild(param, opt);
    } catch (...) {
    }
  });
  const bool started = WaitFor([&] { return seen.total.load() >= 10; }, 60);
  std::string error;
  if (started) {
    auto other = param;
    other.set_base_lr(0.02);
    HogwildOptions quiet = opt;
    quiet.action = nullptr;
    try {
      RunHogwild(other, quiet);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  stop = true;
  first.join();
  ASSERT_TRUE(started);
  EXPECT_NE(error.find("base_lr"), std::string::npos) << "joiner not refused: '" << error << "'";
}

// Each solver draws its own random stream (dropout masks, crops, source mixing): distinct per
// rank, rank 0's is random_seed itself, and a fixed random_seed replays the same streams. (The
// Solver constructor used to reset every solver to random_seed.)
TEST_F(HogwildThreads, SolversDrawDistinctReplayableStreams) {
  auto param = SolverFor(NetText(16), 8000, (dir_ / "g").string());
  param.set_random_seed(1234);
  param.set_snapshot_after_train(false);
  std::vector<std::set<uint64_t>> runs;
  for (int run = 0; run < 2; ++run) {
    PerThread seen;
    HogwildOptions opt;
    opt.solvers.cpus = 3;
    opt.log = false;
    opt.action = seen.Action();
    RunHogwild(param, opt);
    std::set<uint64_t> seeds;
    for (const auto& [id, seed] : seen.seeds) seeds.insert(seed);
    EXPECT_EQ(seeds.size(), 3u) << "three solvers, three streams";
    EXPECT_EQ(seeds.count(1234), 1u) << "rank 0 draws random_seed's stream";
    runs.push_back(seeds);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// Two processes of one --shm job (here: two runners in one process, which the old pid-based
// shard could not tell apart at all) read different parts of the data.
TEST_F(HogwildThreads, ShmProcessesReadDistinctShards) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("shards");
  ShmGuard guard(name);
  auto param = SolverFor(NetText(16), 400, (dir_ / "d").string());
  PerThread seen;
  ASSERT_TRUE(RunTwoOnShm(param, name, seen, 20));
  std::set<double> shards;
  for (const auto& [id, shard] : seen.shards) shards.insert(shard);
  EXPECT_EQ(shards.size(), 2u);
  for (double s : shards) EXPECT_TRUE(s >= 0 && s < 1) << s;
}

// Snapshots of a multi-process job: one at each multiple of `snapshot`, named as Caffe names
// them, the last one (max_iter) included (it used to be lost, and others got odd names).
TEST_F(HogwildThreads, MultiProcessSnapshotsAtCaffesMultiples) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const std::string name = UniqueName("snaps");
    ShmGuard guard(name);
    const fs::path dir = dir_ / std::to_string(round);
    fs::create_directories(dir);
    auto param = SolverFor(NetText(16), 1000, (dir / "s").string());
    param.set_snapshot(250);
    param.set_snapshot_after_train(true);
    PerThread seen;
    ASSERT_TRUE(RunTwoOnShm(param, name, seen, 5));
    const std::vector<std::string> want = {"s_iter_1000.caffemodel", "s_iter_250.caffemodel",
                                           "s_iter_500.caffemodel", "s_iter_750.caffemodel"};
    EXPECT_EQ(SnapshotsIn(dir, ".caffemodel"), want);
    EXPECT_EQ(SnapshotsIn(dir, ".solverstate").size(), 4u);
  }
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

TEST(ShmRegion, HeaderMismatchIsRefused) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("mismatch");
  ShmGuard guard(name);
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

// A refused attach (another net: real nets' hashes, whose high bits are not zero) leaves the
// live job exactly as it was: a correct process attaches afterwards. (The refused one's
// destructor used to write pids[-1], zeroing half of the job's shape hash.)
TEST(ShmRegion, RefusedAttachLeavesTheJobIntact) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("refused");
  ShmGuard guard(name);
  const JobIdentity mine = IdentityOf(SolverFor(NetText(16), 10, "x"));
  JobIdentity other = mine;
  other.shape_hash = IdentityOf(SolverFor(NetText(17), 10, "x")).shape_hash;
  ASSERT_NE(mine.shape_hash >> 32, 0u);
  bool created = false;
  auto job = ShmRegion::CreateOrAttach(name, mine, &created);
  ASSERT_TRUE(created);
  job->MarkReady();
  for (int i = 0; i < 3; ++i) EXPECT_THROW(ShmRegion::CreateOrAttach(name, other, &created), Error);
  std::unique_ptr<ShmRegion> joiner;
  EXPECT_NO_THROW(joiner = ShmRegion::CreateOrAttach(name, mine, &created));
  EXPECT_FALSE(created);
  ASSERT_TRUE(joiner);
  EXPECT_EQ(joiner->Members(), 2);
}

// A job of 100 weights (hash 7) whose only process "crashed": created, ready, and gone without
// detaching. Returns the dead process's pid, or -1 if it did not end cleanly within 20 s.
pid_t LeaveCrashedJob(const std::string& name) {
  const pid_t child = fork();
  if (child == 0) {
    bool created = false;
    auto r = ShmRegion::CreateOrAttach(name, 100, 7, &created);
    r->MarkReady();
    _exit(0);  // "crash": no detach
  }
  return WaitExit(child, 20) == 0 ? child : -1;
}

TEST(ShmRegion, StaleSegmentFromCrashedJobIsRefusedAndKept) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("stale");
  ShmGuard guard(name);
  const pid_t child = LeaveCrashedJob(name);
  ASSERT_GT(child, 0);
  const std::string path = "/dev/shm/hogstream." + name;
  ASSERT_TRUE(fs::exists(path));
  bool created = false;
  for (int i = 0; i < 2; ++i) {
    try {
      ShmRegion::CreateOrAttach(name, 100, 7, &created);
      FAIL() << "a segment whose processes are gone must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("crashed"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    // The README's promise: reported, never reused, and left for the user to look at.
    EXPECT_TRUE(fs::exists(path)) << "a refused attach removed the crashed job's segment";
  }
}

// Liveness is the kernel's lock, not a pid: a crashed job whose pid table names a live
// process (PID reuse; here: our own pid) is still seen as crashed.
TEST(ShmRegion, PidReuseDoesNotMakeACrashedJobLookAlive) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("reuse");
  ShmGuard guard(name);
  const pid_t child = LeaveCrashedJob(name);
  ASSERT_GT(child, 0);
  // The pid table sits after the fixed fields; overwrite every int32 equal to the dead
  // child's pid with ours, as if the pid had been reused.
  const std::string path = "/dev/shm/hogstream." + name;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    std::vector<char> bytes(4096);
    f.read(bytes.data(), bytes.size());
    for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
      int32_t v;
      std::memcpy(&v, &bytes[i], 4);
      if (v == child) {
        const int32_t me = getpid();
        std::memcpy(&bytes[i], &me, 4);
      }
    }
    f.seekp(0);
    f.write(bytes.data(), bytes.size());
  }
  bool created = false;
  EXPECT_THROW(ShmRegion::CreateOrAttach(name, 100, 7, &created), Error);
}

// A segment of the right size but all zeros (never set up) fails at once with a clear line;
// it used to wait 60 s in silence.
TEST(ShmRegion, ZeroFilledSegmentFailsFast) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("zero");
  ShmGuard guard(name);
  uintmax_t size = 0;
  {
    bool created = false;
    auto r = ShmRegion::CreateOrAttach(name, 100, 7, &created);
    size = fs::file_size(r->path());
  }
  {
    std::ofstream f(guard.path, std::ios::binary);
    std::vector<char> zeros(size, 0);
    f.write(zeros.data(), zeros.size());
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = InChild(
      [&] {
        bool created = false;
        try {
          ShmRegion::CreateOrAttach(name, 100, 7, &created);
        } catch (const Error& e) {
          return std::string(e.what()).find("never initialised") != std::string::npos ? 3 : 4;
        }
        return 0;
      },
      20);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(rc, 3) << "-1 = still waiting after 20 s";
  EXPECT_LT(secs, 5.0);
}

// Every header field is validated before use: a crafted leader rank used to index past the
// group and crash the process with SIGBUS.
TEST(ShmRegion, CorruptHeaderIsRefused) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("corrupt");
  ShmGuard guard(name);
  bool created = false;
  auto job = ShmRegion::CreateOrAttach(name, 100, 7, &created);
  job->MarkReady();
  job->group()->leader.store(0x40000000);
  const int rc = InChild(
      [&] {
        bool c = false;
        try {
          auto r = ShmRegion::CreateOrAttach(name, 100, 7, &c);
          // Attached: what a solver would read next.
          return r->group()->heartbeat_ms[r->group()->leader.load()].load() > 0 ? 5 : 6;
        } catch (const Error& e) {
          return std::string(e.what()).find("corrupt") != std::string::npos ? 3 : 4;
        }
      },
      20);
  EXPECT_EQ(rc, 3) << "5/6 = attached to a corrupt header, 128+N = crashed with signal N";
}

// A segment another user made is refused, with the owner named and another name suggested
// (as root, open() would succeed: the owner check is what stops it).
TEST(ShmRegion, OtherUsersSegmentIsRefused) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to give a segment to another user)";
  const std::string name = UniqueName("owner");
  ShmGuard guard(name);
  bool created = false;
  auto job = ShmRegion::CreateOrAttach(name, 100, 7, &created);
  job->MarkReady();
  ASSERT_EQ(chown(job->path().c_str(), 65534, 65534), 0);
  try {
    ShmRegion::CreateOrAttach(name, 100, 7, &created);
    FAIL() << "attached to another user's segment";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("taken by user"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("choose another --shm name"), std::string::npos) << e.what();
  }
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
  ShmGuard guard(name);
  const pid_t first = launch(log0);
  // The first one creates the job: wait until it says so.
  const bool created = WaitFor([&] { return ReadAll(log0).find("Created") != std::string::npos; }, 60);
  const pid_t second = launch(log1);
  if (!created) {
    kill(first, SIGKILL);
    kill(second, SIGKILL);
    waitpid(first, nullptr, 0);
    waitpid(second, nullptr, 0);
  }
  ASSERT_TRUE(created) << ReadAll(log0);
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


// ---------------------------------------------------------------- programs: errors and signals

class HogwildProgram : public ScratchDir {
 protected:
  // A solver file for a job that runs until it is signalled (or killed at a test's deadline).
  std::string LongSolver(const std::string& prefix, const std::string& net = "") {
    const std::string path = (dir_ / (prefix + ".prototxt")).string();
    auto p = SolverFor(net.empty() ? NetText(64) : net, 10000000, (dir_ / prefix).string());
    p.set_display(500);
    p.set_snapshot_after_train(true);
    std::ofstream(path) << p.DebugString();
    return path;
  }
  size_t Models() const { return SnapshotsIn(dir_, ".caffemodel").size(); }
  // NetText(16) reading dir_/db (an LMDB, batches of 16) instead of its DummyData.
  std::string LmdbNet(const std::string& transform) const {
    std::string net = NetText(16);
    const size_t first = net.find("layer"), second = net.find("layer", first + 1);
    net.replace(first, second - first,
                "layer { name: 'd' type: 'Data' top: 'x' top: 'label' data_param { source: '" + (dir_ / "db").string() +
                    "' batch_size: 16 backend: LMDB } " + transform + " }\n    ");
    return net;
  }
  bool WaitForLog(const std::string& log, const std::string& what, double seconds = 60) {
    return WaitFor([&] { return ReadAll(log).find(what) != std::string::npos; }, seconds);
  }
};

// An error in the leader solver (a corrupt record in its shard, mid-run) ends the process with
// one line and exit 1; the other solver takes over the job's end. It used to hang for good:
// the followers waited for a leader whose process kept beating.
TEST_F(HogwildProgram, LeaderErrorEndsTheProcessWithOneLine) {
  std::vector<pb::Datum> data;
  std::mt19937 gen(TestSeed());
  for (int i = 0; i < 400; ++i) data.push_back(test::MakeDatum(1, 8, 8, test::RandomBytes(64, gen), i % 3));
  data[40].set_data("short");  // solver 0 reads from record 0, solver 1 from record 200
  test::WriteLmdb((dir_ / "db").string(), data);
  const std::string net = LmdbNet("transform_param { scale: 0.0039 }");
  const std::string solver = LongSolver("e", net);
  const std::string log = (dir_ / "e.log").string();
  const pid_t pid = LaunchHogwild({solver, "2"}, log);
  const int rc = WaitExit(pid, 60);
  const std::string text = ReadAll(log);
  ASSERT_EQ(rc, 1) << "-1 = hung for 60 s\n" << text;
  const std::string last = test::LastLine(text);
  EXPECT_EQ(last.rfind("hogwild.bin: ", 0), 0u) << last;
  EXPECT_NE(last.find("key '00000040'"), std::string::npos) << last;
}

// A private copy whose loss goes non-finite (a record of NaN values, read by each solver once
// an epoch) re-takes the shared weights and forgets its momentum, under async and easgd: the
// run ends at max_iter and snapshots finite weights instead of ending with the solver's "loss
// is nan" line, and says so once, counting the re-takes in the Segments line.
class HogwildRetake : public HogwildProgram, public ::testing::WithParamInterface<const char*> {};

TEST_P(HogwildRetake, APrivateCopyThatGoesNonFiniteRetakesTheSharedWeights) {
  std::vector<pb::Datum> data;
  std::mt19937 gen(TestSeed());
  for (int i = 0; i < 160; ++i) data.push_back(test::MakeDatum(1, 8, 8, test::RandomBytes(64, gen), i % 3));
  data[40].clear_data();  // float values, one of them NaN: every batch holding it scores NaN
  for (int k = 0; k < 64; ++k)
    data[40].add_float_data(k == 17 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(gen() % 256));
  test::WriteLmdb((dir_ / "db").string(), data);
  const std::string net = LmdbNet("transform_param { scale: 0.0039 }");
  const std::string path = (dir_ / "r.prototxt").string();
  auto p = SolverFor(net, 200, (dir_ / "r").string());  // 100 iterations each: 10 epochs of 10 batches
  p.set_display(50);
  p.set_snapshot_after_train(true);
  std::ofstream(path) << p.DebugString();
  const std::string log = (dir_ / "r.log").string();
  const pid_t pid = LaunchHogwild({path, "2", "--private", std::string("--policy=") + GetParam()}, log);
  const int rc = WaitExit(pid, 120);
  const std::string text = ReadAll(log);
  ASSERT_EQ(rc, 0) << "-1 = hung for 120 s\n" << text;
  EXPECT_NE(text.find("'s copy went non-finite after "), std::string::npos) << text;
  EXPECT_NE(text.find("it re-took the shared weights and forgot its momentum"), std::string::npos) << text;
  // Counted once more at the end (a display line may come before them, or not at all when the
  // solvers pass its iteration while the other one displays).
  static const std::regex counted("Sharing: .* re-took the shared weights ([0-9]+) times");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, counted)) << text;
  EXPECT_GE(std::stoll(m[1]), 2) << "a solver reads the record once an epoch";
  // The weights the run ends with (the master's, after the copies' last sweeps) are finite.
  pb::NetParameter weights;
  ReadBinaryProto((dir_ / "r_iter_200.caffemodel").string(), &weights);
  const WeightCount final_weights = CountWeights(weights);
  EXPECT_EQ(final_weights.non_finite, 0u);
  EXPECT_GT(final_weights.values, 100u);
}

// Every record NaN: each re-taken copy is non-finite again at once, and after three re-takes in a
// row the run ends with one line (not a stream of re-takes, nor a hang).
TEST_F(HogwildProgram, ACopyNonFiniteRightAfterEachRetakeIsOneLine) {
  std::vector<pb::Datum> data(40);
  for (pb::Datum& d : data) {
    d = test::MakeDatum(1, 8, 8, "", 1);
    d.clear_data();
    for (int k = 0; k < 64; ++k) d.add_float_data(std::numeric_limits<float>::quiet_NaN());
  }
  test::WriteLmdb((dir_ / "db").string(), data);
  const std::string net = LmdbNet("");
  const std::string path = (dir_ / "n.prototxt").string();
  std::ofstream(path) << SolverFor(net, 200, (dir_ / "n").string()).DebugString();
  const std::string log = (dir_ / "n.log").string();
  const int rc = WaitExit(LaunchHogwild({path, "2", "--private"}, log), 60);
  const std::string text = ReadAll(log);
  ASSERT_EQ(rc, 1) << "-1 = hung for 60 s\n" << text;
  const std::string last = test::LastLine(text);
  EXPECT_EQ(last.rfind("hogwild.bin: loss is nan", 0), 0u) << last;
  EXPECT_NE(last.find("right after re-taking the shared weights, 3 times in a row"), std::string::npos) << last;
}

INSTANTIATE_TEST_SUITE_P(Policies, HogwildRetake, ::testing::Values("async", "easgd:0.5:2"),
                         [](const auto& info) { return std::string(info.param[0] == 'a' ? "Async" : "Easgd"); });

// SIGHUP snapshots and SIGINT snapshots and stops with two solver threads: every signal is
// acted on (the first solver thread to poll used to swallow it, and only the leader acted).
TEST_F(HogwildProgram, SighupAndSigintWithTwoSolvers) {
  const std::string log = (dir_ / "h.log").string();
  const pid_t pid = LaunchHogwild({LongSolver("h"), "2"}, log);
  ASSERT_TRUE(WaitForLog(log, "Solving")) << ReadAll(log);
  for (int k = 0; k < 3; ++k) {
    const size_t before = Models();
    ASSERT_EQ(kill(pid, SIGHUP), 0);
    const bool snapped = WaitFor([&] { return Models() > before; }, 30);
    if (!snapped) WaitExit(pid, 0);
    ASSERT_TRUE(snapped) << "SIGHUP " << k + 1 << " made no snapshot\n" << ReadAll(log);
  }
  const size_t before = Models();
  ASSERT_EQ(kill(pid, SIGINT), 0);
  ASSERT_EQ(WaitExit(pid, 60), 0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("Optimization stopped early"), std::string::npos);
  EXPECT_GT(Models(), before) << "SIGINT snapshots before it stops";
}

// SIGTERM (what batch schedulers send first) is SIGINT: snapshot and stop, exit 0 (it used to
// kill the process without a snapshot, exit 143).
TEST_F(HogwildProgram, SigtermSnapshotsAndStops) {
  const std::string log = (dir_ / "t.log").string();
  const pid_t pid = LaunchHogwild({LongSolver("t"), "1"}, log);
  ASSERT_TRUE(WaitForLog(log, "Solving")) << ReadAll(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  ASSERT_EQ(WaitExit(pid, 60), 0) << ReadAll(log);
  EXPECT_GE(Models(), 1u);
  EXPECT_NE(ReadAll(log).find("Optimization stopped early"), std::string::npos);
}

// A signal to a follower process of a --shm job is a request for the whole job: the leader
// (in the other process) snapshots and stops everyone. It used to do nothing.
TEST_F(HogwildProgram, SigintToAFollowerProcessStopsTheJob) {
  if (!ShmUsable()) GTEST_SKIP() << "/dev/shm is not available";
  const std::string name = UniqueName("sigjob");
  ShmGuard guard(name);
  const std::string solver = LongSolver("f");
  const std::string log0 = (dir_ / "f0.log").string(), log1 = (dir_ / "f1.log").string();
  const pid_t leader = LaunchHogwild({solver, "1", "--shm=" + name}, log0);
  const bool created = WaitForLog(log0, "Created");
  const pid_t follower = created ? LaunchHogwild({solver, "1", "--shm=" + name}, log1) : -1;
  const bool joined = created && WaitForLog(log1, "Solving");
  if (joined) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(follower, SIGINT);
  }
  const int rc_follower = follower > 0 ? WaitExit(follower, 60) : -1;
  const int rc_leader = WaitExit(leader, 60);
  ASSERT_TRUE(joined) << ReadAll(log0) << ReadAll(log1);
  EXPECT_EQ(rc_follower, 0) << ReadAll(log1);
  EXPECT_EQ(rc_leader, 0) << ReadAll(log0);
  EXPECT_NE(ReadAll(log0).find("Optimization stopped early"), std::string::npos) << ReadAll(log0);
  EXPECT_GE(Models(), 1u);
}

// Bursts of SIGHUPs never crash training (no compute thread ever runs a signal handler: they
// used to land on oneDNN's GEMM stack, which points into the heap, and abort with 134).
// scripts/signal_soak.sh runs the long version.
TEST_F(HogwildProgram, SighupBurstsNeverAbort) {
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(::testing::Message() << "run " << run);
    const std::string log = (dir_ / ("b" + std::to_string(run) + ".log")).string();
    const pid_t pid = LaunchHogwild({LongSolver("b" + std::to_string(run)), "2"}, log);
    ASSERT_TRUE(WaitForLog(log, "Solving")) << ReadAll(log);
    std::mt19937 gen(run);
    for (int k = 0; k < 8; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(20, 120)(gen)));
      kill(pid, SIGHUP);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(pid, SIGINT);
    EXPECT_EQ(WaitExit(pid, 60), 0) << ReadAll(log);
  }
}

}  // namespace
}  // namespace hogstream

namespace hogstream {
namespace HS_UNITY_ID {

// An LMDB of `records` one-pixel records whose label is the record's index.
void WriteIndexTaggedLmdb(const std::string& path, int records) {
  std::vector<pb::Datum> data;
  for (int i = 0; i < records; ++i) data.push_back(test::MakeDatum(1, 1, 1, std::string(1, char(i)), i));
  test::WriteLmdb(path, data);
}

// Ranks, seeds and data across machines that run different solver counts: every solver's seed
// rank is unique, and the partitions cover the data once. Read through real Data layers over an
// index-tagged LMDB (label = record index), one epoch of the job (each solver its partition's
// length) reads every record exactly once; the old staggered shards read some twice.
// bsp and gsp across machines: a synchronous round of up to kJobSolverSpeed machines adds their
// steps whole (its mean times their count); a bigger one moves at kJobSolverSpeed means.
TEST(HogwildPlaceTest, ARoundOfMachinesMovesAtTheirCountOfMeansUpToTheJobSpeed) {
  for (int mates = 1; mates <= 16; ++mates) {
    const double moves = MachineRoundScale(mates) * mates;  // the round's step in means
    EXPECT_NEAR(moves, std::min<double>(mates, kJobSolverSpeed), 1e-5) << mates;
  }
  EXPECT_FLOAT_EQ(MachineRoundScale(4), 1.f) << "bsp at 4 machines: the sum of their steps";
  EXPECT_FLOAT_EQ(MachineRoundScale(8), 0.5f);
}

TEST(HogwildPlaceTest, PartitionsReadEachRecordOnceAcrossMachinesOfUnequalSize) {
  test::TempDir dir;
  constexpr int kRecords = 60;
  WriteIndexTaggedLmdb(dir / "db", kRecords);
  const std::vector<int> locals = {3, 1, 2};  // machines 0, 1, 2
  std::set<int> seed_ranks;
  std::vector<int> reads(kRecords, 0);
  for (int m = 0; m < 3; ++m) {
    for (int i = 0; i < locals[m]; ++i) {
      const SolverPlace place = PlaceSolver(m, 3, i, locals[m]);
      EXPECT_TRUE(seed_ranks.insert(place.seed_rank).second) << "machine " << m << " solver " << i;
      Context ctx(Mode::CPU, 0, 1);
      ContextScope scope(&ctx);
      ctx.set_seed(SolverSeed(7, place.seed_rank));
      ctx.set_data_partition(place.begin, place.length);
      const auto at = [](double f) { return static_cast<int>(f * kRecords + 1e-7); };
      const int count = at(place.begin + place.length) - at(place.begin);
      pb::LayerParameter p = test::DataParam({dir / "db"}, count, pb::TRAIN);
      Blob x, label;
      auto layer = CreateLayer(p);
      layer->SetUp({}, {&x, &label});
      layer->Forward({}, {&x, &label});
      for (int k = 0; k < count; ++k) ++reads[static_cast<int>(label.cpu_data()[k])];
      // The next batch reads the same partition again, from its start.
      layer->Forward({}, {&x, &label});
      EXPECT_EQ(label.cpu_data()[0], at(place.begin)) << "machine " << m << " solver " << i;
    }
  }
  for (int r = 0; r < kRecords; ++r) EXPECT_EQ(reads[r], 1) << "record " << r;
  // A TEST net's data is never partitioned: the leader tests on the whole set.
  Context ctx(Mode::CPU, 0, 1);
  ContextScope scope(&ctx);
  ctx.set_data_partition(0.5, 0.25);
  pb::LayerParameter p = test::DataParam({dir / "db"}, kRecords, pb::TEST);
  Blob x, label;
  auto layer = CreateLayer(p);
  layer->SetUp({}, {&x, &label});
  layer->Forward({}, {&x, &label});
  std::set<int> seen;
  for (int k = 0; k < kRecords; ++k) seen.insert(static_cast<int>(label.cpu_data()[k]));
  EXPECT_EQ(seen.size(), static_cast<size_t>(kRecords));
}

// A dead machine's partition is read by the others: machine 1 of 3 (machines of 3, 1 and 2
// solvers) gone, a round of each live solver (its partition, then its slices of machine 1's)
// reads every record of the data once between them; the next round starts at its own
// partition again; with nobody dead the slices are empty.
TEST(HogwildPlaceTest, ADeadMachinesPartitionIsReadByTheOthers) {
  test::TempDir dir;
  constexpr int kRecords = 72;
  WriteIndexTaggedLmdb(dir / "db", kRecords);
  const std::vector<int> locals = {3, 1, 2};
  constexpr uint64_t kDead = 1u << 1;
  EXPECT_TRUE(TakenOverPartitions(1, 3, 0, 1, kDead).empty()) << "a dead machine takes nothing over";
  EXPECT_TRUE(TakenOverPartitions(0, 3, 0, 3, 0).empty());
  const auto at = [](double f) { return static_cast<int>(f * kRecords + 1e-7); };
  std::vector<int> reads(kRecords, 0);
  for (int m : {0, 2}) {
    for (int i = 0; i < locals[m]; ++i) {
      SCOPED_TRACE("machine " + std::to_string(m) + " solver " + std::to_string(i));
      const SolverPlace place = PlaceSolver(m, 3, i, locals[m]);
      Context ctx(Mode::CPU, 0, 1);
      ContextScope scope(&ctx);
      ctx.set_seed(SolverSeed(7, place.seed_rank));
      ctx.set_data_partition(place.begin, place.length);
      const auto taken = TakenOverPartitions(m, 3, i, locals[m], kDead);
      ASSERT_EQ(taken.size(), 1u);
      ctx.set_data_takeover([&] { return TakenOverPartitions(m, 3, i, locals[m], kDead); });
      const int own = at(place.begin + place.length) - at(place.begin);
      const int more = at(taken[0].first + taken[0].second) - at(taken[0].first);
      pb::LayerParameter p = test::DataParam({dir / "db"}, own + more, pb::TRAIN);
      Blob x, label;
      auto layer = CreateLayer(p);
      layer->SetUp({}, {&x, &label});
      layer->Forward({}, {&x, &label});
      for (int k = 0; k < own + more; ++k) ++reads[static_cast<int>(label.cpu_data()[k])];
      layer->Forward({}, {&x, &label});
      EXPECT_EQ(label.cpu_data()[0], at(place.begin)) << "the next round starts at its own partition";
    }
  }
  for (int r = 0; r < kRecords; ++r) EXPECT_EQ(reads[r], 1) << "record " << r;
}

}  // namespace
}  // namespace hogstream

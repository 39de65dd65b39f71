// The programs end to end: what a user who makes a mistake sees. Every error is one line
// "PROGRAM: message" as the last line of stderr, exit status 1, and nothing trained or written
// first; never an abort, a C++ library message ("stoi"), or a stack dump.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <fstream>
#include <string>
#include <vector>

#include "core/io.hpp"
#include "core/proto/hogstream.pb.h"
#include "data/lmdb.hpp"
#include "test/program_runner.hpp"
#include "test/transport/transport_test_util.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

namespace fs = std::filesystem;

class Cli : public ::testing::Test {
 protected:
  using Result = test::Finished;
  Result Run(const char* program, const std::vector<std::string>& args, int seconds = 60) {
    return test::RunProgram(program, args, scratch_, seconds);
  }

  // A solver for a tiny net on DummyData; `extra` is appended to the solver text (solver_mode
  // is CPU unless `extra` sets it).
  std::string Solver(const std::string& extra) {
    const std::string path = (dir_ / "solver.prototxt").string();
    std::ofstream(path) << R"(
      net_param {
        layer { name: "d" type: "DummyData" top: "x" top: "label"
                dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 }
                                   data_filler { type: "gaussian" }
                                   data_filler { type: "constant" value: 1 } } }
        layer { name: "ip" type: "InnerProduct" bottom: "x" top: "s"
                inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" top: "loss" } }
      base_lr: 0.01 lr_policy: "fixed" max_iter: 50 display: 10
      snapshot_prefix: ")" << (dir_ / "snap").string() << "\"\n"
                     << (extra.find("solver_mode") == std::string::npos ? "solver_mode: CPU\n" : "") << extra;
    return path;
  }

  // One clean line from `program`, exit 1, containing `needle`.
  void ExpectOneLine(const Result& r, const std::string& program, const std::string& needle) {
    EXPECT_EQ(r.rc, 1) << r.err;
    const std::string last = r.last_line();
    EXPECT_EQ(last.rfind(program + ": ", 0), 0u) << r.err;
    EXPECT_NE(last.find(needle), std::string::npos) << r.err;
    for (const char* bad : {"terminate called", "Aborted", "stoi", "std::", "*** Check failure"})
      EXPECT_EQ(r.err.find(bad), std::string::npos) << bad << " in:\n" << r.err;
  }

  // Why a GPU run could not start (no GPU here, or a build without CUDA); empty if it could.
  static std::string NoGpu(const Result& r) {
    if (r.rc == 0) return "";
    for (const char* why : {"no CUDA device is visible", "built without CUDA"})
      if (r.err.find(why) != std::string::npos) return r.last_line();
    return "";
  }

  test::ScratchDir scratch_{"cli"};
  const fs::path dir_ = scratch_.path();
};

TEST_F(Cli, MissingSolverFile) {
  ExpectOneLine(Run(HS_HOGWILD_BIN, {(dir_ / "missing.prototxt").string(), "2"}), "hogwild.bin",
                "missing.prototxt");
}

TEST_F(Cli, BadSolversSpec) {
  ExpectOneLine(Run(HS_HOGWILD_BIN, {Solver(""), "two"}), "hogwild.bin", "SOLVERS");
}

TEST_F(Cli, BadSignalEffect) {
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), "--sigint_effect=explode"}),
                "hogstream", "sigint_effect");
}

// A machine cut off must not give up before the others could take it for dead.
TEST_F(Cli, AQuorumWaitShorterThanTheDeadTimeoutIsOneLine) {
  const std::vector<uint16_t> ports = test::FreeUdpPorts(2);
  const std::string peers =
      "--peers=udp://127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), peers, "--rank=0", "--dead_ms=2000",
                                       "--quorum_ms=1500", "--start_timeout=1"}),
                "hogstream", "--quorum_ms longer than --dead_ms");
}

// Share weights: a positive number per machine, no more than the job's machines.
TEST_F(Cli, BadShareWeightsAreOneLine) {
  const std::vector<uint16_t> ports = test::FreeUdpPorts(2);
  const std::string peers =
      "--peers=udp://127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  for (const std::string bad : {"1,0", "1,x", "1,,2", "-1", "1,nan"})
    ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), peers, "--rank=0", "--start_timeout=1",
                                         "--share_weights=" + bad}),
                  "hogstream", "--share_weights wants a positive weight per machine, by rank (W0,W1,...), got '" + bad + "'");
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), peers, "--rank=0", "--start_timeout=1",
                                       "--share_weights=1,1,1"}),
                "hogstream", "--share_weights names 3 weights for a job of 2 machines");
}

// bsp whose every step is non-finite (an infinite rate): each is left out of its round, so the
// weights stay sound, and after three rounds in a row the solver ends the run with one line.
TEST_F(Cli, BspStepsThatKeepComingOutNonFiniteAreOneLine) {
  std::string text = test::ReadFile(Solver(""));
  text.replace(text.find("base_lr: 0.01"), 13, "base_lr: inf");
  const std::string path = (dir_ / "inf.prototxt").string();
  std::ofstream(path) << text;
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + path, "--solvers=2", "--policy=bsp"}), "hogstream",
                "non-finite 3 rounds in a row");
}

TEST_F(Cli, HugeInputDimensionIsOneLine) {
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"describe", "--model=" + Solver(""), "--input=data:99999999999"}),
                "hogstream", "99999999999");
}

// `hogstream time --gpu=ID` names the device it cannot use; on a host with a GPU, device 0
// times the net.
TEST_F(Cli, TimeOnAGpu) {
  const std::string net = (dir_ / "net.prototxt").string();
  std::ofstream(net) << R"(
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 8 dim: 3 dim: 6 dim: 6 } } }
    layer { name: "c" type: "Convolution" bottom: "x" top: "c"
            convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
    layer { name: "r" type: "ReLU" bottom: "c" top: "c" })";
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"time", "--model=" + net, "--iterations=2", "--gpu=977"}),
                "hogstream", "--gpu=977");
  const Result gpu = Run(HS_HOGSTREAM_BIN, {"time", "--model=" + net, "--iterations=2", "--gpu=0"});
  if (const std::string why = NoGpu(gpu); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(gpu.rc, 0) << gpu.err;
  EXPECT_NE(gpu.out.find("Median Forward-Backward"), std::string::npos) << gpu.out;
  // Input has no GPU twin; ReLU (and, with cuDNN, Convolution) do.
  EXPECT_NE(gpu.out.find("(Input on the host)"), std::string::npos) << gpu.out;
  EXPECT_EQ(gpu.out.find("(ReLU on the host)"), std::string::npos) << gpu.out;
#ifdef HOGSTREAM_CUDNN
  EXPECT_EQ(gpu.out.find("(Convolution on the host)"), std::string::npos) << gpu.out;
#endif
}

// GPU solvers name the device they cannot use, in every program that takes SOLVERS and in
// solver_mode: GPU.
TEST_F(Cli, GpuSolversNameTheMissingDevice) {
  ExpectOneLine(Run(HS_HOGWILD_BIN, {Solver(""), "977:1"}), "hogwild.bin", "SOLVERS names GPU 977");
  ExpectOneLine(Run(HS_GPUS_BIN, {Solver(""), "977:0"}), "gpus.bin", "SOLVERS names GPU 977");
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), "--solvers=0:977:1"}), "hogstream",
                "SOLVERS names GPU");
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver("solver_mode: GPU device_id: 977")}),
                "hogstream", "solver_mode: GPU (device_id 977");
  ExpectOneLine(Run(HS_HOGWILD_BIN, {Solver("solver_mode: GPU"), "2"}), "hogwild.bin", "name the GPUs in SOLVERS");
}

// Every stock Caffe solver says solver_mode: GPU: --cpu trains it on the CPU without an edit,
// --gpu=ID overrides the file the other way (caffe train -gpu).
TEST_F(Cli, CpuAndGpuFlagsOverrideTheSolverMode) {
  const Result cpu = Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver("solver_mode: GPU device_id: 977"),
                                            "--cpu", "--iterations=3"});
  EXPECT_EQ(cpu.rc, 0) << cpu.err;
  EXPECT_NE(cpu.err.find("--cpu: training on the CPU"), std::string::npos) << cpu.err;
  EXPECT_NE(cpu.err.find("Optimization Done"), std::string::npos) << cpu.err;
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), "--gpu=977", "--iterations=3"}),
                "hogstream", "solver_mode: GPU (device_id 977; --cpu trains on the CPU)");
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), "--gpu=0", "--cpu"}), "hogstream",
                "give --cpu or --gpu=ID, not both");
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), "--gpu=0", "--solvers=2"}),
                "hogstream", "--gpu=ID is for one solver");
}

// extract_features: a trained net's blob, item by item, into an LMDB of float Datums that
// hold what the net computes: s = W x + b of each item's own (random) x, from the snapshot's W, b.
TEST_F(Cli, ExtractWritesEachItemsFeatures) {
  ASSERT_EQ(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), "--iterations=20"}).rc, 0);
  const std::string model = (dir_ / "snap_iter_20.caffemodel").string();
  ASSERT_TRUE(fs::exists(model));
  const std::string net = (dir_ / "net.prototxt").string();
  std::ofstream(net) << R"(
    layer { name: "d" type: "DummyData" top: "x"
            dummy_data_param { shape { dim: 4 dim: 3 } data_filler { type: "gaussian" } } }
    layer { name: "ip" type: "InnerProduct" bottom: "x" top: "s" inner_product_param { num_output: 2 } })";
  const std::string out = (dir_ / "features").string(), out2 = (dir_ / "inputs").string();
  const Result r = Run(HS_HOGSTREAM_BIN, {"extract", "--model=" + net, "--weights=" + model, "--blobs=s,x",
                                          "--iterations=2", out + "," + out2});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("Extracted 8 items of 's'"), std::string::npos) << r.err;
  pb::NetParameter weights;
  ReadBinaryProto(model, &weights);
  const pb::LayerParameter* ip = nullptr;
  for (const auto& l : weights.layer())
    if (l.name() == "ip") ip = &l;
  ASSERT_NE(ip, nullptr);
  LmdbCursor c(out), cx(out2);
  ASSERT_EQ(c.size(), 8u);
  ASSERT_EQ(cx.size(), 8u);
  std::set<float> firsts;
  for (size_t i = 0; i < 8; ++i, c.Next(), cx.Next()) {
    pb::Datum d, x;
    ASSERT_TRUE(d.ParseFromArray(c.value().data(), static_cast<int>(c.value().size())));
    ASSERT_TRUE(x.ParseFromArray(cx.value().data(), static_cast<int>(cx.value().size())));
    ASSERT_EQ(x.float_data_size(), 3);
    firsts.insert(x.float_data(0));
    char key[16];
    std::snprintf(key, sizeof key, "%010zu", i);
    EXPECT_EQ(c.key(), key);
    ASSERT_EQ(d.channels(), 2);
    ASSERT_EQ(d.float_data_size(), 2);
    for (int o = 0; o < 2; ++o) {
      float want = ip->blobs(1).data(o);
      for (int j = 0; j < 3; ++j) want += x.float_data(j) * ip->blobs(0).data(o * 3 + j);
      EXPECT_NEAR(d.float_data(o), want, 1e-5) << i;
    }
  }
  EXPECT_EQ(firsts.size(), 8u) << "every item its own values";
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"extract", "--model=" + net, "--weights=" + model, "--blobs=nope",
                                       (dir_ / "o3").string()}),
                "hogstream", "the net has no blob 'nope'");
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"extract", "--model=" + net, "--weights=" + model, "--blobs=s,x",
                                       (dir_ / "o4").string()}),
                "hogstream", "2 blob(s) but 1 output(s)");
}

TEST_F(Cli, GpusBinTrainsTwoSolversOnOneGpuBesideACpuSolver) {
  const Result gpu = Run(HS_GPUS_BIN, {Solver(""), "0:0:1"}, 120);
  if (const std::string why = NoGpu(gpu); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(gpu.rc, 0) << gpu.err;
  EXPECT_NE(gpu.err.find("3 solver threads in this process (2 on GPUs)"), std::string::npos) << gpu.err;
  EXPECT_NE(gpu.err.find("(the GPU solvers' on their devices)"), std::string::npos) << "not the GPU segment's path:\n" << gpu.err;
  EXPECT_NE(gpu.err.find("Optimization Done"), std::string::npos) << gpu.err;
}

// A missing snapshot directory fails before the first iteration, not after the whole run.
TEST_F(Cli, MissingSnapshotDirectoryFailsBeforeTraining) {
  const std::string solver = Solver("snapshot: 10");
  fs::remove_all(dir_ / "out");
  std::string text;
  {
    std::ifstream in(solver);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  text.replace(text.find((dir_ / "snap").string()), (dir_ / "snap").string().size(),
               (dir_ / "out" / "snap").string());
  std::ofstream(solver) << text;
  for (const char* solvers : {"1", "2"}) {
    const Result r = Run(HS_HOGWILD_BIN, {solver, solvers});
    ExpectOneLine(r, "hogwild.bin", "does not exist");
    EXPECT_EQ(r.err.find("Iteration 10"), std::string::npos) << "it trained first:\n" << r.err;
  }
}

// A solver state from the future (or the past) is refused with one line.
TEST_F(Cli, AbsurdSolverstate) {
  const std::string state = (dir_ / "bad.solverstate").string();
  {
    // A SolverState with iter = -5: field 1, varint (two's complement, 10 bytes).
    std::string bytes = "\x08";
    uint64_t v = static_cast<uint64_t>(int64_t{-5});
    while (v >= 0x80) {
      bytes.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    bytes.push_back(static_cast<char>(v));
    std::ofstream(state, std::ios::binary) << bytes;
  }
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(""), "--snapshot=" + state}),
                "hogstream", "iteration -5");
}

// Training that ends normally exits 0 and writes Caffe's final snapshot.
TEST_F(Cli, CleanRunExitsZero) {
  const Result r = Run(HS_HOGWILD_BIN, {Solver(""), "2"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("Optimization Done"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "snap_iter_50.caffemodel")) << r.err;
}

// `hogstream bench` prints a row per chunk size with the segment and raw rates; a transport
// it does not have is one line.
TEST_F(Cli, BenchOverUdpLoopback) {
  const Result r = Run(HS_HOGSTREAM_BIN, {"bench", "--transport=udp", "--loopback", "--chunk=4k,8k",
                                          "--seconds=0.2", "--json"});
  EXPECT_EQ(r.rc, 0) << r.err;
  size_t rows = 0;
  for (size_t at = 0; (at = r.out.find("\"ratio\":", at)) != std::string::npos; ++at) ++rows;
  EXPECT_EQ(rows, 2u) << r.out;
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"bench", "--transport=raw", "--loopback"}), "hogstream",
                "--transport");
  ExpectOneLine(Run(HS_HOGSTREAM_BIN, {"bench", "--loopback", "--chunk=4q"}), "hogstream", "--chunk");
}

}  // namespace
}  // namespace hogstream

#include "core/net.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/context.hpp"
#include "core/io.hpp"
#include "core/synced_memory.hpp"
#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

// A small net with a shared top (needs a Split), an in-place activation and a loss. Every
// layer is smooth (TanH, not ReLU), so the whole-net numeric gradient has no kinks.
const char kTinyNet[] = R"(
name: "tiny"
layer { name: "in" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 2 dim: 6 dim: 6 } shape { dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 3 kernel_size: 3 pad: 1
          weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "act" type: "TanH" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "ipa" type: "InnerProduct" bottom: "pool" top: "ipa"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "ipb" type: "InnerProduct" bottom: "pool" top: "ipb"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "sum" type: "Eltwise" bottom: "ipa" bottom: "ipb" top: "sum" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "sum" bottom: "label" top: "loss"
        loss_weight: 0.7 }
)";

void RandomInputs(Net& net, std::mt19937& gen) {
  test::FillGaussian(net.input_blobs()[0], gen);
  float* label = net.input_blobs()[1]->mutable_cpu_data();
  for (int i = 0; i < net.input_blobs()[1]->count(); ++i) label[i] = static_cast<float>(gen() % 5);
}

TEST(Net, InsertsSplitForSharedTop) {
  Net net(ParseNetText(kTinyNet, "tiny"));
  std::vector<std::string> types;
  for (auto& l : net.layers()) types.push_back(l->type());
  // pool feeds ipa and ipb -> one Split after pool; the in-place TanH needs none.
  EXPECT_EQ(types, (std::vector<std::string>{"Input", "Convolution", "TanH", "Pooling", "Split",
                                             "InnerProduct", "InnerProduct", "Eltwise",
                                             "SoftmaxWithLoss"}));
  EXPECT_EQ(net.layer_names()[4], "pool_pool_0_split");
  // In place: the activation's top is conv's top blob.
  EXPECT_EQ(net.top_vecs()[1][0], net.top_vecs()[2][0]);
  ASSERT_EQ(net.output_blobs().size(), 1u);
  EXPECT_EQ(net.output_blobs()[0], net.blob_by_name("loss").get());
}

TEST(Net, ParamsLiveInOneFlatBuffer) {
  Net net(ParseNetText(kTinyNet, "tiny"));
  ASSERT_EQ(net.learnable_params().size(), 6u);  // weights and biases of conv, ipa, ipb
  const float* begin = net.param_data();
  size_t expect = 0;
  for (size_t i = 0; i < net.learnable_params().size(); ++i) {
    Blob* b = net.learnable_params()[i];
    EXPECT_EQ(b->cpu_data(), begin + net.learnable_offsets()[i]);
    EXPECT_EQ(b->cpu_diff(), net.param_diff() + net.learnable_offsets()[i]);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->cpu_data()) % 64, 0u);
    expect += b->count();
  }
  EXPECT_EQ(net.num_learnable(), expect);
  EXPECT_EQ(net.num_learnable(), 3u * 2 * 9 + 3 + 2 * (27 * 5 + 5));
  // Writing through the flat buffer is what the layers see.
  net.param_data()[0] = 42.f;
  EXPECT_EQ(net.learnable_params()[0]->cpu_data()[0], 42.f);
  std::mt19937 gen(::hogstream::TestSeed());
  RandomInputs(net, gen);
  net.ForwardBackward();
  EXPECT_GT(net.learnable_params()[0]->asum_diff(), 0.f);
  net.ClearParamDiffs();
  for (Blob* b : net.learnable_params()) EXPECT_EQ(b->asum_diff(), 0.f);
}

// CPU training on a host with a GPU must not page-lock its memory or create a CUDA context:
// HostAlloc asks CUDA for pinned memory only on a GPU-mode thread. A CPU solver thread and a
// thread with no Context at all build and train a net here without one request.
TEST(Net, CpuWorkNeverAsksForPinnedMemory) {
  const uint64_t before = PinAttempts();
  auto train = [] {
    std::mt19937 gen(::hogstream::TestSeed());
    Net net(ParseNetText(kTinyNet, "tiny"));
    RandomInputs(net, gen);
    net.ForwardBackward();
    EXPECT_GT(net.learnable_params()[0]->asum_diff(), 0.f);
  };
  std::thread bare(train);  // the default (CPU) context
  bare.join();
  Context cpu(Mode::CPU, 0, 5);
  {
    ContextScope scope(&cpu);
    train();
    bool pinned = true;
    void* p = HostAlloc(1 << 20, &pinned);
    EXPECT_FALSE(pinned);
    HostFree(p, pinned);
  }
  EXPECT_EQ(PinAttempts(), before);
}

// The whole net's gradient, loss weight included, against central differences of Forward.
TEST(Net, WholeNetGradientMatchesNumeric) {
  std::mt19937 gen(::hogstream::TestSeed());
  Context::Get().set_seed(gen());
  Net net(ParseNetText(kTinyNet, "tiny"));
  RandomInputs(net, gen);
  const int checked = test::ExpectNetGradientMatchesNumeric(net, 1e-2f, 3);
  EXPECT_GT(checked, 50);
}

TEST(Net, LossWeightScalesLoss) {
  std::mt19937 gen(::hogstream::TestSeed());
  Net net(ParseNetText(kTinyNet, "tiny"));
  RandomInputs(net, gen);
  const float loss = net.Forward();
  const float raw = net.blob_by_name("loss")->cpu_data()[0];
  EXPECT_NEAR(loss, 0.7f * raw, 1e-5f);
  EXPECT_GT(raw, 0.f);
}

TEST(Net, SharedParamsAreOneBlob) {
  const char text[] = R"(
layer { name: "in" type: "Input" top: "a" top: "b"
        input_param { shape { dim: 3 dim: 4 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "a" top: "ya"
        param { name: "w" } param { name: "bias" }
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
layer { name: "ip2" type: "InnerProduct" bottom: "b" top: "yb"
        param { name: "w" } param { name: "bias" }
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ya" bottom: "yb" top: "loss" }
)";
  Net net(ParseNetText(text, "shared"));
  ASSERT_EQ(net.params().size(), 4u);
  ASSERT_EQ(net.learnable_params().size(), 2u);
  EXPECT_EQ(net.params()[0]->cpu_data(), net.params()[2]->cpu_data());
  EXPECT_EQ(net.params()[0]->cpu_diff(), net.params()[2]->cpu_diff());
  EXPECT_EQ(net.param_owners(), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(net.num_learnable(), 10u);
  // Different shapes under one name are refused.
  std::string bad = text;
  bad.replace(bad.rfind("num_output: 2"), 13, "num_output: 3");
  EXPECT_THROW(Net(ParseNetText(bad, "shared")), Error);
}

TEST(Net, LrMultZeroFreezesAndSkipsBackward) {
  const char text[] = R"(
layer { name: "in" type: "Input" top: "a" top: "t" input_param { shape { dim: 3 dim: 4 } } }
layer { name: "frozen" type: "InnerProduct" bottom: "a" top: "h"
        param { lr_mult: 0 } param { lr_mult: 0 }
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" } } }
layer { name: "ip" type: "InnerProduct" bottom: "h" top: "y"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
)";
  Net net(ParseNetText(text, "frozen"));
  EXPECT_FALSE(net.layer_need_backward(1));
  EXPECT_TRUE(net.layer_need_backward(2));
  EXPECT_EQ(net.params_lr()[0], 0.f);
  EXPECT_EQ(net.params_lr()[2], 1.f);
}

TEST(Net, ForceBackwardReachesInputs) {
  std::string text = R"(
layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 3 dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "a" top: "y"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "y" top: "loss" }
)";
  {
    Net net(ParseNetText(text, "fb"));
    std::mt19937 gen(::hogstream::TestSeed());
    test::FillGaussian(net.input_blobs()[0], gen);
    std::fill_n(net.input_blobs()[0]->mutable_cpu_diff(), 12, 7.f);
    net.ForwardBackward();
    EXPECT_EQ(net.input_blobs()[0]->cpu_diff()[0], 7.f);  // untouched
  }
  Net net(ParseNetText("force_backward: true\n" + text, "fb"));
  std::mt19937 gen(::hogstream::TestSeed());
  test::FillGaussian(net.input_blobs()[0], gen);
  std::fill_n(net.input_blobs()[0]->mutable_cpu_diff(), 12, 7.f);
  net.ForwardBackward();
  EXPECT_NE(net.input_blobs()[0]->cpu_diff()[0], 7.f);
}

TEST(Net, PhaseLevelAndStageRules) {
  const char text[] = R"(
layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "train" type: "ReLU" bottom: "a" top: "b" include { phase: TRAIN } }
layer { name: "test" type: "Sigmoid" bottom: "a" top: "b" include { phase: TEST } }
layer { name: "deep" type: "TanH" bottom: "b" top: "c" include { min_level: 2 } }
layer { name: "staged" type: "TanH" bottom: "b" top: "d" include { stage: "x" stage: "y" } }
layer { name: "notx" type: "TanH" bottom: "b" top: "e" exclude { stage: "x" } }
)";
  auto names = [&](NetOptions o) {
    Net net(ParseNetText(text, "rules"), o);
    return net.layer_names();
  };
  NetOptions o;
  o.phase = pb::TRAIN;
  auto n = names(o);
  EXPECT_EQ(n, (std::vector<std::string>{"in", "train", "notx"}));
  o.phase = pb::TEST;
  o.level = 2;
  o.stages = {"x", "y"};
  n = names(o);
  EXPECT_TRUE(std::find(n.begin(), n.end(), "test") != n.end());
  EXPECT_TRUE(std::find(n.begin(), n.end(), "deep") != n.end());
  EXPECT_TRUE(std::find(n.begin(), n.end(), "staged") != n.end());
  EXPECT_TRUE(std::find(n.begin(), n.end(), "notx") == n.end());
  o.stages = {"x"};
  n = names(o);
  EXPECT_TRUE(std::find(n.begin(), n.end(), "staged") == n.end());
}

TEST(Net, UserErrorsNameTheLayer) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      NetOptions o;
      Net net(ParseNetText(text, "bad.prototxt", &o.source), o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::string e = error_of(R"(layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 } } }
layer { name: "r" type: "ReLU" bottom: "nope" top: "b" })");
  EXPECT_NE(e.find("nope"), std::string::npos) << e;
  e = error_of(R"(layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 } } }

layer { name: "weird" type: "Frobnicate" bottom: "a" top: "b" })");
  EXPECT_NE(e.find("bad.prototxt:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("weird"), std::string::npos) << e;
  EXPECT_NE(e.find("Frobnicate"), std::string::npos) << e;
  e = error_of(R"(layers { name: "old" type: CONVOLUTION } layer { name: "new" type: "ReLU" })");
  EXPECT_NE(e.find("bad.prototxt:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("V1"), std::string::npos) << e;
  e = error_of("layer { name: \"x\" type: \"ReLU\"\n  bogus_field: 3 }");
  EXPECT_NE(e.find("bad.prototxt:2:"), std::string::npos) << e;
  e = error_of(R"(layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 dim: 4 dim: 5 dim: 5 } } }
layer { name: "p" type: "Pooling" bottom: "a" top: "b"
        pooling_param { pool: STOCHASTIC kernel_size: 2 } })");
  EXPECT_NE(e.find("bad.prototxt:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("'p'"), std::string::npos) << e;
  e = error_of(R"(layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r1" type: "ReLU" bottom: "a" top: "b" }
layer { name: "r2" type: "ReLU" bottom: "a" top: "b" })");
  EXPECT_NE(e.find("more than one layer"), std::string::npos) << e;
}

TEST(Net, DataLayerNeedsSourceOrStandIn) {
  const char text[] = R"(
layer { name: "d" type: "Data" top: "data" top: "label"
        data_param { source: "/nonexistent/lmdb" batch_size: 8 backend: LMDB } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "y"
        inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss" })";
  EXPECT_THROW(Net(ParseNetText(text, "d")), Error);
  NetOptions o;
  o.input_shapes["data"] = {8, 1, 5, 5};
  Net net(ParseNetText(text, "d"), o);
  EXPECT_EQ(net.blob_by_name("label")->shape(), (std::vector<int>{8}));
  EXPECT_EQ(net.blob_by_name("y")->shape(), (std::vector<int>{8, 3}));
}

TEST(Net, LegacyNetInputsBecomeInputLayer) {
  Net net(ParseNetText(R"(input: "data" input_dim: 2 input_dim: 3 input_dim: 4 input_dim: 4
layer { name: "r" type: "ReLU" bottom: "data" top: "out" })", "legacy"));
  EXPECT_EQ(net.blob_by_name("data")->shape(), (std::vector<int>{2, 3, 4, 4}));
}

TEST(Net, WeightsRoundTripThroughProto) {
  Net a(ParseNetText(kTinyNet, "tiny"));
  Context::Get().set_seed(999);
  Net b(ParseNetText(kTinyNet, "tiny"));
  pb::NetParameter saved;
  a.ToProto(&saved);
  b.CopyTrainedLayersFrom(saved);
  ASSERT_EQ(a.param_buffer_size(), b.param_buffer_size());
  for (size_t i = 0; i < a.param_buffer_size(); ++i) ASSERT_EQ(a.param_data()[i], b.param_data()[i]);
  // A blob of the wrong shape is an Error naming the layer.
  saved.mutable_layer(1)->mutable_blobs(0)->mutable_shape()->set_dim(0, 4);
  try {
    b.CopyTrainedLayersFrom(saved);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv"), std::string::npos) << e.what();
  }
}


std::string NetError(const std::string& text) {
  try {
    NetOptions o;
    Net net(ParseNetText(text, "bad.prototxt", &o.source), o);
    net.Forward();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A bottom no layer produces, and a cycle (a bottom produced only later), name file:line
// and the layer.
TEST(Net, MissingBottomAndCycleNameFileAndLine) {
  std::string e = NetError(R"(layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 } } }
layer { name: "r" type: "ReLU" bottom: "nope" top: "b" })");
  EXPECT_NE(e.find("bad.prototxt:2: layer 'r'"), std::string::npos) << e;
  EXPECT_NE(e.find("'nope'"), std::string::npos) << e;
  e = NetError(R"(layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 } } }
layer { name: "x" type: "Eltwise" bottom: "a" bottom: "c" top: "b" }
layer { name: "y" type: "ReLU" bottom: "b" top: "c" })");
  EXPECT_NE(e.find("bad.prototxt:2: layer 'x'"), std::string::npos) << e;
  EXPECT_NE(e.find("'c'"), std::string::npos) << e;
  EXPECT_NE(e.find("bad.prototxt:3"), std::string::npos) << "names where 'c' is made: " << e;
}

// uint32 fields given 4294967295 (what "-1" becomes in tools that write unsigned values)
// read as -1: convolution passed it on to oneDNN, pooling accepted it.
TEST(Net, NegativePadAndZeroStrideAreClearErrors) {
  const std::string in = R"(layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
)";
  for (const char* conv : {"pad: 4294967295", "pad_h: 4294967295 pad_w: 0", "stride: 0",
                           "kernel_size: 0", "kernel_size: 4294967295"}) {
    const std::string k = std::string(conv).find("kernel") == std::string::npos ? "kernel_size: 3 " : "";
    const std::string e = NetError(in + R"(layer { name: "c" type: "Convolution" bottom: "a" top: "b"
  convolution_param { num_output: 2 )" + k + conv + " } }");
    EXPECT_NE(e.find("bad.prototxt:2: layer 'c' (Convolution): "), std::string::npos) << conv << ": " << e;
    EXPECT_EQ(e.find("dnnl"), std::string::npos) << e;
  }
  for (const char* pool : {"pad: 4294967295", "pad_h: 4294967295 pad_w: 0", "stride: 0",
                           "pad: 2"}) {
    const std::string e = NetError(in + R"(layer { name: "p" type: "Pooling" bottom: "a" top: "b"
  pooling_param { pool: MAX kernel_size: 2 )" + pool + " } }");
    EXPECT_NE(e.find("bad.prototxt:2: layer 'p' (Pooling): "), std::string::npos) << pool << ": " << e;
    EXPECT_NE(e.find("pad") == std::string::npos ? e.find("stride") : 0, std::string::npos) << e;
  }
}

// Absurd sizes are an Error naming the layer and the size, before anything is allocated (the
// test would be OOM-killed otherwise).
TEST(Net, AbsurdSizesAreErrorsBeforeAllocating) {
  std::string e = NetError(R"(layer { name: "data" type: "Input" top: "data"
  input_param { shape { dim: 1000000000 dim: 1 dim: 28 dim: 28 } } })");
  EXPECT_NE(e.find("bad.prototxt:1: layer 'data' (Input): top 'data' would need "
                   "1000000000x1x28x28 = 784000000000 floats"), std::string::npos) << e;
  e = NetError(R"(layer { name: "dd" type: "DummyData" top: "x"
  dummy_data_param { shape { dim: 100000 dim: 100000 } } })");
  EXPECT_NE(e.find("layer 'dd' (DummyData): top 'x' would need 100000x100000"), std::string::npos) << e;
  // Each top fits in an int, but together they need more memory than this machine has.
  const double phys = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  const int per_top = 1 << 30;  // floats: 8 GiB with its gradient
  const int tops = static_cast<int>(phys / (8.0 * per_top)) + 2;
  std::string text = R"(layer { name: "many" type: "Input" )";
  for (int t = 0; t < tops; ++t) text += "top: \"t" + std::to_string(t) + "\" ";
  text += "input_param { shape { dim: " + std::to_string(per_top) + " } } }";
  e = NetError(text);
  EXPECT_NE(e.find("GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("this machine has"), std::string::npos) << e;
}

// Writes `msg` to a fresh file in a temporary directory; the directory goes with the object.
struct WeightsFile {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("hs_net_weights_" + std::to_string(::getpid()));
  std::string path;
  WeightsFile(const std::string& name, const std::string& bytes) {
    std::filesystem::create_directories(dir);
    path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~WeightsFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::string LoadError(Net& net, const std::string& files) {
  try {
    net.CopyTrainedLayersFromFiles(files);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Weights that match nothing once loaded silently: a 0-byte file, a .solverstate given as
// --weights, a net whose layers were renamed.
TEST(Net, WeightsThatMatchNothingAreErrors) {
  Net net(ParseNetText(kTinyNet, "tiny"));
  {
    WeightsFile empty("empty.caffemodel", "");
    const std::string e = LoadError(net, empty.path);
    EXPECT_NE(e.find(empty.path + " holds no layers"), std::string::npos) << e;
  }
  {
    pb::SolverState state;
    state.set_iter(1000);
    state.set_learned_net("x_iter_1000.caffemodel");
    state.add_history()->add_data(1.f);
    WeightsFile solverstate("x_iter_1000.solverstate", state.SerializeAsString());
    const std::string e = LoadError(net, solverstate.path);
    EXPECT_NE(e.find(solverstate.path + ": a solver state (iteration 1000), not weights"), std::string::npos) << e;
  }
  pb::NetParameter saved;
  net.ToProto(&saved);
  for (auto& l : *saved.mutable_layer()) l.set_name(l.name() + "_renamed");
  {
    WeightsFile renamed("renamed.caffemodel", saved.SerializeAsString());
    const std::string e = LoadError(net, renamed.path);
    EXPECT_NE(e.find(renamed.path), std::string::npos) << e;
    EXPECT_NE(e.find("no layer"), std::string::npos) << e;
  }
  // A partial match loads, and says which learnable layers kept their initial values.
  net.ToProto(&saved);
  saved.mutable_layer(1)->set_name("conv_old");  // layer 1 is "conv"
  {
    WeightsFile partial("partial.caffemodel", saved.SerializeAsString());
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(LoadError(net, partial.path), "");
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("Loaded weights for 2 of 3 layers with parameters from " + partial.path),
              std::string::npos) << log;
    EXPECT_NE(log.find("'conv'"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace hogstream

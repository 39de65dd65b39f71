// core/upgrade.*: Caffe's V1 and V0 net formats read as the current one. A V1 LeNet equals
// our own LeNet field by field and builds the same blobs; a V0 padding layer becomes its
// convolution's pad; an old .caffemodel loads its weights by layer name; old solvers and the
// `hogstream upgrade` command; every user error is one line.
#include "core/upgrade.hpp"

#include <glog/logging.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <mutex>
#include <random>

#include "core/io.hpp"
#include "core/net.hpp"
#include "test/error_of.hpp"
#include "test/program_runner.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

namespace fs = std::filesystem;
namespace gp = google::protobuf;

const std::string kLeNet = std::string(HS_SOURCE_DIR) + "/configs/lenet/lenet_train_test.prototxt";

// configs/lenet/lenet_train_test.prototxt as a V1 file of 2014: enum types, blobs_lr and
// weight_decay, the scale inside data_param, the phase rules after the settings.
const char kLeNetV1[] = R"(name: "LeNet"
layers {
  name: "mnist"
  type: DATA
  top: "data"
  top: "label"
  data_param {
    source: "data/fashion-mnist/train_lmdb"
    batch_size: 64
    backend: LMDB
    scale: 0.00390625
  }
  include: { phase: TRAIN }
}
layers {
  name: "mnist"
  type: DATA
  top: "data"
  top: "label"
  data_param {
    source: "data/fashion-mnist/test_lmdb"
    batch_size: 100
    backend: LMDB
    scale: 0.00390625
  }
  include: { phase: TEST }
}
layers {
  name: "conv1"
  type: CONVOLUTION
  bottom: "data"
  top: "conv1"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  convolution_param {
    num_output: 20
    kernel_size: 5
    stride: 1
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "pool1"
  type: POOLING
  bottom: "conv1"
  top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  name: "conv2"
  type: CONVOLUTION
  bottom: "pool1"
  top: "conv2"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  convolution_param {
    num_output: 50
    kernel_size: 5
    stride: 1
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "pool2"
  type: POOLING
  bottom: "conv2"
  top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  name: "ip1"
  type: INNER_PRODUCT
  bottom: "pool2"
  top: "ip1"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  inner_product_param {
    num_output: 500
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "relu1"
  type: RELU
  bottom: "ip1"
  top: "ip1"
}
layers {
  name: "ip2"
  type: INNER_PRODUCT
  bottom: "ip1"
  top: "ip2"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  inner_product_param {
    num_output: 10
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "accuracy"
  type: ACCURACY
  bottom: "ip2"
  bottom: "label"
  top: "accuracy"
  include: { phase: TEST }
}
layers {
  name: "loss"
  type: SOFTMAX_LOSS
  bottom: "ip2"
  bottom: "label"
  top: "loss"
}
)";

// Our LeNet with the V1 file's weight decay spelled out: decay 1 on weights, 0 on biases.
pb::NetParameter ExpectedLeNet() {
  pb::NetParameter net = ReadNetText(kLeNet);
  for (auto& l : *net.mutable_layer()) {
    if (l.param_size() == 0) continue;
    EXPECT_EQ(l.param_size(), 2) << l.name();
    l.mutable_param(0)->set_decay_mult(1);
    l.mutable_param(1)->set_decay_mult(0);
  }
  return net;
}

// Empty when equal, else what differs, field by field.
std::string Differences(const gp::Message& a, const gp::Message& b) {
  std::string report;
  gp::util::MessageDifferencer d;
  d.ReportDifferencesToString(&report);
  return d.Compare(a, b) ? "" : report.empty() ? "differ" : report;
}

std::string WriteFile(const test::ScratchDir& dir, const std::string& name,
                      const std::string& text) {
  const std::string path = dir / name;
  std::ofstream(path) << text;
  return path;
}

// Collects glog lines that contain "upgraded on read".
class UpgradeLines : public google::LogSink {
 public:
  UpgradeLines() { google::AddLogSink(this); }
  ~UpgradeLines() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity, const char*, const char*, int, const google::LogMessageTime&,
            const char* message, size_t len) override {
    const std::string line(message, len);
    std::lock_guard<std::mutex> lock(mu_);
    if (line.find("upgraded on read") != std::string::npos) lines_.push_back(line);
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST(UpgradeV1, LeNetEqualsOurLeNetFieldByField) {
  test::ScratchDir dir("upgrade");
  const std::string path = WriteFile(dir, "lenet_v1.prototxt", kLeNetV1);
  UpgradeLines log;
  NetSource source;
  const pb::NetParameter upgraded = ReadNetText(path, &source);
  EXPECT_EQ(Differences(upgraded, ExpectedLeNet()), "");
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0], path + ": a V1 net (11 layers), upgraded on read; 'hogstream upgrade " +
                                path + "' writes the current format");
  // Messages about a layer point at its `layers` entry.
  EXPECT_EQ(source.Where("conv1"), path + ":28: ");
  EXPECT_EQ(source.Where("loss"), path + ":120: ");
}

TEST(UpgradeV1, BuildsTheSameBlobsAsOurLeNet) {
  for (pb::Phase phase : {pb::TRAIN, pb::TEST}) {
    NetOptions o;
    o.phase = phase;
    o.input_shapes["data"] = {64, 1, 28, 28};
    Net v1(ParseNetText(kLeNetV1, "lenet_v1"), o);
    Net current(ReadNetText(kLeNet), o);
    ASSERT_EQ(v1.layer_names(), current.layer_names());
    ASSERT_EQ(v1.blobs().size(), current.blobs().size());
    for (size_t i = 0; i < v1.blobs().size(); ++i)
      EXPECT_EQ(v1.blobs()[i]->shape(), current.blobs()[i]->shape()) << i;
    for (size_t i = 0; i < v1.layers().size(); ++i) {
      const auto& a = v1.layers()[i]->blobs();
      const auto& b = current.layers()[i]->blobs();
      ASSERT_EQ(a.size(), b.size()) << v1.layer_names()[i];
      for (size_t j = 0; j < a.size(); ++j)
        EXPECT_EQ(a[j]->shape(), b[j]->shape()) << v1.layer_names()[i] << " blob " << j;
    }
    EXPECT_EQ(v1.num_learnable(), 431080u);
  }
}

TEST(UpgradeV1, SharedNamesShareModesAndLossWeights) {
  const pb::NetParameter net = ParseNetText(R"(
    layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "y"
             param: "w" param: "b" blob_share_mode: PERMISSIVE blobs_lr: 3
             loss_weight: 0.5 exclude { stage: "deploy" }
             inner_product_param { num_output: 2 } })",
                                            "shared");
  ASSERT_EQ(net.layer_size(), 1);
  pb::LayerParameter want;
  ASSERT_TRUE(gp::TextFormat::ParseFromString(R"(
    name: "ip" type: "InnerProduct" bottom: "x" top: "y"
    param { name: "w" share_mode: PERMISSIVE lr_mult: 3 } param { name: "b" }
    loss_weight: 0.5 exclude { stage: "deploy" }
    inner_product_param { num_output: 2 })",
                                              &want));
  EXPECT_EQ(Differences(net.layer(0), want), "");
}

TEST(UpgradeV1, EveryTypeNameIsTheCurrentOne) {
  // Each V1 enum value has a current type name (the rest of hogstream knows most of them).
  const gp::EnumDescriptor* e = pb::V1LayerParameter::LayerType_descriptor();
  for (int i = 0; i < e->value_count(); ++i) {
    if (e->value(i)->number() == pb::V1LayerParameter::NONE) continue;
    pb::NetParameter net;
    net.add_layers()->set_type(static_cast<pb::V1LayerParameter::LayerType>(e->value(i)->number()));
    UpgradeNet(&net, [](int) { return std::string(); });
    ASSERT_EQ(net.layer_size(), 1);
    EXPECT_FALSE(net.layer(0).type().empty()) << e->value(i)->name();
  }
  pb::NetParameter net;
  net.add_layers()->set_type(pb::V1LayerParameter::SOFTMAX_LOSS);
  net.add_layers()->set_type(pb::V1LayerParameter::TANH);
  net.add_layers()->set_type(pb::V1LayerParameter::IMAGE_DATA);
  UpgradeNet(&net, [](int) { return std::string(); });
  EXPECT_EQ(net.layer(0).type(), "SoftmaxWithLoss");
  EXPECT_EQ(net.layer(1).type(), "TanH");
  EXPECT_EQ(net.layer(2).type(), "ImageData");
  // The data layers' own settings come along (image, HDF5, memory, window data; MVN).
  pb::NetParameter v1 = ParseNetText(R"(layers { name: "img" type: IMAGE_DATA top: "data" top: "label"
                                          image_data_param { source: "list.txt" batch_size: 5 new_height: 7 } }
                                        layers { name: "h5" type: HDF5_DATA top: "x" hdf5_data_param { source: "h5.txt" } }
                                        layers { name: "mvn" type: MVN bottom: "x" top: "y" mvn_param { eps: 0.5 } })",
                                     "v1.prototxt");
  ASSERT_EQ(v1.layer_size(), 3);
  EXPECT_EQ(v1.layer(0).image_data_param().source(), "list.txt");
  EXPECT_EQ(v1.layer(0).image_data_param().new_height(), 7u);
  EXPECT_EQ(v1.layer(1).type(), "HDF5Data");
  EXPECT_EQ(v1.layer(1).hdf5_data_param().source(), "h5.txt");
  EXPECT_EQ(v1.layer(2).type(), "MVN");
  EXPECT_FLOAT_EQ(v1.layer(2).mvn_param().eps(), 0.5f);
}

// A V0 net of 2013: padding as its own layer, flat settings, data settings on the layer.
const char kV0Net[] = R"(name: "v0"
input: "data"
input_dim: 2 input_dim: 3 input_dim: 8 input_dim: 8
layers {
  layer { name: "pad1" type: "padding" pad: 2 }
  bottom: "data"
  top: "pad1"
}
layers {
  layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 3 stride: 1
          weight_filler { type: "gaussian" std: 0.01 } blobs_lr: 1 blobs_lr: 2 }
  bottom: "pad1"
  top: "conv1"
}
layers {
  layer { name: "relu1" type: "relu" }
  bottom: "conv1"
  top: "conv1"
}
layers {
  layer { name: "pool1" type: "pool" pool: AVE kernelsize: 3 stride: 2 }
  bottom: "conv1"
  top: "pool1"
}
)";

TEST(UpgradeV0, PaddingLayerBecomesTheConvolutionsPad) {
  UpgradeLines log;
  NetSource source;
  const pb::NetParameter net = ParseNetText(kV0Net, "v0.prototxt", &source);
  ASSERT_EQ(net.layer_size(), 3);
  pb::LayerParameter conv;
  ASSERT_TRUE(gp::TextFormat::ParseFromString(R"(
    name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
    param { lr_mult: 1 } param { lr_mult: 2 }
    convolution_param { num_output: 4 pad: 2 kernel_size: 3 stride: 1
                        weight_filler { type: "gaussian" std: 0.01 } })",
                                              &conv));
  EXPECT_EQ(Differences(net.layer(0), conv), "");
  EXPECT_EQ(net.layer(1).type(), "ReLU");
  EXPECT_EQ(net.layer(2).pooling_param().pool(), pb::PoolingParameter::AVE);
  EXPECT_EQ(source.Where("conv1"), "v0.prototxt:9: ");
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_NE(log.lines()[0].find("a V0 net (4 layers)"), std::string::npos) << log.lines()[0];

  Net built(net, NetOptions());
  EXPECT_EQ(built.blob_by_name("conv1")->shape(), (std::vector<int>{2, 4, 10, 10}));
}

TEST(UpgradeV0, DataSettingsMoveToTheirParams) {
  const pb::NetParameter net = ParseNetText(R"(
    layers { layer { name: "d" type: "data" source: "train_lmdb" batchsize: 32 scale: 0.5
                     cropsize: 20 mirror: true meanfile: "mean.binaryproto" rand_skip: 7 }
             top: "data" top: "label" }
    layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.3 } bottom: "data" top: "data" }
    layers { layer { name: "norm" type: "lrn" local_size: 3 alpha: 0.1 beta: 0.5 }
             bottom: "data" top: "norm" }
    layers { layer { name: "cat" type: "concat" concat_dim: 0 }
             bottom: "norm" bottom: "data" top: "cat" })",
                                            "v0_data");
  pb::NetParameter want;
  ASSERT_TRUE(gp::TextFormat::ParseFromString(R"(
    layer { name: "d" type: "Data" top: "data" top: "label"
            data_param { source: "train_lmdb" batch_size: 32 rand_skip: 7 }
            transform_param { scale: 0.5 crop_size: 20 mirror: true mean_file: "mean.binaryproto" } }
    layer { name: "drop" type: "Dropout" bottom: "data" top: "data"
            dropout_param { dropout_ratio: 0.3 } }
    layer { name: "norm" type: "LRN" bottom: "data" top: "norm"
            lrn_param { local_size: 3 alpha: 0.1 beta: 0.5 } }
    layer { name: "cat" type: "Concat" bottom: "norm" bottom: "data" top: "cat"
            concat_param { concat_dim: 0 } })",
                                              &want));
  EXPECT_EQ(Differences(net, want), "");
}

TEST(UpgradeV1, OldCaffemodelLoadsItsWeightsByName) {
  NetOptions o;
  o.input_shapes["data"] = {64, 1, 28, 28};
  Net net(ReadNetText(kLeNet), o);
  // What Caffe of 2014 saved: V1 layers, each blob in the legacy 4-d num/channels/height/width.
  pb::NetParameter old;
  old.set_name("LeNet");
  std::mt19937 rng(TestSeed());
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::map<std::string, std::vector<std::vector<float>>> values;
  for (size_t i = 0; i < net.layers().size(); ++i) {
    const pb::LayerParameter& lp = net.layers()[i]->layer_param();
    pb::V1LayerParameter* l = old.add_layers();
    l->set_name(lp.name());
    *l->mutable_bottom() = lp.bottom();
    *l->mutable_top() = lp.top();
    l->set_type(lp.type() == "Convolution"    ? pb::V1LayerParameter::CONVOLUTION
                : lp.type() == "InnerProduct" ? pb::V1LayerParameter::INNER_PRODUCT
                : lp.type() == "ReLU"         ? pb::V1LayerParameter::RELU
                : lp.type() == "Pooling"      ? pb::V1LayerParameter::POOLING
                : lp.type() == "Data"         ? pb::V1LayerParameter::DATA
                                              : pb::V1LayerParameter::SOFTMAX_LOSS);
    for (const auto& blob : net.layers()[i]->blobs()) {
      std::vector<int> legacy(4 - blob->num_axes(), 1);
      legacy.insert(legacy.end(), blob->shape().begin(), blob->shape().end());
      pb::BlobProto* b = l->add_blobs();
      b->set_num(legacy[0]);
      b->set_channels(legacy[1]);
      b->set_height(legacy[2]);
      b->set_width(legacy[3]);
      std::vector<float> v(blob->count());
      for (float& x : v) x = uniform(rng);
      for (float x : v) b->add_data(x);
      values[lp.name()].push_back(v);
    }
  }
  ASSERT_EQ(values.size(), 4u);
  test::ScratchDir dir("upgrade");
  const std::string path = dir / "lenet_v1.caffemodel";
  WriteBinaryProtoAtomic(path, old);
  UpgradeLines log;
  net.CopyTrainedLayersFromFiles(path);
  EXPECT_EQ(log.lines().size(), 1u);
  for (const auto& [name, blobs] : values) {
    const auto& got = net.layer_by_name(name)->blobs();
    ASSERT_EQ(got.size(), blobs.size()) << name;
    for (size_t b = 0; b < blobs.size(); ++b)
      for (int k = 0; k < got[b]->count(); ++k)
        ASSERT_EQ(got[b]->cpu_data()[k], blobs[b][k]) << name << " blob " << b << " [" << k << "]";
  }
}

// One line naming the file, for each mistake an old file can hold.
TEST(UpgradeErrors, AreOneLineAndNameTheFile) {
  auto one_line = [](const std::string& text) {
    const std::string e = ErrorOf([&] { ParseNetText(text, "old.prototxt"); });
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.rfind("old.prototxt:", 0), 0u) << e;
    return e;
  };
  // A V1 type that never existed: the parser names the value.
  std::string e = one_line("layers { name: \"x\"\n type: FROBNICATE }");
  EXPECT_NE(e.find("old.prototxt:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("FROBNICATE"), std::string::npos) << e;
  // Both formats in one file.
  e = one_line(R"(layer { name: "a" type: "ReLU" bottom: "x" top: "x" }
layers { name: "b" type: RELU bottom: "x" top: "x" })");
  EXPECT_NE(e.find("old.prototxt:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("mixes"), std::string::npos) << e;
  // A V1 setting no layer of ours reads.
  e = one_line("layers { name: \"img\" type: IMAGE_DATA\n frobnicate_param { source: \"x\" } }");
  EXPECT_NE(e.find("old.prototxt:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("frobnicate_param"), std::string::npos) << e;
  // A V1 layer without its type.
  e = one_line("\nlayers { name: \"t\" }");
  EXPECT_NE(e.find("old.prototxt:2: V1 layer 't' has no type"), std::string::npos) << e;
  // V0: an unknown type, a setting its type does not take, padding feeding a non-convolution.
  e = one_line("layers { layer { name: \"z\" type: \"zap\" } }");
  EXPECT_NE(e.find("unknown type 'zap'"), std::string::npos) << e;
  e = one_line("layers { layer { name: \"r\" type: \"relu\" kernelsize: 3 } }");
  EXPECT_NE(e.find("'kernelsize'"), std::string::npos) << e;
  e = one_line(R"(layers { layer { name: "p" type: "padding" pad: 1 } bottom: "x" top: "px" }
layers { layer { name: "r" type: "relu" } bottom: "px" top: "y" })");
  EXPECT_NE(e.find("old.prototxt:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("padding layer 'p'"), std::string::npos) << e;
}

TEST(UpgradeSolver, SolverTypeAndInlineNetsAreUpgraded) {
  test::ScratchDir dir("upgrade");
  const std::string path = WriteFile(dir, "solver.prototxt", R"(
    net_param { layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "y" blobs_lr: 2
                         inner_product_param { num_output: 2 } } }
    base_lr: 0.1 max_iter: 10 solver_type: ADAM)");
  // Read for training: the inline net is upgraded, solver_type is left to CreateSolver.
  const pb::SolverParameter read = ReadSolverText(path);
  ASSERT_EQ(read.net_param().layer_size(), 1);
  EXPECT_EQ(read.net_param().layers_size(), 0);
  EXPECT_EQ(read.net_param().layer(0).param(0).lr_mult(), 2);
  // Written by `hogstream upgrade`: type, not solver_type.
  const UpgradedFile u = UpgradeFile(path);
  pb::SolverParameter written;
  ASSERT_TRUE(gp::TextFormat::ParseFromString(u.text, &written)) << u.text;
  EXPECT_EQ(written.type(), "Adam");
  EXPECT_FALSE(written.has_solver_type());
  EXPECT_EQ(Differences(written.net_param(), read.net_param()), "");
  EXPECT_NE(u.summary.find("solver_type became type: \"Adam\""), std::string::npos) << u.summary;
  // Both spellings: one line.
  const std::string both = WriteFile(dir, "both.prototxt", "type: \"SGD\" solver_type: ADAM");
  EXPECT_NE(ErrorOf([&] { UpgradeFile(both); }).find("both solver_type"), std::string::npos);
}

TEST(UpgradeCommand, WritesTheCurrentFormat) {
  test::ScratchDir dir("upgrade");
  const std::string v1 = WriteFile(dir, "lenet_v1.prototxt", kLeNetV1);
  const std::string out = dir / "lenet.prototxt";
  test::Finished r = test::RunProgram(HS_HOGSTREAM_BIN, {"upgrade", v1, out}, dir, 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Differences(ReadNetText(out), ExpectedLeNet()), "");
  EXPECT_NE(r.err.find("a V1 net (11 layers) upgraded"), std::string::npos) << r.err;
  // Without OUT: the text on stdout, the same net.
  r = test::RunProgram(HS_HOGSTREAM_BIN, {"upgrade", v1}, dir, 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Differences(ParseNetText(r.out, "stdout"), ExpectedLeNet()), "");
  // Errors: one line, exit status 1.
  const std::string bad = WriteFile(dir, "bad.prototxt", "layers { name: \"x\" type: FROBNICATE }");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"upgrade", bad}, {"upgrade"}, {"upgrade", dir / "missing"}}) {
    r = test::RunProgram(HS_HOGSTREAM_BIN, args, dir, 60);
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_EQ(r.last_line().rfind("hogstream: ", 0), 0u) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hogstream

// Every GPU layer twin against its CPU layer (Caffe's CPU/GPU twin tests, in one table): the
// same parameters and fresh random bottoms and top gradients on both sides, then the tops, the
// loss, the bottom gradients and the accumulated parameter gradients compared within a stated
// bound, |gpu - cpu| <= tol * max(1, max |cpu|) per array. The GPU side must really run on the
// device: its layer is the registered twin (not the CPU class) and its top is left on the GPU.
// Skips without a GPU; on CUDA builds the table's twins must all be registered.
#include <gtest/gtest.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/context.hpp"
#include "core/device_api.hpp"
#include "core/net.hpp"
#include "core/gpu_engine.hpp"
#include "core/layer.hpp"
#include "core/layers/batch_norm_layer.hpp"
#include "core/solver.hpp"
#include "core/synced_memory.hpp"
#include "test/core/gradient_checker.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

struct GpuCase {
  const char* name;
  const char* layer;                     // LayerParameter text
  std::vector<std::vector<int>> bottoms;
  int label_classes = 0;                 // > 0: the last bottom holds labels in [0, classes)
  float tol = 1e-4f;
  bool on_device = true;                 // false: the twin's forward makes nothing on the device
                                         // (a fallback case, or Split, whose tops share the bottom)
  bool backward = true;                  // false: a metric (no gradient to compare)
};

// gtest names a case by its name (not its bytes) in listings and failures.
void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

std::vector<GpuCase> Cases() {
  return {
      {"relu", R"(type: "ReLU")", {{2, 3, 5, 7}}},
      {"leaky_relu", R"(type: "ReLU" relu_param { negative_slope: 0.1 })", {{2, 3, 5, 7}}},
      {"sigmoid", R"(type: "Sigmoid")", {{4, 33}}},
      {"tanh", R"(type: "TanH")", {{4, 33}}},
      {"dropout_test_phase", R"(type: "Dropout" phase: TEST dropout_param { dropout_ratio: 0.3 })", {{3, 17}}},
      {"inner_product", R"(type: "InnerProduct" inner_product_param { num_output: 7
          weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" } })", {{4, 3, 5, 5}}},
      {"inner_product_transposed", R"(type: "InnerProduct" inner_product_param { num_output: 9 transpose: true
          weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } })", {{6, 31}}},
      {"inner_product_no_bias", R"(type: "InnerProduct" inner_product_param { num_output: 5 bias_term: false
          weight_filler { type: "xavier" } })", {{130, 40}}},
      {"softmax", R"(type: "Softmax")", {{3, 5, 4, 2}}},
      {"softmax_axis2", R"(type: "Softmax" softmax_param { axis: 2 })", {{3, 5, 4, 2}}},
      {"softmax_loss", R"(type: "SoftmaxWithLoss")", {{16, 10}, {16}}, 10},
      {"softmax_loss_spatial_ignore", R"(type: "SoftmaxWithLoss" loss_param { ignore_label: 2 })",
       {{3, 5, 4, 2}, {3, 4, 2}}, 5},
      {"softmax_loss_full", R"(type: "SoftmaxWithLoss" loss_param { normalization: FULL ignore_label: 1 })",
       {{3, 5, 4, 2}, {3, 4, 2}}, 5},
      {"softmax_loss_batch", R"(type: "SoftmaxWithLoss" loss_param { normalization: BATCH_SIZE })",
       {{3, 5, 4, 2}, {3, 4, 2}}, 5},
      {"softmax_loss_none_prob_top", R"(type: "SoftmaxWithLoss" top: "loss" top: "prob"
          loss_param { normalization: NONE })", {{8, 6}, {8}}, 6},
      {"euclidean_loss", R"(type: "EuclideanLoss")", {{4, 3, 2}, {4, 6}}},
      {"sigmoid_ce_loss", R"(type: "SigmoidCrossEntropyLoss")", {{4, 6}, {4, 6}}, 2},
      {"sigmoid_ce_loss_ignore_valid", R"(type: "SigmoidCrossEntropyLoss"
          loss_param { ignore_label: 1 normalization: VALID })", {{5, 7}, {5, 7}}, 2},
      {"max_pool_ceil", R"(type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 })", {{2, 3, 9, 10}}},
      {"max_pool_pad_mask", R"(type: "Pooling" top: "y" top: "mask"
          pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 })", {{2, 3, 8, 7}}},
      {"max_pool_2x2", R"(type: "Pooling" pooling_param { pool: MAX kernel_size: 2 stride: 2 })", {{2, 4, 12, 12}}},
      {"ave_pool_pad", R"(type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 })", {{2, 3, 9, 8}}},
      {"ave_pool_global", R"(type: "Pooling" pooling_param { pool: AVE global_pooling: true })", {{2, 5, 6, 7}}},
      {"ave_pool_rect", R"(type: "Pooling" pooling_param { pool: AVE kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 2 })",
       {{1, 2, 7, 9}}},
      {"conv3x3", R"(type: "Convolution" convolution_param { num_output: 6 kernel_size: 3 pad: 1
          weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } })", {{2, 4, 9, 8}}, 0, 2e-4f},
      {"conv_stride_dilation", R"(type: "Convolution" convolution_param { num_output: 5 kernel_size: 3
          stride: 2 dilation: 2 pad: 2 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } })",
       {{2, 3, 11, 12}}, 0, 2e-4f},
      {"conv_group", R"(type: "Convolution" convolution_param { num_output: 8 kernel_size: 3 group: 2
          weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } })", {{2, 4, 7, 7}}, 0, 2e-4f},
      {"conv_1x1_no_bias", R"(type: "Convolution" convolution_param { num_output: 7 kernel_size: 1 bias_term: false
          weight_filler { type: "gaussian" } })", {{3, 5, 4, 6}}, 0, 2e-4f},
      {"conv_two_bottoms", R"(type: "Convolution" bottom: "a" bottom: "b" top: "c" top: "d"
          convolution_param { num_output: 4 kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1
          weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } })",
       {{2, 3, 8, 8}, {2, 3, 8, 8}}, 0, 2e-4f},
      {"split", R"(type: "Split" bottom: "x" top: "a" top: "b" top: "c")", {{2, 3, 4, 5}}, 0, 1e-5f, false},
      {"concat_channels", R"(type: "Concat" bottom: "a" bottom: "b" bottom: "c" top: "y")",
       {{2, 3, 4, 5}, {2, 1, 4, 5}, {2, 4, 4, 5}}},
      {"concat_axis2", R"(type: "Concat" bottom: "a" bottom: "b" top: "y" concat_param { axis: 2 })",
       {{2, 3, 4, 5}, {2, 3, 2, 5}}},
      {"eltwise_sum_coeff", R"(type: "Eltwise" bottom: "a" bottom: "b" bottom: "c" top: "y"
          eltwise_param { operation: SUM coeff: 0.5 coeff: -2 coeff: 1.5 })", {{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}}},
      {"eltwise_prod", R"(type: "Eltwise" bottom: "a" bottom: "b" bottom: "c" top: "y"
          eltwise_param { operation: PROD })", {{3, 17}, {3, 17}, {3, 17}}},
      {"eltwise_prod_unstable", R"(type: "Eltwise" bottom: "a" bottom: "b" top: "y"
          eltwise_param { operation: PROD stable_prod_grad: false })", {{3, 17}, {3, 17}}},
      {"eltwise_max", R"(type: "Eltwise" bottom: "a" bottom: "b" bottom: "c" top: "y"
          eltwise_param { operation: MAX })", {{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}}},
      {"lrn_across", R"(type: "LRN" lrn_param { local_size: 5 alpha: 0.3 beta: 0.75 k: 2 })", {{2, 7, 5, 4}}, 0, 2e-4f},
      {"lrn_within_falls_back", R"(type: "LRN" lrn_param { local_size: 3 norm_region: WITHIN_CHANNEL alpha: 0.3 })",
       {{2, 3, 5, 4}}, 0, 1e-5f, false},
      // BatchNorm's running sums are compared after the pass too (its blobs' data).
      {"batch_norm", R"(type: "BatchNorm")", {{4, 3, 5, 6}}, 0, 1e-4f},
      {"batch_norm_2d", R"(type: "BatchNorm" batch_norm_param { moving_average_fraction: 0.9 eps: 1e-3 })",
       {{32, 7}}, 0, 1e-4f},
      {"batch_norm_global_stats", R"(type: "BatchNorm" batch_norm_param { use_global_stats: true })",
       {{3, 4, 5, 5}}, 0, 1e-4f},
      {"scale_bias", R"(type: "Scale" scale_param { bias_term: true filler { type: "gaussian" }
          bias_filler { type: "gaussian" } })", {{2, 3, 4, 5}}},
      {"scale_axes_2_3", R"(type: "Scale" scale_param { axis: 2 num_axes: 2 filler { type: "gaussian" } })",
       {{2, 3, 4, 5}}},
      {"scale_by_bottom", R"(type: "Scale" bottom: "x" bottom: "s" top: "y" scale_param { axis: 0 })",
       {{2, 3, 4, 5}, {2, 3}}},
      {"accuracy_top2_per_class", R"(type: "Accuracy" top: "a" top: "per_class" accuracy_param { top_k: 2 })",
       {{64, 5}, {64}}, 5, 1e-6f, true, false},
      {"accuracy_spatial_ignore", R"(type: "Accuracy" accuracy_param { ignore_label: 1 })",
       {{3, 4, 2, 5}, {3, 2, 5}}, 4, 1e-6f, true, false},
  };
}

pb::LayerParameter Parse(const GpuCase& c) {
  pb::LayerParameter p;
  HS_CHECK(google::protobuf::TextFormat::ParseFromString(c.layer, &p)) << c.name;
  p.set_name(c.name);
  return p;
}

#ifdef HOGSTREAM_CUDA

float MaxAbs(const float* v, int n) {
  float m = 0.f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

void ExpectNear(const float* gpu, const float* cpu, int n, float tol, const std::string& what) {
  const float bound = tol * std::max(1.f, MaxAbs(cpu, n));
  int bad = 0;
  for (int i = 0; i < n && bad < 5; ++i)
    if (!(std::fabs(gpu[i] - cpu[i]) <= bound)) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i] << " (bound " << bound << ")";
      ++bad;
    }
}

struct Side {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Layer> layer;
  std::vector<std::unique_ptr<Blob>> bottom_store, top_store;
  Blobs bottoms, tops;
  float loss = 0;
};

class LayersGpu : public ::testing::TestWithParam<GpuCase> {
 protected:
  void SetUp() override {
    if (!GpuAvailable()) GTEST_SKIP() << "no GPU on this machine";
    setenv("HS_GPU_TF32", "0", 1);  // exact FMA convolutions: the bounds below are float32's
  }
};

TEST_P(LayersGpu, MatchesCpuTwin) {
  const GpuCase& c = GetParam();
  const pb::LayerParameter param = Parse(c);
  const int num_tops = std::max(1, param.top_size());
  std::mt19937 gen(::hogstream::TestSeed());
  const uint64_t seed = gen();
  Side side[2];  // 0: CPU, 1: GPU
  for (int s = 0; s < 2; ++s) {
    side[s].ctx = std::make_unique<Context>(s ? Mode::GPU : Mode::CPU, 0, seed);
    for (size_t b = 0; b < c.bottoms.size(); ++b) {
      side[s].bottom_store.push_back(std::make_unique<Blob>(c.bottoms[b]));
      side[s].bottoms.push_back(side[s].bottom_store.back().get());
    }
    for (int t = 0; t < num_tops; ++t) {
      side[s].top_store.push_back(std::make_unique<Blob>());
      side[s].tops.push_back(side[s].top_store.back().get());
    }
  }
  // Fresh inputs, the same on both sides.
  for (size_t b = 0; b < c.bottoms.size(); ++b) {
    Blob* cpu = side[0].bottoms[b];
    const bool labels = c.label_classes > 0 && b + 1 == c.bottoms.size();
    if (labels) {
      for (int i = 0; i < cpu->count(); ++i) cpu->mutable_cpu_data()[i] = static_cast<float>(gen() % c.label_classes);
    } else {
      test::FillGaussian(cpu, gen);
    }
    std::copy(cpu->cpu_data(), cpu->cpu_data() + cpu->count(), side[1].bottoms[b]->mutable_cpu_data());
  }
  std::vector<bool> down(c.bottoms.size(), true);
  if (c.label_classes > 0) down.back() = false;
  for (int s = 0; s < 2; ++s) {
    ContextScope scope(side[s].ctx.get());
    Side& d = side[s];
    d.layer = CreateLayer(param);
    d.layer->SetUp(d.bottoms, d.tops);
    if (s == 1) {
      // The twin, with the CPU layer's parameters.
      ASSERT_NE(typeid(*d.layer), typeid(*side[0].layer)) << c.name << ": no GPU twin was made";
      ASSERT_EQ(d.layer->blobs().size(), side[0].layer->blobs().size());
      for (size_t p = 0; p < d.layer->blobs().size(); ++p) {
        const Blob& from = *side[0].layer->blobs()[p];
        std::copy(from.cpu_data(), from.cpu_data() + from.count(), d.layer->blobs()[p]->mutable_cpu_data());
      }
    }
    d.loss = d.layer->Forward(d.bottoms, d.tops);
    if (s == 1 && c.on_device) {
      // Made on the device; a loss top has also been read back for the loss (Layer::Forward),
      // which leaves both copies fresh. A top made on the host would be HEAD_AT_CPU.
      const SyncedMemory::Head want = d.layer->loss(0) != 0.f ? SyncedMemory::SYNCED : SyncedMemory::HEAD_AT_GPU;
      EXPECT_EQ(d.tops[0]->data()->head(), want) << c.name << ": the top was made on the host";
    }
    // Top gradients: the loss weight for a loss top (set by SetUp), fresh values otherwise.
    for (int t = 0; t < num_tops; ++t) {
      if (d.layer->loss(t) != 0.f) continue;
      if (s == 0) {
        std::normal_distribution<float> nd;
        for (int i = 0; i < d.tops[t]->count(); ++i) d.tops[t]->mutable_cpu_diff()[i] = nd(gen);
      } else {
        const Blob& from = *side[0].tops[t];
        std::copy(from.cpu_diff(), from.cpu_diff() + from.count(), d.tops[t]->mutable_cpu_diff());
      }
    }
    if (c.backward) d.layer->Backward(d.tops, down, d.bottoms);
  }
  ContextScope scope(side[1].ctx.get());  // reads of GPU results wait on its stream
  EXPECT_NEAR(side[1].loss, side[0].loss, c.tol * std::max(1.f, std::fabs(side[0].loss))) << c.name;
  for (int t = 0; t < num_tops; ++t) {
    ASSERT_EQ(side[1].tops[t]->shape(), side[0].tops[t]->shape());
    ExpectNear(side[1].tops[t]->cpu_data(), side[0].tops[t]->cpu_data(), side[0].tops[t]->count(), c.tol,
               std::string(c.name) + " top " + std::to_string(t));
  }
  for (size_t p = 0; p < side[0].layer->blobs().size(); ++p) {  // (a BatchNorm's running sums change)
    const Blob& cpu = *side[0].layer->blobs()[p];
    ExpectNear(side[1].layer->blobs()[p]->cpu_data(), cpu.cpu_data(), cpu.count(), c.tol,
               std::string(c.name) + " param " + std::to_string(p));
  }
  if (!c.backward) return;
  for (size_t b = 0; b < c.bottoms.size(); ++b)
    if (down[b])
      ExpectNear(side[1].bottoms[b]->cpu_diff(), side[0].bottoms[b]->cpu_diff(), side[0].bottoms[b]->count(), c.tol,
                 std::string(c.name) + " bottom diff " + std::to_string(b));
  for (size_t p = 0; p < side[0].layer->blobs().size(); ++p) {
    if (!side[0].layer->param_propagate_down(static_cast<int>(p))) continue;  // (not learned)
    const Blob& cpu = *side[0].layer->blobs()[p];
    ASSERT_GT(cpu.asum_diff(), 0.f) << c.name << " param " << p << " got no gradient on the CPU";
    ExpectNear(side[1].layer->blobs()[p]->cpu_diff(), cpu.cpu_diff(), cpu.count(), c.tol,
               std::string(c.name) + " param diff " + std::to_string(p));
  }
}

INSTANTIATE_TEST_SUITE_P(Twins, LayersGpu, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<GpuCase>& i) { return std::string(i.param.name); });

// Dropout in TRAIN draws on the device: every output is 0 or x / (1 - ratio), about 1 - ratio
// of them kept, and the backward pass lets through exactly the kept ones, scaled alike.
TEST(LayersGpuDropout, TrainKeepsAboutOneMinusRatioAndBackwardUsesTheSameMask) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU on this machine";
  std::mt19937 gen(::hogstream::TestSeed());
  Context ctx(Mode::GPU, 0, gen());
  ContextScope scope(&ctx);
  pb::LayerParameter p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(name: "d" type: "Dropout" dropout_param { dropout_ratio: 0.3 })", &p));
  auto layer = CreateLayer(p);
  Blob x(std::vector<int>{64, 1000}), y;
  test::FillGaussian(&x, gen);
  layer->SetUp({&x}, {&y});
  for (int pass = 0; pass < 2; ++pass) {
    layer->Forward({&x}, {&y});
    std::normal_distribution<float> nd;
    for (int i = 0; i < y.count(); ++i) y.mutable_cpu_diff()[i] = nd(gen);
    layer->Backward({&y}, {true}, {&x});
    const float scale = 1.f / 0.7f;
    int kept = 0;
    for (int i = 0; i < x.count(); ++i) {
      const float out = y.cpu_data()[i], in = x.cpu_data()[i];
      const bool k = out != 0.f;
      kept += k;
      if (k) {
        ASSERT_NEAR(out, in * scale, 1e-5f * (1 + std::fabs(in)));
      }
      ASSERT_NEAR(x.cpu_diff()[i], k ? y.cpu_diff()[i] * scale : 0.f, 1e-5f * (1 + std::fabs(y.cpu_diff()[i])));
    }
    const double n = x.count(), mean = 0.7 * n, sd = std::sqrt(n * 0.7 * 0.3);
    EXPECT_NEAR(kept, mean, 6 * sd) << "pass " << pass;
  }
}

// A label out of range is the CPU layer's one-line Error on the GPU too.
TEST(LayersGpuLoss, LabelOutOfRangeIsTheCpuError) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU on this machine";
  for (const char* type : {"SoftmaxWithLoss", "Accuracy"}) {
  SCOPED_TRACE(type);
  pb::LayerParameter p;
  p.set_name("loss");
  p.set_type(type);
  std::string messages[2];
  for (int s = 0; s < 2; ++s) {
    Context ctx(s ? Mode::GPU : Mode::CPU, 0, 3);
    ContextScope scope(&ctx);
    Blob x(std::vector<int>{4, 3}), label(std::vector<int>{4}), loss;
    for (int i = 0; i < 4; ++i) label.mutable_cpu_data()[i] = i == 2 ? 7.f : 1.f;
    auto layer = CreateLayer(p);
    layer->SetUp({&x, &label}, {&loss});
    try {
      layer->Forward({&x, &label}, {&loss});
      ADD_FAILURE() << (s ? "GPU" : "CPU") << ": no error for label 7 of 3 classes";
    } catch (const Error& e) {
      messages[s] = e.what();
    }
  }
  EXPECT_FALSE(messages[0].empty());
  EXPECT_EQ(messages[1], messages[0]);
  }
}

// A whole solver in GPU mode against the same solver on the CPU: DummyData (the same draws on
// both, from the same seed), convolution, pooling, ReLU, inner products, a softmax loss and each
// update rule (SGD with momentum and decay, clipped too; Nesterov, AdaGrad, RMSProp, AdaDelta,
// Adam), 30 iterations, the update on the device (or, for private copies, on the host). The
// weights must follow the CPU's: this is what catches gradients left on the device, weights
// updated on the host but never uploaded, diffs not cleared between iterations, and a device
// rule that is not its host twin.
constexpr const char* kSgd = "base_lr: 0.01 momentum: 0.9";
constexpr const char* kSgdL1 = "base_lr: 0.01 momentum: 0.9 regularization_type: 'L1' iter_size: 2";
constexpr const char* kClipped = "base_lr: 0.01 momentum: 0.9 clip_gradients: 0.5";  // the device clips where the host does
struct SolverCase {
  const char* name;
  const char* extra;   // solver settings
  bool device_update;  // SolverOptions::device_update (plain training) or not (private copies)
  bool on_device;      // where the update must then be made (SGD only has a device kernel)
};
void PrintTo(const SolverCase& c, std::ostream* os) { *os << c.name; }

// A small conv net's solver with `extra` settings: 30 iterations from random_seed 11.
std::string SolverText(const char* extra) {
  return R"(
    net_param {
      layer { name: "data" type: "DummyData" top: "x" top: "label"
              dummy_data_param { shape { dim: 8 dim: 2 dim: 10 dim: 10 } shape { dim: 8 }
                                 data_filler { type: "gaussian" } data_filler { type: "constant" value: 3 } } }
      layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
              convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
      layer { name: "pool" type: "Pooling" bottom: "c" top: "p" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
      layer { name: "relu" type: "ReLU" bottom: "p" top: "p" }
      layer { name: "ip1" type: "InnerProduct" bottom: "p" top: "h"
              inner_product_param { num_output: 12 weight_filler { type: "xavier" } } }
      layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "s"
              inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
      layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" top: "loss" } }
    weight_decay: 0.001 lr_policy: "fixed" max_iter: 30 random_seed: 11
    snapshot_after_train: false
  )" + std::string(extra);
}

class SolverGpu : public ::testing::TestWithParam<SolverCase> {};

TEST_P(SolverGpu, TrainsLikeTheCpu) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU on this machine";
  setenv("HS_GPU_TF32", "0", 1);
  const SolverCase& sc = GetParam();
  const std::string text = SolverText(sc.extra);
  std::vector<float> weights[2];
  float loss[2][2];
  for (int s = 0; s < 2; ++s) {
    pb::SolverParameter param;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param));
    param.set_solver_mode(s ? pb::SolverParameter::GPU : pb::SolverParameter::CPU);
    Context ctx(s ? Mode::GPU : Mode::CPU, 0, 11);
    ContextScope scope(&ctx);
    SolverOptions o;
    o.log = false;
    o.device_update = sc.device_update;
    auto solver = CreateSolver(param, o);
    loss[s][0] = solver->net().ForwardBackward();
    solver->net().ClearParamDiffs();
    solver->Solve();
    if (s == 1) {
      // Where the last update was made: the device, or the host (its copy then the fresh one).
      const auto head = solver->net().learnable_params()[0]->data()->head();
      if (sc.on_device) {
        EXPECT_NE(head, SyncedMemory::HEAD_AT_CPU) << "the update was made on the host";
      } else {
        EXPECT_EQ(head, SyncedMemory::HEAD_AT_CPU) << "the update was not made on the host";
      }
    }
    loss[s][1] = solver->net().ForwardBackward();
    for (Blob* b : solver->net().learnable_params())
      weights[s].insert(weights[s].end(), b->cpu_data(), b->cpu_data() + b->count());
  }
  EXPECT_NEAR(loss[1][0], loss[0][0], 1e-4f * std::max(1.f, loss[0][0]));
  EXPECT_LT(loss[0][1], 0.5f * loss[0][0]) << "the CPU solver did not learn the constant label";
  EXPECT_NEAR(loss[1][1], loss[0][1], 1e-3f * std::max(1.f, loss[0][1]));
  ASSERT_EQ(weights[1].size(), weights[0].size());
  ExpectNear(weights[1].data(), weights[0].data(), static_cast<int>(weights[0].size()), 1e-3f, "weights after 30 iterations");
}

INSTANTIATE_TEST_SUITE_P(Updates, SolverGpu,
                         ::testing::Values(SolverCase{"device_l2", kSgd, true, true},
                                           SolverCase{"device_l1_iter_size_2", kSgdL1, true, true},
                                           SolverCase{"host_l2", kSgd, false, false},
                                           SolverCase{"device_clipped", kClipped, true, true},
                                           SolverCase{"nesterov", "type: 'Nesterov' base_lr: 0.01 momentum: 0.9", true, true},
                                           SolverCase{"adagrad", "type: 'AdaGrad' base_lr: 0.02 momentum: 0 delta: 1e-8", true, true},
                                           SolverCase{"rmsprop", "type: 'RMSProp' base_lr: 0.003 momentum: 0 rms_decay: 0.98 delta: 1e-8", true, true},
                                           SolverCase{"adadelta", "type: 'AdaDelta' base_lr: 1 momentum: 0.95 delta: 1e-6", true, true},
                                           SolverCase{"adam", "type: 'Adam' base_lr: 0.003 momentum: 0.9 momentum2: 0.999 delta: 1e-8", true, true}),
                         [](const ::testing::TestParamInfo<SolverCase>& i) { return std::string(i.param.name); });

// A GPU-mode net's weights in one device buffer (Net::UseDeviceParamBuffer, as gpus.bin's GPU
// segment streams them): every learnable blob's device memory is a view of the buffer at its
// offset, and a solver training over it follows the CPU solver as it does over per-blob memory.
TEST(SolverGpuFlatBuffer, TrainsOverOneDeviceBufferLikeTheCpu) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU on this machine";
  setenv("HS_GPU_TF32", "0", 1);
  std::vector<float> weights[2];
  for (int s = 0; s < 2; ++s) {
    pb::SolverParameter param;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(SolverText(kSgd), &param));
    param.set_solver_mode(s ? pb::SolverParameter::GPU : pb::SolverParameter::CPU);
    Context ctx(s ? Mode::GPU : Mode::CPU, 0, 11);
    ContextScope scope(&ctx);
    SolverOptions o;
    o.log = false;
    auto solver = CreateSolver(param, o);
    Net& net = solver->net();
    float* flat = nullptr;
    DeviceApi* api = LoadedDeviceApi();
    if (s == 1) {
      ASSERT_NE(api, nullptr) << "the GPU engine registers the device seam";
      const size_t bytes = net.param_buffer_size() * sizeof(float);
      flat = static_cast<float*>(api->Alloc(bytes));
      api->CopyAsync(flat, net.param_data(), bytes, CopyKind::kHostToDevice, api->CurrentStream());
      api->Synchronize(api->CurrentStream());
      net.UseDeviceParamBuffer(flat);
      for (size_t i = 0; i < net.learnable_params().size(); ++i)
        EXPECT_EQ(net.learnable_params()[i]->gpu_data(), flat + net.learnable_offsets()[i]) << "param " << i;
    }
    solver->Solve();
    if (s == 1) {  // (still views: nothing reallocated a blob's device memory)
      for (size_t i = 0; i < net.learnable_params().size(); ++i)
        EXPECT_EQ(net.learnable_params()[i]->gpu_data(), flat + net.learnable_offsets()[i]) << "param " << i << " after";
    }
    for (Blob* b : net.learnable_params()) weights[s].insert(weights[s].end(), b->cpu_data(), b->cpu_data() + b->count());
    solver.reset();
    if (flat) api->Free(flat);
  }
  ASSERT_EQ(weights[1].size(), weights[0].size());
  ExpectNear(weights[1].data(), weights[0].data(), static_cast<int>(weights[0].size()), 1e-3f, "weights after 30 iterations");
}

// BatchNorm with the Scale and ReLU the Net fuses into it (in place on one blob), in a small
// net on the GPU against the same net on the CPU: the loss, the accuracy, every parameter's
// gradient and the running sums after one forward and backward, with batch statistics and with
// stored ones.
class FusedBatchNormGpu : public ::testing::TestWithParam<const char*> {};

TEST_P(FusedBatchNormGpu, MatchesTheCpuNet) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU on this machine";
  setenv("HS_GPU_TF32", "0", 1);
  const std::string text = std::string(R"(
    layer { name: "data" type: "DummyData" top: "x" top: "label"
            dummy_data_param { shape { dim: 8 dim: 3 dim: 6 dim: 6 } shape { dim: 8 }
                               data_filler { type: "gaussian" } data_filler { type: "uniform" min: 0 max: 4.99 } } }
    layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
            convolution_param { num_output: 16 kernel_size: 3 weight_filler { type: "gaussian" std: 0.3 } } }
    layer { name: "bn" type: "BatchNorm" bottom: "c" top: "c" )") + GetParam() + R"( }
    layer { name: "sc" type: "Scale" bottom: "c" top: "c"
            scale_param { bias_term: true filler { type: "gaussian" } bias_filler { type: "gaussian" } } }
    layer { name: "relu" type: "ReLU" bottom: "c" top: "c" }
    layer { name: "ip" type: "InnerProduct" bottom: "c" top: "s"
            inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" top: "loss" }
    layer { name: "acc" type: "Accuracy" bottom: "s" bottom: "label" top: "acc" accuracy_param { top_k: 2 } })";
  pb::NetParameter np;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &np));
  const uint64_t seed = std::mt19937(::hogstream::TestSeed())();
  std::unique_ptr<Context> ctx[2];
  std::unique_ptr<Net> net[2];
  float loss[2];
  for (int s = 0; s < 2; ++s) {
    ctx[s] = std::make_unique<Context>(s ? Mode::GPU : Mode::CPU, 0, seed);
    ContextScope scope(ctx[s].get());
    net[s] = std::make_unique<Net>(np);
    auto* bn = dynamic_cast<BatchNormLayer*>(net[s]->layer_by_name("bn"));
    ASSERT_NE(bn, nullptr);
    EXPECT_TRUE(bn->fused()) << "the net fused the chain";
  }
  ASSERT_NE(typeid(*net[1]->layer_by_name("bn")), typeid(*net[0]->layer_by_name("bn"))) << "no GPU twin of BatchNorm";
  {  // running sums that stored statistics can use (a few passes' worth), then the CPU net's values in the GPU's
    std::mt19937 gen(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> u(0.5f, 2.f);
    Layer* l = net[0]->layer_by_name("bn");
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < l->blobs()[b]->count(); ++i) l->blobs()[b]->mutable_cpu_data()[i] = (b ? 3.f : 0.3f) * u(gen);
    l->blobs()[2]->mutable_cpu_data()[0] = 2.5f;
    ContextScope scope(ctx[1].get());
    for (size_t p = 0; p < net[1]->params().size(); ++p) {
      const Blob& from = *net[0]->params()[p];
      std::copy(from.cpu_data(), from.cpu_data() + from.count(), net[1]->params()[p]->mutable_cpu_data());
    }
  }
  for (int s = 0; s < 2; ++s) {
    ContextScope scope(ctx[s].get());
    net[s]->ClearParamDiffs();
    loss[s] = net[s]->ForwardBackward();
  }
  ContextScope scope(ctx[1].get());
  EXPECT_NEAR(loss[1], loss[0], 1e-4f * std::max(1.f, loss[0]));
  EXPECT_EQ(net[1]->blob_by_name("acc")->cpu_data()[0], net[0]->blob_by_name("acc")->cpu_data()[0]);
  for (size_t p = 0; p < net[0]->params().size(); ++p) {
    const Blob& cpu = *net[0]->params()[p];
    const Blob& gpu = *net[1]->params()[p];
    ExpectNear(gpu.cpu_data(), cpu.cpu_data(), cpu.count(), 1e-4f, "param " + std::to_string(p) + " data");
    ExpectNear(gpu.cpu_diff(), cpu.cpu_diff(), cpu.count(), 2e-4f, "param " + std::to_string(p) + " diff");
  }
}

INSTANTIATE_TEST_SUITE_P(Statistics, FusedBatchNormGpu,
                         ::testing::Values("", "batch_norm_param { use_global_stats: true }"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.index ? "stored" : "batch");
                         });

#endif  // HOGSTREAM_CUDA

// On every CUDA build (GPU or not): the table's twins are registered, so the GPU runs above
// cannot silently test CPU fallbacks. Without cuDNN, Convolution and LRN have none.
TEST(LayersGpuRegistry, EveryTwinInTheTableIsRegistered) {
#ifndef HOGSTREAM_CUDA
  GTEST_SKIP() << "built without CUDA (HOGSTREAM_CUDA off)";
#else
  LoadGpuEngine();
  const std::vector<std::string> twins = GpuLayerTypeList();
  for (const GpuCase& c : Cases()) {
    const std::string type = Parse(c).type();
#ifndef HOGSTREAM_CUDNN
    if (type == "Convolution" || type == "LRN") continue;
#endif
    EXPECT_NE(std::find(twins.begin(), twins.end(), type), twins.end()) << type << " has no GPU twin";
  }
#endif
}

}  // namespace
}  // namespace hogstream

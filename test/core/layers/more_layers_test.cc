// The rest of Caffe's layer list (Deconvolution, Im2col, SPP, Parameter, MVN, BatchReindex,
// Filter): forward values against each definition, written out directly, on fresh random
// inputs; numerical gradients of every bottom and learned blob that has one; Caffe's field
// numbers and defaults; and the settings and inputs that are refused.
#include "test/test_seed.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <string>

#include "core/layer.hpp"
#include "test/core/gradient_checker.hpp"
#include "test/error_of.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::LayerText;

class MoreLayers : public test::LayerTest {
 protected:
  // Distinct values 0.1 apart in random order: a max never changes under a 1e-2 step.
  Blob* Distinct(const std::vector<int>& shape) {
    Blob* b = Random(shape);
    std::vector<int> order(b->count());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), gen_);
    for (int i = 0; i < b->count(); ++i) b->mutable_cpu_data()[i] = 0.1f * order[i] - 3.f;
    return b;
  }
};

// ---------------------------------------------------------------- Deconvolution

struct DeconvCase {
  int n, c, h, w, out, kh, kw, pad, stride, dil, group;
  bool bias;
};

std::string DeconvText(const DeconvCase& k) {
  std::string t = "type: \"Deconvolution\" convolution_param { num_output: " + std::to_string(k.out) +
                  " kernel_h: " + std::to_string(k.kh) + " kernel_w: " + std::to_string(k.kw) +
                  " pad: " + std::to_string(k.pad) + " stride: " + std::to_string(k.stride) +
                  " dilation: " + std::to_string(k.dil) + " group: " + std::to_string(k.group) +
                  " bias_term: " + (k.bias ? "true" : "false") +
                  " weight_filler { type: \"gaussian\" std: 0.5 } bias_filler { type: \"gaussian\" } }";
  return t;
}

TEST_F(MoreLayers, DeconvolutionMatchesItsDefinition) {
  const DeconvCase cases[] = {{2, 3, 4, 5, 4, 3, 3, 0, 1, 1, 1, true},   // plain
                              {2, 2, 3, 3, 3, 4, 4, 1, 2, 1, 1, true},   // FCN's 2x upsampling
                              {1, 4, 3, 4, 6, 3, 2, 1, 2, 1, 2, true},   // group, rect kernel
                              {2, 2, 4, 4, 3, 3, 3, 2, 1, 2, 1, false},  // dilation
                              {2, 4, 3, 3, 2, 1, 1, 0, 1, 1, 2, true}};  // 1x1 grouped
  for (const DeconvCase& k : cases) {
    SCOPED_TRACE(DeconvText(k));
    Blob* x = Random({k.n, k.c, k.h, k.w});
    Blob* y = Empty();
    auto layer = CreateLayer(LayerText(DeconvText(k)));
    layer->SetUp({x}, {y});
    const int oh = k.stride * (k.h - 1) + k.dil * (k.kh - 1) + 1 - 2 * k.pad;
    const int ow = k.stride * (k.w - 1) + k.dil * (k.kw - 1) + 1 - 2 * k.pad;
    ASSERT_EQ(y->shape(), (std::vector<int>{k.n, k.out, oh, ow}));
    const Blob& w = *layer->blobs()[0];
    ASSERT_EQ(w.shape(), (std::vector<int>{k.c, k.out / k.group, k.kh, k.kw}));
    layer->Forward({x}, {y});
    // Each input pixel scatters its kernel onto the output, stride apart.
    std::vector<double> ref(y->count(), 0.0);
    const int cin_g = k.c / k.group, cout_g = k.out / k.group;
    for (int n = 0; n < k.n; ++n)
      for (int ci = 0; ci < k.c; ++ci)
        for (int i = 0; i < k.h; ++i)
          for (int j = 0; j < k.w; ++j)
            for (int oc = 0; oc < cout_g; ++oc)
              for (int p = 0; p < k.kh; ++p)
                for (int q = 0; q < k.kw; ++q) {
                  const int r = i * k.stride - k.pad + p * k.dil, c = j * k.stride - k.pad + q * k.dil;
                  if (r < 0 || r >= oh || c < 0 || c >= ow) continue;
                  const int o = ci / cin_g * cout_g + oc;
                  ref[y->offset(n, o, r, c)] +=
                      double{x->cpu_data()[x->offset(n, ci, i, j)]} * w.cpu_data()[w.offset(ci, oc, p, q)];
                }
    for (int i = 0; i < y->count(); ++i) {
      const double b = k.bias ? layer->blobs()[1]->cpu_data()[i / (oh * ow) % k.out] : 0.0;
      ASSERT_NEAR(y->cpu_data()[i], ref[i] + b, 1e-4 * std::max(1.0, std::fabs(ref[i]))) << i;
    }
    test::GradientCheck opt;
    opt.step = 1.f;  // linear in input, weights and bias: a central difference is exact
    test::CheckGradients(layer.get(), {x}, {y}, opt);
  }
}

TEST_F(MoreLayers, DeconvolutionRefusesWhatCaffeRefuses) {
  Blob* x = Random({1, 2, 1, 1});
  Blob* y = Empty();
  std::string e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Deconvolution" convolution_param { kernel_size: 3 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("num_output must be > 0"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 1 pad: 1 })"))
        ->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("give an output of"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Deconvolution" convolution_param { num_output: 3 group: 2 kernel_size: 1 })"))
        ->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("group 2 must divide"), std::string::npos) << e;
}

// ---------------------------------------------------------------- Im2col

TEST_F(MoreLayers, Im2colLaysOutEachKernelOffsetAsARow) {
  for (const char* text :
       {R"(type: "Im2col" convolution_param { kernel_size: 3 })",
        R"(type: "Im2col" convolution_param { kernel_h: 2 kernel_w: 3 pad: 1 stride: 2 })",
        R"(type: "Im2col" convolution_param { kernel_size: 2 dilation: 2 pad_h: 1 pad_w: 0 })"}) {
    SCOPED_TRACE(text);
    Blob* x = Random({2, 3, 5, 6});
    Blob* y = Empty();
    auto layer = CreateLayer(LayerText(text));
    layer->SetUp({x}, {y});
    layer->Forward({x}, {y});
    const pb::LayerParameter lp = LayerText(text);
    const auto& cp = lp.convolution_param();
    const int kh = cp.has_kernel_h() ? cp.kernel_h() : cp.kernel_size(0);
    const int kw = cp.has_kernel_w() ? cp.kernel_w() : cp.kernel_size(0);
    const int ph = cp.has_pad_h() ? cp.pad_h() : (cp.pad_size() ? cp.pad(0) : 0);
    const int pw = cp.has_pad_w() ? cp.pad_w() : (cp.pad_size() ? cp.pad(0) : 0);
    const int s = cp.stride_size() ? cp.stride(0) : 1, d = cp.dilation_size() ? cp.dilation(0) : 1;
    const int oh = (5 + 2 * ph - (d * (kh - 1) + 1)) / s + 1, ow = (6 + 2 * pw - (d * (kw - 1) + 1)) / s + 1;
    ASSERT_EQ(y->shape(), (std::vector<int>{2, 3 * kh * kw, oh, ow}));
    for (int n = 0; n < 2; ++n)
      for (int c = 0; c < 3; ++c)
        for (int p = 0; p < kh; ++p)
          for (int q = 0; q < kw; ++q)
            for (int i = 0; i < oh; ++i)
              for (int j = 0; j < ow; ++j) {
                const int r = i * s - ph + p * d, col = j * s - pw + q * d;
                const float want = r >= 0 && r < 5 && col >= 0 && col < 6 ? x->cpu_data()[x->offset(n, c, r, col)] : 0.f;
                ASSERT_EQ(y->cpu_data()[y->offset(n, (c * kh + p) * kw + q, i, j)], want);
              }
    test::GradientCheck opt;
    opt.step = 1.f;
    test::CheckGradients(layer.get(), {x}, {y}, opt);
  }
}

// ---------------------------------------------------------------- SPP

// Level `bins` of the pyramid at (n, c), by the definition: bin (i, j) covers rows
// [i k - pad, i k - pad + k) of the input (k = ceil(H / bins), pad = (k bins - H + 1) / 2),
// clipped; AVE divides by the window clipped to the padded input, as Caffe's pooling does.
std::vector<float> SppLevel(const Blob& x, int n, int c, int bins, bool ave) {
  const int H = x.shape(2), W = x.shape(3);
  const int kh = (H + bins - 1) / bins, kw = (W + bins - 1) / bins;
  const int ph = (kh * bins - H + 1) / 2, pw = (kw * bins - W + 1) / 2;
  std::vector<float> out;
  for (int i = 0; i < bins; ++i)
    for (int j = 0; j < bins; ++j) {
      const int r0 = i * kh - ph, c0 = j * kw - pw;
      const int r1 = std::min(r0 + kh, H + ph), c1 = std::min(c0 + kw, W + pw);
      const int size = (r1 - r0) * (c1 - c0);
      float best = -FLT_MAX;
      double sum = 0;
      for (int r = std::max(r0, 0); r < std::min(r1, H); ++r)
        for (int q = std::max(c0, 0); q < std::min(c1, W); ++q) {
          best = std::max(best, x.cpu_data()[x.offset(n, c, r, q)]);
          sum += x.cpu_data()[x.offset(n, c, r, q)];
        }
      out.push_back(ave ? static_cast<float>(sum / size) : best);
    }
  return out;
}

TEST_F(MoreLayers, SppConcatenatesEveryLevelOfThePyramid) {
  for (const bool ave : {false, true}) {
    for (const std::vector<int>& shape : {std::vector<int>{2, 3, 13, 11}, std::vector<int>{1, 2, 8, 8}}) {
      const std::string text =
          std::string("type: \"SPP\" spp_param { pyramid_height: 3 pool: ") + (ave ? "AVE" : "MAX") + " }";
      SCOPED_TRACE(text + " on " + std::to_string(shape[2]) + "x" + std::to_string(shape[3]));
      Blob* x = Distinct(shape);
      Blob* y = Empty();
      auto layer = CreateLayer(LayerText(text));
      layer->SetUp({x}, {y});
      ASSERT_EQ(y->shape(), (std::vector<int>{shape[0], shape[1] * (1 + 4 + 16)}));
      layer->Forward({x}, {y});
      for (int n = 0; n < shape[0]; ++n) {
        int at = 0;
        for (int bins = 1; bins <= 4; bins *= 2)
          for (int c = 0; c < shape[1]; ++c)
            for (float v : SppLevel(*x, n, c, bins, ave))
              ASSERT_NEAR(y->cpu_data()[n * y->shape(1) + at++], v, 1e-5 * std::max(1.f, std::fabs(v)))
                  << "bins " << bins << " c " << c;
      }
      test::CheckGradients(layer.get(), {x}, {y});
    }
  }
}

TEST_F(MoreLayers, SppFollowsTheInputSizeAndKeepsCaffesShapeForOneLevel) {
  Blob* x = Distinct({2, 3, 9, 7});
  Blob* y = Empty();
  auto one = CreateLayer(LayerText(R"(type: "SPP" spp_param { pyramid_height: 1 })"));
  one->SetUp({x}, {y});
  EXPECT_EQ(y->shape(), (std::vector<int>{2, 3, 1, 1}));
  one->Forward({x}, {y});
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(y->cpu_data()[n * 3 + c], SppLevel(*x, n, c, 1, false)[0]);
  auto two = CreateLayer(LayerText(R"(type: "SPP" spp_param { pyramid_height: 2 })"));
  two->SetUp({x}, {y});
  x->Reshape({2, 3, 6, 10});
  test::FillGaussian(x, gen_);
  two->Forward({x}, {y});
  ASSERT_EQ(y->shape(), (std::vector<int>{2, 15}));
  for (int c = 0; c < 3; ++c) {
    const std::vector<float> l1 = SppLevel(*x, 1, c, 2, false);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(y->cpu_data()[15 + 3 + c * 4 + b], l1[b]);
  }
  std::string e = ErrorOf([&] { CreateLayer(LayerText(R"(type: "SPP")"))->SetUp({x}, {y}); });
  EXPECT_NE(e.find("pyramid_height must be given"), std::string::npos) << e;
  Blob* tiny = Random({1, 1, 1, 1});
  e = ErrorOf([&] { CreateLayer(LayerText(R"(type: "SPP" spp_param { pyramid_height: 2 })"))->SetUp({tiny}, {y}); });
  EXPECT_NE(e.find("too small for 2 pyramid levels"), std::string::npos) << e;
}

// ---------------------------------------------------------------- Parameter

TEST_F(MoreLayers, ParameterIsALearnedBlobAsTheTop) {
  Blob* y = Empty();
  auto layer = CreateLayer(LayerText(R"(type: "Parameter" parameter_param { shape { dim: 2 dim: 3 } })"));
  layer->SetUp({}, {y});
  ASSERT_EQ(layer->blobs().size(), 1u);
  ASSERT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(layer->blobs()[0]->cpu_data()[i], 0.f) << "Caffe starts it at zero";
  test::FillGaussian(layer->blobs()[0].get(), gen_);
  layer->Forward({}, {y});
  ASSERT_EQ(y->shape(), (std::vector<int>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y->cpu_data()[i], layer->blobs()[0]->cpu_data()[i]);
  test::CheckGradients(layer.get(), {}, {y});
  // Gradients accumulate, like every parameter's (iter_size).
  float* g = layer->blobs()[0]->mutable_cpu_diff();
  std::fill_n(g, 6, 1.f);
  test::FillGaussian(y, gen_);
  for (int i = 0; i < 6; ++i) y->mutable_cpu_diff()[i] = static_cast<float>(i);
  layer->Backward({y}, {}, {});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(layer->blobs()[0]->cpu_diff()[i], 1.f + i);
  std::string e = ErrorOf([&] { CreateLayer(LayerText(R"(type: "Parameter")"))->SetUp({}, {y}); });
  EXPECT_NE(e.find("parameter_param { shape"), std::string::npos) << e;
}

// ---------------------------------------------------------------- MVN

TEST_F(MoreLayers, MvnNormalisesEachGroupByItsMeanAndDeviation) {
  for (const char* text : {R"(type: "MVN")", R"(type: "MVN" mvn_param { across_channels: true })",
                           R"(type: "MVN" mvn_param { normalize_variance: false })",
                           R"(type: "MVN" mvn_param { across_channels: true normalize_variance: false eps: 0.5 })"}) {
    SCOPED_TRACE(text);
    const auto p = LayerText(text).mvn_param();
    Blob* x = Random({2, 3, 4, 5});
    for (int i = 0; i < x->count(); ++i) x->mutable_cpu_data()[i] = 2.f * x->cpu_data()[i] + 1.5f;
    Blob* y = Empty();
    auto layer = CreateLayer(LayerText(text));
    layer->SetUp({x}, {y});
    layer->Forward({x}, {y});
    const int groups = p.across_channels() ? 2 : 6, dim = x->count() / groups;
    for (int g = 0; g < groups; ++g) {
      double mean = 0, var = 0;
      for (int i = 0; i < dim; ++i) mean += x->cpu_data()[g * dim + i];
      mean /= dim;
      for (int i = 0; i < dim; ++i) var += std::pow(x->cpu_data()[g * dim + i] - mean, 2);
      var /= dim;
      const double div = p.normalize_variance() ? std::sqrt(var) + p.eps() : 1.0;
      for (int i = 0; i < dim; ++i)
        ASSERT_NEAR(y->cpu_data()[g * dim + i], (x->cpu_data()[g * dim + i] - mean) / div, 1e-5);
    }
    test::GradientCheck opt;
    opt.step = 1e-2f;
    test::CheckGradients(layer.get(), {x}, {y}, opt);
  }
}

// ---------------------------------------------------------------- BatchReindex

TEST_F(MoreLayers, BatchReindexGathersItemsAndSumsTheirGradients) {
  Blob* x = Random({4, 2, 3});
  Blob* idx = Random({5});
  const float order[] = {3, 0, 3, 1, 3};  // repeats, and item 2 left out
  std::copy(order, order + 5, idx->mutable_cpu_data());
  Blob* y = Empty();
  auto layer = CreateLayer(LayerText(R"(type: "BatchReindex")"));
  layer->SetUp({x, idx}, {y});
  ASSERT_EQ(y->shape(), (std::vector<int>{5, 2, 3}));
  layer->Forward({x, idx}, {y});
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(y->cpu_data()[i * 6 + j], x->cpu_data()[static_cast<int>(order[i]) * 6 + j]);
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(layer.get(), {x, idx}, {y}, opt);
  std::string e = ErrorOf([&] { layer->Backward({y}, {true, true}, {x, idx}); });
  EXPECT_NE(e.find("no gradient flows to the indices"), std::string::npos) << e;
  idx->mutable_cpu_data()[2] = 4;
  e = ErrorOf([&] { layer->Forward({x, idx}, {y}); });
  EXPECT_NE(e.find("index 4 at position 2 is not an item"), std::string::npos) << e;
  idx->mutable_cpu_data()[2] = 1.5f;
  e = ErrorOf([&] { layer->Forward({x, idx}, {y}); });
  EXPECT_NE(e.find("index 1.5"), std::string::npos) << e;
}

// ---------------------------------------------------------------- Filter

TEST_F(MoreLayers, FilterKeepsTheSelectedItemsOfEveryBottom) {
  Blob* a = Random({5, 3});
  Blob* b = Random({5, 2, 2});
  Blob* sel = Random({5, 1});
  const float keep[] = {1, 0, 1, 1, 0};
  std::copy(keep, keep + 5, sel->mutable_cpu_data());
  Blob* ya = Empty();
  Blob* yb = Empty();
  auto layer = CreateLayer(LayerText(R"(type: "Filter")"));
  layer->SetUp({a, b, sel}, {ya, yb});
  ASSERT_EQ(ya->shape(), (std::vector<int>{3, 3}));
  ASSERT_EQ(yb->shape(), (std::vector<int>{3, 2, 2}));
  layer->Forward({a, b, sel}, {ya, yb});
  const int kept[] = {0, 2, 3};
  for (int k = 0; k < 3; ++k) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(ya->cpu_data()[k * 3 + j], a->cpu_data()[kept[k] * 3 + j]);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(yb->cpu_data()[k * 4 + j], b->cpu_data()[kept[k] * 4 + j]);
  }
  test::GradientCheck opt;
  opt.check_bottoms = {0, 1};
  test::CheckGradients(layer.get(), {a, b, sel}, {ya, yb}, opt);
  // The selection follows the selector on every pass; none selected is an empty top.
  std::fill_n(sel->mutable_cpu_data(), 5, 0.f);
  layer->Forward({a, b, sel}, {ya, yb});
  EXPECT_EQ(ya->shape(), (std::vector<int>{0, 3}));
  std::string e = ErrorOf([&] { layer->Backward({ya, yb}, {true, true, true}, {a, b, sel}); });
  EXPECT_NE(e.find("no gradient flows to the selector"), std::string::npos) << e;
  Blob* short_sel = Random({4});
  e = ErrorOf([&] { layer->Forward({a, b, short_sel}, {ya, yb}); });
  EXPECT_NE(e.find("but the selector 4 items"), std::string::npos) << e;
  e = ErrorOf([&] { CreateLayer(LayerText(R"(type: "Filter")"))->SetUp({a, b, sel}, {ya}); });
  EXPECT_NE(e.find("one top per bottom but the last"), std::string::npos) << e;
}

// ---------------------------------------------------------------- proto: Caffe's schema

TEST(MoreLayerParams, FieldNumbersAndDefaultsAreCaffes) {
  const auto* d = pb::LayerParameter::descriptor();
  const std::pair<const char*, int> fields[] = {
      {"hdf5_data_param", 112},   {"hdf5_output_param", 113}, {"image_data_param", 115},
      {"memory_data_param", 119}, {"mvn_param", 120},         {"parameter_param", 145},
      {"recurrent_param", 146},   {"spp_param", 132},         {"window_data_param", 129}};
  for (const auto& [name, number] : fields) {
    ASSERT_NE(d->FindFieldByName(name), nullptr) << name;
    EXPECT_EQ(d->FindFieldByName(name)->number(), number) << name;
  }
  auto number = [](const google::protobuf::Descriptor* m, const char* f) {
    const auto* field = m->FindFieldByName(f);
    return field ? field->number() : -1;
  };
  EXPECT_EQ(number(pb::MVNParameter::descriptor(), "normalize_variance"), 1);
  EXPECT_EQ(number(pb::MVNParameter::descriptor(), "across_channels"), 2);
  EXPECT_EQ(number(pb::MVNParameter::descriptor(), "eps"), 3);
  EXPECT_EQ(number(pb::SPPParameter::descriptor(), "pyramid_height"), 1);
  EXPECT_EQ(number(pb::SPPParameter::descriptor(), "pool"), 2);
  EXPECT_EQ(number(pb::RecurrentParameter::descriptor(), "expose_hidden"), 5);
  EXPECT_EQ(number(pb::ImageDataParameter::descriptor(), "root_folder"), 12);
  EXPECT_EQ(number(pb::ImageDataParameter::descriptor(), "new_height"), 9);
  EXPECT_EQ(number(pb::WindowDataParameter::descriptor(), "crop_mode"), 11);
  EXPECT_EQ(number(pb::HDF5DataParameter::descriptor(), "shuffle"), 3);
  const pb::MVNParameter mvn;
  EXPECT_TRUE(mvn.normalize_variance());
  EXPECT_FALSE(mvn.across_channels());
  EXPECT_FLOAT_EQ(mvn.eps(), 1e-9f);
  EXPECT_EQ(pb::SPPParameter().pool(), pb::SPPParameter::MAX);
  EXPECT_EQ(pb::ImageDataParameter().batch_size(), 1u);
  EXPECT_TRUE(pb::ImageDataParameter().is_color());
  EXPECT_EQ(pb::WindowDataParameter().crop_mode(), "warp");
  EXPECT_FLOAT_EQ(pb::WindowDataParameter().fg_fraction(), 0.25f);
}

}  // namespace
}  // namespace hogstream

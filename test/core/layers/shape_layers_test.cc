// The shape and lookup layers taken from Caffe (Slice, Silence, Bias, Tile, Reduction, ArgMax,
// Crop, Embed): forward values against each definition on random inputs, numerical gradients
// of every bottom and learned blob that has one, Caffe's proto defaults and field numbers, and
// the parameters and uses that are refused.
#include "test/test_seed.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/io.hpp"
#include "core/net.hpp"
#include "test/core/gradient_checker.hpp"
#include "test/error_of.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::LayerText;

// Row-major multi-index of flat position i in `shape`.
std::vector<int> Unravel(int i, const std::vector<int>& shape) {
  std::vector<int> idx(shape.size());
  for (int a = static_cast<int>(shape.size()) - 1; a >= 0; --a) {
    idx[a] = i % shape[a];
    i /= shape[a];
  }
  return idx;
}
int Ravel(const std::vector<int>& idx, const std::vector<int>& shape) {
  int o = 0;
  for (size_t a = 0; a < shape.size(); ++a) o = o * shape[a] + idx[a];
  return o;
}

class ShapeLayers : public test::LayerTest {};

// ---------------------------------------------------------------- Slice

TEST_F(ShapeLayers, SliceAtPoints) {
  for (const char* text : {R"(type: "Slice" slice_param { axis: 1 slice_point: 1 slice_point: 4 })",
                           R"(type: "Slice" slice_param { slice_dim: 1 slice_point: 1 slice_point: 4 })",
                           R"(type: "Slice" slice_param { axis: -3 slice_point: 1 slice_point: 4 })"}) {
    Blob* x = Random({2, 6, 3, 2});
    Blobs tops = {Empty(), Empty(), Empty()};
    auto layer = CreateLayer(LayerText(text));
    layer->SetUp({x}, tops);
    layer->Forward({x}, tops);
    const int starts[] = {0, 1, 4}, lens[] = {1, 3, 2};
    for (int t = 0; t < 3; ++t) {
      ASSERT_EQ(tops[t]->shape(), (std::vector<int>{2, lens[t], 3, 2})) << text;
      for (int i = 0; i < tops[t]->count(); ++i) {
        std::vector<int> idx = Unravel(i, tops[t]->shape());
        idx[1] += starts[t];
        EXPECT_EQ(tops[t]->cpu_data()[i], x->cpu_data()[Ravel(idx, x->shape())]) << text;
      }
    }
    test::CheckGradients(layer.get(), {x}, tops);
  }
}

TEST_F(ShapeLayers, SliceEqualPartsByDefaultOnAxis1) {
  Blob* x = Random({3, 4, 5});
  Blobs tops = {Empty(), Empty()};
  auto layer = CreateLayer(LayerText(R"(type: "Slice")"));
  layer->SetUp({x}, tops);
  layer->Forward({x}, tops);
  for (int t = 0; t < 2; ++t) {
    ASSERT_EQ(tops[t]->shape(), (std::vector<int>{3, 2, 5}));
    for (int i = 0; i < tops[t]->count(); ++i) {
      std::vector<int> idx = Unravel(i, tops[t]->shape());
      idx[1] += 2 * t;
      EXPECT_EQ(tops[t]->cpu_data()[i], x->cpu_data()[Ravel(idx, x->shape())]);
    }
  }
  // Last axis, three equal parts.
  Blob* z = Random({2, 3, 6});
  Blobs tops3 = {Empty(), Empty(), Empty()};
  auto last = CreateLayer(LayerText(R"(type: "Slice" slice_param { axis: -1 })"));
  last->SetUp({z}, tops3);
  last->Forward({z}, tops3);
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < tops3[t]->count(); ++i)
      EXPECT_EQ(tops3[t]->cpu_data()[i], z->cpu_data()[(i / 2) * 6 + 2 * t + i % 2]);
  test::CheckGradients(last.get(), {z}, tops3);
}

TEST_F(ShapeLayers, SliceRefusals) {
  Blob* x = Random({2, 6, 3});
  auto error = [&](const std::string& text, int tops) {
    Blobs t;
    for (int i = 0; i < tops; ++i) t.push_back(Empty());
    auto layer = CreateLayer(LayerText(text));
    return ErrorOf([&] { layer->SetUp({x}, t); });
  };
  std::string e = error(R"(type: "Slice" slice_param { slice_point: 4 slice_point: 2 })", 3);
  EXPECT_NE(e.find("slice_point 2"), std::string::npos) << e;
  e = error(R"(type: "Slice" slice_param { slice_point: 3 slice_point: 3 })", 3);
  EXPECT_NE(e.find("slice_point 3"), std::string::npos) << e;
  e = error(R"(type: "Slice" slice_param { slice_point: 6 })", 2);
  EXPECT_NE(e.find("below the axis length 6"), std::string::npos) << e;
  e = error(R"(type: "Slice" slice_param { slice_point: 2 })", 3);
  EXPECT_NE(e.find("one fewer than the tops"), std::string::npos) << e;
  e = error(R"(type: "Slice")", 4);
  EXPECT_NE(e.find("4 equal parts"), std::string::npos) << e;
  e = error(R"(type: "Slice" slice_param { axis: 3 })", 2);
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  e = error(R"(type: "Slice" slice_param { axis: 1 slice_dim: 1 })", 2);
  EXPECT_NE(e.find("not both"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// ---------------------------------------------------------------- Silence

TEST_F(ShapeLayers, SilenceZeroGradient) {
  Blob* a = Random({2, 3});
  Blob* b = Random({4});
  test::FillGaussian(a, gen_);
  std::fill_n(a->mutable_cpu_diff(), a->count(), 5.f);
  std::fill_n(b->mutable_cpu_diff(), b->count(), 5.f);
  const std::vector<float> before(a->cpu_data(), a->cpu_data() + a->count());
  auto layer = CreateLayer(LayerText(R"(type: "Silence")"));
  layer->SetUp({a, b}, {});
  EXPECT_EQ(layer->Forward({a, b}, {}), 0.f);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), a->cpu_data()));
  layer->Backward({}, {true, false}, {a, b});
  for (int i = 0; i < a->count(); ++i) EXPECT_EQ(a->cpu_diff()[i], 0.f);
  for (int i = 0; i < b->count(); ++i) EXPECT_EQ(b->cpu_diff()[i], 5.f);  // not asked
  const std::string e = ErrorOf([&] { CreateLayer(LayerText(R"(type: "Silence")"))->SetUp({a}, {b}); });
  EXPECT_NE(e.find("top"), std::string::npos) << e;
}

// A Silence in a net that trains: the silenced branch gets no gradient, the net runs.
TEST_F(ShapeLayers, SilenceInANet) {
  Net net(ParseNetText(R"(
layer { name: "in" type: "Input" top: "data" top: "target"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" } } }
layer { name: "cut" type: "Slice" bottom: "ip" top: "used" top: "unused" }
layer { name: "quiet" type: "Silence" bottom: "unused" }
layer { name: "loss" type: "EuclideanLoss" bottom: "used" bottom: "target" top: "loss" }
)", "silence"));
  test::FillGaussian(net.input_blobs()[0], gen_);
  test::FillGaussian(net.input_blobs()[1], gen_);
  EXPECT_GT(test::ExpectNetGradientMatchesNumeric(net, 1e-2f, 1), 0);
}

// ---------------------------------------------------------------- Bias

TEST_F(ShapeLayers, BiasLearned) {
  struct C { const char* text; std::vector<int> bshape; int axis; };
  const C cases[] = {
      {R"(type: "Bias" bias_param { filler { type: "gaussian" } })", {3}, 1},  // default axis 1
      {R"(type: "Bias" bias_param { axis: 1 num_axes: 2 filler { type: "gaussian" } })", {3, 4}, 1},
      {R"(type: "Bias" bias_param { axis: -1 filler { type: "gaussian" } })", {5}, 3},
      {R"(type: "Bias" bias_param { axis: 0 num_axes: -1 filler { type: "gaussian" } })", {2, 3, 4, 5}, 0},
      {R"(type: "Bias" bias_param { num_axes: 0 filler { type: "gaussian" } })", {}, 1},
  };
  for (const C& c : cases) {
    Blob* x = Random({2, 3, 4, 5});
    Blob* y = Empty();
    auto layer = CreateLayer(LayerText(c.text));
    layer->SetUp({x}, {y});
    ASSERT_EQ(layer->blobs().size(), 1u);
    const Blob& b = *layer->blobs()[0];
    ASSERT_EQ(b.shape(), c.bshape) << c.text;
    layer->Forward({x}, {y});
    ASSERT_EQ(y->shape(), x->shape());
    for (int i = 0; i < x->count(); ++i) {
      const std::vector<int> idx = Unravel(i, x->shape());
      const std::vector<int> bidx(idx.begin() + c.axis, idx.begin() + c.axis + b.num_axes());
      EXPECT_FLOAT_EQ(y->cpu_data()[i], x->cpu_data()[i] + b.cpu_data()[Ravel(bidx, c.bshape)])
          << c.text;
    }
    test::CheckGradients(layer.get(), {x}, {y});
  }
}

TEST_F(ShapeLayers, BiasFromSecondBottomAndInPlace) {
  Blob* x = Random({2, 3, 4});
  Blob* b = Random({3, 4});
  Blob* y = Empty();
  auto layer = CreateLayer(LayerText(R"(type: "Bias")"));
  layer->SetUp({x, b}, {y});
  EXPECT_TRUE(layer->blobs().empty());
  layer->Forward({x, b}, {y});
  for (int i = 0; i < x->count(); ++i)
    EXPECT_FLOAT_EQ(y->cpu_data()[i], x->cpu_data()[i] + b->cpu_data()[i % 12]);
  test::CheckGradients(layer.get(), {x, b}, {y});
  // A scalar second bottom (no axes) is added everywhere.
  Blob* s = Random({});
  auto scalar = CreateLayer(LayerText(R"(type: "Bias" bias_param { axis: 2 })"));
  scalar->SetUp({x, s}, {y});
  scalar->Forward({x, s}, {y});
  for (int i = 0; i < x->count(); ++i)
    EXPECT_FLOAT_EQ(y->cpu_data()[i], x->cpu_data()[i] + s->cpu_data()[0]);
  test::CheckGradients(scalar.get(), {x, s}, {y});
  // In place: the same values, and the gradient passes through unchanged.
  scalar->Forward({x, s}, {y});  // the checker leaves y from a perturbed input
  const std::vector<float> want(y->cpu_data(), y->cpu_data() + y->count());
  scalar->SetUp({x, s}, {x});
  scalar->Forward({x, s}, {x});
  for (int i = 0; i < x->count(); ++i) EXPECT_FLOAT_EQ(x->cpu_data()[i], want[i]);
  test::FillGaussian(x, gen_);  // fresh gradient in x's diff
  std::copy_n(x->cpu_data(), x->count(), x->mutable_cpu_diff());
  const std::vector<float> dy(x->cpu_diff(), x->cpu_diff() + x->count());
  scalar->Backward({x}, {true, true}, {x, s});
  EXPECT_TRUE(std::equal(dy.begin(), dy.end(), x->cpu_diff()));
  EXPECT_NEAR(s->cpu_diff()[0], std::accumulate(dy.begin(), dy.end(), 0.0), 1e-4);
}

TEST_F(ShapeLayers, BiasDefaultsAndRefusals) {
  Blob* x = Random({2, 3, 4});
  Blob* y = Empty();
  auto layer = CreateLayer(LayerText(R"(type: "Bias")"));
  layer->SetUp({x}, {y});
  ASSERT_EQ(layer->blobs()[0]->shape(), std::vector<int>{3});  // axis 1, one axis
  for (int i = 0; i < 3; ++i) EXPECT_EQ(layer->blobs()[0]->cpu_data()[i], 0.f);  // constant 0
  std::string e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Bias" bias_param { axis: 2 num_axes: 2 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("extends past"), std::string::npos) << e;
  Blob* bad = Random({4, 3});
  e = ErrorOf([&] { CreateLayer(LayerText(R"(type: "Bias")"))->SetUp({x, bad}, {y}); });
  EXPECT_NE(e.find("does not match"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Bias" bias_param { axis: 3 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

// ---------------------------------------------------------------- Tile

TEST_F(ShapeLayers, Tile) {
  for (int axis : {0, 1, 2, -1}) {
    Blob* x = Random({2, 3, 4});
    Blob* y = Empty();
    auto layer = CreateLayer(LayerText("type: \"Tile\" tile_param { axis: " +
                                       std::to_string(axis) + " tiles: 3 }"));
    layer->SetUp({x}, {y});
    layer->Forward({x}, {y});
    const int a = x->CanonicalAxisIndex(axis);
    std::vector<int> want = x->shape();
    want[a] *= 3;
    ASSERT_EQ(y->shape(), want);
    // Each block of the count(axis) values from `axis` on is repeated `tiles` times.
    const int inner = x->count(a);
    for (int i = 0; i < y->count(); ++i) {
      const int outer = i / (inner * 3), within = i % inner;
      EXPECT_EQ(y->cpu_data()[i], x->cpu_data()[outer * inner + within]) << axis;
    }
    test::CheckGradients(layer.get(), {x}, {y});
  }
}

TEST_F(ShapeLayers, TileDefaultsAndRefusals) {
  EXPECT_EQ(pb::TileParameter().axis(), 1);
  EXPECT_FALSE(pb::TileParameter().has_tiles());
  Blob* x = Random({2, 3});
  Blob* y = Empty();
  std::string e = ErrorOf([&] { CreateLayer(LayerText(R"(type: "Tile")"))->SetUp({x}, {y}); });
  EXPECT_NE(e.find("tiles must be given"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Tile" tile_param { tiles: 0 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("must be positive"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Tile" tile_param { tiles: 2 axis: 2 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

// ---------------------------------------------------------------- Reduction

TEST_F(ShapeLayers, Reduction) {
  const char* ops[] = {"SUM", "ASUM", "SUMSQ", "MEAN"};
  for (const char* op : ops) {
    const std::string o_ = op;
    for (int axis : {0, 1, 2, -1}) {
      Blob* x = Random({2, 3, 4});
      Blob* y = Empty();
      auto layer = CreateLayer(LayerText(std::string("type: \"Reduction\" reduction_param { ") +
                                         "operation: " + op + " axis: " + std::to_string(axis) +
                                         " coeff: -1.7 }"));
      layer->SetUp({x}, {y});
      layer->Forward({x}, {y});
      const int a = x->CanonicalAxisIndex(axis);
      ASSERT_EQ(y->shape(), std::vector<int>(x->shape().begin(), x->shape().begin() + a));
      const int dim = x->count(a);
      for (int o = 0; o < y->count(); ++o) {
        double want = 0;
        for (int i = 0; i < dim; ++i) {
          const double v = x->cpu_data()[o * dim + i];
          want += o_ == "ASUM" ? std::fabs(v) : o_ == "SUMSQ" ? v * v : v;
        }
        if (o_ == "MEAN") want /= dim;
        EXPECT_NEAR(y->cpu_data()[o], -1.7 * want, 1e-4 * (1 + std::fabs(want))) << op << axis;
      }
      test::GradientCheck check;
      if (o_ == "ASUM") check.has_kink = true, check.kink_range = 0.03f;
      test::CheckGradients(layer.get(), {x}, {y}, check);
    }
  }
}

TEST_F(ShapeLayers, ReductionDefaultsAndRefusals) {
  const pb::ReductionParameter p;
  EXPECT_EQ(p.operation(), pb::ReductionParameter::SUM);
  EXPECT_EQ(p.axis(), 0);
  EXPECT_EQ(p.coeff(), 1.f);
  EXPECT_EQ(pb::ReductionParameter::SUM, 1);
  EXPECT_EQ(pb::ReductionParameter::ASUM, 2);
  EXPECT_EQ(pb::ReductionParameter::SUMSQ, 3);
  EXPECT_EQ(pb::ReductionParameter::MEAN, 4);
  Blob* x = Random({2, 3});
  Blob* y = Empty();
  auto layer = CreateLayer(LayerText(R"(type: "Reduction")"));
  layer->SetUp({x}, {y});
  layer->Forward({x}, {y});
  EXPECT_EQ(y->num_axes(), 0);  // the whole blob to a scalar
  EXPECT_NEAR(y->cpu_data()[0], std::accumulate(x->cpu_data(), x->cpu_data() + 6, 0.0), 1e-5);
  const std::string e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Reduction" reduction_param { axis: 2 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

// ---------------------------------------------------------------- ArgMax

// Indices of the k largest of `v`, largest first; among equal values the higher index first.
std::vector<int> TopK(const std::vector<float>& v, int k) {
  std::vector<int> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return v[a] != v[b] ? v[a] > v[b] : a > b;
  });
  order.resize(k);
  return order;
}

TEST_F(ShapeLayers, ArgMaxNoAxis) {
  for (bool values : {false, true}) {
    Blob* x = Random({3, 2, 5});
    Blob* y = Empty();
    auto layer = CreateLayer(LayerText(std::string("type: \"ArgMax\" argmax_param { top_k: 3 ") +
                                       (values ? "out_max_val: true" : "") + " }"));
    layer->SetUp({x}, {y});
    layer->Forward({x}, {y});
    ASSERT_EQ(y->shape(), (std::vector<int>{3, values ? 2 : 1, 3}));
    for (int n = 0; n < 3; ++n) {
      const std::vector<float> v(x->cpu_data() + n * 10, x->cpu_data() + n * 10 + 10);
      const std::vector<int> want = TopK(v, 3);
      for (int k = 0; k < 3; ++k) {
        const int row = n * (values ? 6 : 3);
        EXPECT_EQ(y->cpu_data()[row + k], want[k]);
        if (values) {
          EXPECT_EQ(y->cpu_data()[row + 3 + k], v[want[k]]);
        }
      }
    }
  }
  // Defaults: top_k 1, indices only; a 4-axis bottom gives a 4-axis top.
  Blob* x = Random({2, 3, 2, 2});
  Blob* y = Empty();
  auto layer = CreateLayer(LayerText(R"(type: "ArgMax")"));
  layer->SetUp({x}, {y});
  layer->Forward({x}, {y});
  ASSERT_EQ(y->shape(), (std::vector<int>{2, 1, 1, 1}));
  for (int n = 0; n < 2; ++n)
    EXPECT_EQ(y->cpu_data()[n], std::max_element(x->cpu_data() + n * 12, x->cpu_data() + n * 12 + 12) -
                                    (x->cpu_data() + n * 12));
}

TEST_F(ShapeLayers, ArgMaxOnAxis) {
  for (bool values : {false, true}) {
    for (int axis : {0, 1, -1}) {
      Blob* x = Random({3, 4, 5});
      // A tie: equal values at two places of one run, the higher index must come first.
      x->mutable_cpu_data()[x->offset({1, 1, 2})] = 9.f;
      x->mutable_cpu_data()[x->offset({1, 3, 2})] = 9.f;
      x->mutable_cpu_data()[x->offset({2, 1, 1})] = 9.f;
      x->mutable_cpu_data()[x->offset({2, 1, 4})] = 9.f;
      Blob* y = Empty();
      auto layer = CreateLayer(LayerText(
          "type: \"ArgMax\" argmax_param { top_k: 2 axis: " + std::to_string(axis) +
          (values ? " out_max_val: true" : "") + " }"));
      layer->SetUp({x}, {y});
      layer->Forward({x}, {y});
      const int a = x->CanonicalAxisIndex(axis);
      std::vector<int> want_shape = x->shape();
      want_shape[a] = 2;
      ASSERT_EQ(y->shape(), want_shape);
      for (int i = 0; i < y->count(); ++i) {
        std::vector<int> idx = Unravel(i, y->shape());
        std::vector<float> run;
        for (int j = 0; j < x->shape(a); ++j) {
          std::vector<int> xi = idx;
          xi[a] = j;
          run.push_back(x->cpu_data()[Ravel(xi, x->shape())]);
        }
        const int k = TopK(run, 2)[idx[a]];
        EXPECT_EQ(y->cpu_data()[i], values ? run[k] : static_cast<float>(k)) << axis << " " << i;
      }
    }
  }
}

TEST_F(ShapeLayers, ArgMaxRefusals) {
  EXPECT_FALSE(pb::ArgMaxParameter().out_max_val());
  EXPECT_EQ(pb::ArgMaxParameter().top_k(), 1u);
  EXPECT_FALSE(pb::ArgMaxParameter().has_axis());
  Blob* x = Random({2, 3});
  Blob* y = Empty();
  std::string e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "ArgMax" argmax_param { top_k: 4 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("top_k 4"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "ArgMax" argmax_param { top_k: 3 axis: 0 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("top_k 3"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "ArgMax" argmax_param { top_k: 0 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("at least 1"), std::string::npos) << e;
  auto layer = CreateLayer(LayerText(R"(name: "am" type: "ArgMax")"));
  layer->SetUp({x}, {y});
  layer->Forward({x}, {y});
  layer->Backward({y}, {false}, {x});  // not asked: fine
  e = ErrorOf([&] { layer->Backward({y}, {true}, {x}); });
  EXPECT_NE(e.find("propagate_down: false"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// ---------------------------------------------------------------- Crop

TEST_F(ShapeLayers, Crop) {
  struct C { const char* text; std::vector<int> like; std::vector<int> offset; };
  const C cases[] = {
      {R"(type: "Crop")", {1, 1, 3, 2}, {0, 0, 0, 0}},                        // axis 2, offset 0
      {R"(type: "Crop" crop_param { offset: 1 })", {1, 1, 3, 2}, {0, 0, 1, 1}},
      {R"(type: "Crop" crop_param { axis: 1 offset: 1 offset: 2 offset: 0 })", {9, 2, 2, 3},
       {0, 1, 2, 0}},
      {R"(type: "Crop" crop_param { axis: 0 offset: 1 })", {1, 2, 3, 2}, {1, 1, 1, 1}},
      {R"(type: "Crop" crop_param { axis: -1 offset: 2 })", {7, 7, 7, 1}, {0, 0, 0, 2}},
  };
  for (const C& c : cases) {
    Blob* x = Random({2, 3, 4, 4});
    Blob* like = Random(c.like);
    Blob* y = Empty();
    auto layer = CreateLayer(LayerText(c.text));
    layer->SetUp({x, like}, {y});
    layer->Forward({x, like}, {y});
    const int start = x->CanonicalAxisIndex(LayerText(c.text).crop_param().axis());
    std::vector<int> want = x->shape();
    for (int a = start; a < 4; ++a) want[a] = c.like[a];
    ASSERT_EQ(y->shape(), want) << c.text;
    for (int i = 0; i < y->count(); ++i) {
      std::vector<int> idx = Unravel(i, y->shape());
      for (int a = 0; a < 4; ++a) idx[a] += c.offset[a];
      EXPECT_EQ(y->cpu_data()[i], x->cpu_data()[Ravel(idx, x->shape())]) << c.text;
    }
    test::GradientCheck check;
    check.check_bottoms = {0};
    test::CheckGradients(layer.get(), {x, like}, {y}, check);
    // bottom[1] gives only a shape: its gradient is zero. bottom[0]'s gradient is the top's
    // inside the window and zero outside it, whatever its diff held before.
    std::fill_n(like->mutable_cpu_diff(), like->count(), 3.f);
    std::fill_n(x->mutable_cpu_diff(), x->count(), 3.f);
    test::FillGaussian(y, gen_);
    std::copy_n(y->cpu_data(), y->count(), y->mutable_cpu_diff());
    layer->Backward({y}, {true, true}, {x, like});
    for (int i = 0; i < like->count(); ++i) EXPECT_EQ(like->cpu_diff()[i], 0.f);
    std::vector<float> dx(x->count(), 0.f);
    for (int i = 0; i < y->count(); ++i) {
      std::vector<int> idx = Unravel(i, y->shape());
      for (int a = 0; a < 4; ++a) idx[a] += c.offset[a];
      dx[Ravel(idx, x->shape())] = y->cpu_diff()[i];
    }
    for (int i = 0; i < x->count(); ++i) EXPECT_EQ(x->cpu_diff()[i], dx[i]) << c.text << " " << i;
  }
}

TEST_F(ShapeLayers, CropRefusals) {
  EXPECT_EQ(pb::CropParameter().axis(), 2);
  EXPECT_EQ(pb::CropParameter().offset_size(), 0);
  Blob* x = Random({2, 3, 4, 4});
  Blob* y = Empty();
  auto error = [&](const char* text, const std::vector<int>& like) {
    Blob* l = Random(like);
    return ErrorOf([&] { CreateLayer(LayerText(text))->SetUp({x, l}, {y}); });
  };
  std::string e = error(R"(type: "Crop")", {2, 3, 5, 4});
  EXPECT_NE(e.find("does not fit axis 2"), std::string::npos) << e;
  e = error(R"(type: "Crop" crop_param { offset: 2 })", {2, 3, 3, 3});
  EXPECT_NE(e.find("from offset 2 does not fit axis 2"), std::string::npos) << e;
  e = error(R"(type: "Crop" crop_param { offset: 0 offset: 1 })", {2, 3, 3, 4});
  EXPECT_NE(e.find("does not fit axis 3"), std::string::npos) << e;
  e = error(R"(type: "Crop" crop_param { offset: 0 offset: 0 offset: 0 })", {2, 3, 3, 3});
  EXPECT_NE(e.find("3 offsets"), std::string::npos) << e;
  e = error(R"(type: "Crop")", {2, 3, 3});
  EXPECT_NE(e.find("same number of axes"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// ---------------------------------------------------------------- Embed

TEST_F(ShapeLayers, Embed) {
  for (bool bias : {true, false}) {
    Blob* x = Empty();
    x->Reshape({2, 3});
    std::uniform_int_distribution<int> pick(0, 4);
    for (int i = 0; i < 6; ++i) x->mutable_cpu_data()[i] = static_cast<float>(pick(gen_));
    x->mutable_cpu_data()[5] = x->cpu_data()[0];  // one row read twice: gradients add
    Blob* y = Empty();
    auto layer = CreateLayer(LayerText(
        std::string("type: \"Embed\" embed_param { num_output: 4 input_dim: 5 ") +
        "weight_filler { type: \"gaussian\" } bias_filler { type: \"gaussian\" } " +
        (bias ? "" : "bias_term: false") + " }"));
    layer->SetUp({x}, {y});
    ASSERT_EQ(layer->blobs().size(), bias ? 2u : 1u);
    ASSERT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{5, 4}));
    if (bias) {
      ASSERT_EQ(layer->blobs()[1]->shape(), std::vector<int>{4});
    }
    layer->Forward({x}, {y});
    ASSERT_EQ(y->shape(), (std::vector<int>{2, 3, 4}));
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 4; ++j)
        EXPECT_FLOAT_EQ(y->cpu_data()[i * 4 + j],
                        layer->blobs()[0]->cpu_data()[static_cast<int>(x->cpu_data()[i]) * 4 + j] +
                            (bias ? layer->blobs()[1]->cpu_data()[j] : 0.f));
    test::GradientCheck check;
    check.check_bottoms = {-1};  // parameters only: the indices have no gradient
    test::CheckGradients(layer.get(), {x}, {y}, check);
  }
}

TEST_F(ShapeLayers, EmbedDefaultsAndRefusals) {
  const pb::EmbedParameter p;
  EXPECT_TRUE(p.bias_term());
  EXPECT_EQ(p.num_output(), 0u);
  EXPECT_EQ(p.input_dim(), 0u);
  Blob* x = Empty();
  x->Reshape({3});
  for (int i = 0; i < 3; ++i) x->mutable_cpu_data()[i] = static_cast<float>(i);
  Blob* y = Empty();
  auto layer = CreateLayer(LayerText(R"(name: "emb" type: "Embed" embed_param { num_output: 2 input_dim: 3 })"));
  layer->SetUp({x}, {y});
  layer->Forward({x}, {y});
  for (int i = 0; i < y->count(); ++i) EXPECT_EQ(y->cpu_data()[i], 0.f);  // constant 0 fillers
  for (float bad : {3.f, -1.f, 1.5f, NAN}) {
    x->mutable_cpu_data()[1] = bad;
    const std::string e = ErrorOf([&] { layer->Forward({x}, {y}); });
    EXPECT_NE(e.find("input 1 is"), std::string::npos) << e;
    EXPECT_NE(e.find("input_dim = 3"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  x->mutable_cpu_data()[1] = 1.f;
  layer->Forward({x}, {y});
  std::string e = ErrorOf([&] { layer->Backward({y}, {true}, {x}); });
  EXPECT_NE(e.find("propagate_down: false"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Embed" embed_param { input_dim: 3 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("num_output must be positive"), std::string::npos) << e;
  e = ErrorOf([&] {
    CreateLayer(LayerText(R"(type: "Embed" embed_param { num_output: 3 })"))->SetUp({x}, {y});
  });
  EXPECT_NE(e.find("input_dim must be positive"), std::string::npos) << e;
}

// ---------------------------------------------------------------- proto: Caffe's schema

TEST(ShapeLayerParams, FieldNumbersAndDefaultsAreCaffes) {
  const auto* d = pb::LayerParameter::descriptor();
  const std::pair<const char*, int> fields[] = {
      {"argmax_param", 103}, {"bias_param", 141},  {"crop_param", 144}, {"embed_param", 137},
      {"reduction_param", 136}, {"slice_param", 126}, {"tile_param", 138}};
  for (const auto& [name, number] : fields) {
    ASSERT_NE(d->FindFieldByName(name), nullptr) << name;
    EXPECT_EQ(d->FindFieldByName(name)->number(), number) << name;
  }
  auto number = [](const google::protobuf::Descriptor* m, const char* f) {
    const auto* field = m->FindFieldByName(f);
    return field ? field->number() : -1;
  };
  EXPECT_EQ(number(pb::SliceParameter::descriptor(), "axis"), 3);
  EXPECT_EQ(number(pb::SliceParameter::descriptor(), "slice_point"), 2);
  EXPECT_EQ(number(pb::SliceParameter::descriptor(), "slice_dim"), 1);
  EXPECT_EQ(number(pb::BiasParameter::descriptor(), "axis"), 1);
  EXPECT_EQ(number(pb::BiasParameter::descriptor(), "num_axes"), 2);
  EXPECT_EQ(number(pb::BiasParameter::descriptor(), "filler"), 3);
  EXPECT_EQ(number(pb::TileParameter::descriptor(), "axis"), 1);
  EXPECT_EQ(number(pb::TileParameter::descriptor(), "tiles"), 2);
  EXPECT_EQ(number(pb::ReductionParameter::descriptor(), "operation"), 1);
  EXPECT_EQ(number(pb::ReductionParameter::descriptor(), "axis"), 2);
  EXPECT_EQ(number(pb::ReductionParameter::descriptor(), "coeff"), 3);
  EXPECT_EQ(number(pb::ArgMaxParameter::descriptor(), "out_max_val"), 1);
  EXPECT_EQ(number(pb::ArgMaxParameter::descriptor(), "top_k"), 2);
  EXPECT_EQ(number(pb::ArgMaxParameter::descriptor(), "axis"), 3);
  EXPECT_EQ(number(pb::CropParameter::descriptor(), "axis"), 1);
  EXPECT_EQ(number(pb::CropParameter::descriptor(), "offset"), 2);
  EXPECT_EQ(number(pb::EmbedParameter::descriptor(), "num_output"), 1);
  EXPECT_EQ(number(pb::EmbedParameter::descriptor(), "input_dim"), 2);
  EXPECT_EQ(number(pb::EmbedParameter::descriptor(), "bias_term"), 3);
  EXPECT_EQ(number(pb::EmbedParameter::descriptor(), "weight_filler"), 4);
  EXPECT_EQ(number(pb::EmbedParameter::descriptor(), "bias_filler"), 5);
  const pb::SliceParameter slice;
  EXPECT_EQ(slice.axis(), 1);
  EXPECT_EQ(slice.slice_dim(), 1u);
  const pb::BiasParameter bias;
  EXPECT_EQ(bias.axis(), 1);
  EXPECT_EQ(bias.num_axes(), 1);
  EXPECT_FALSE(bias.has_filler());
}

}  // namespace
}  // namespace hogstream

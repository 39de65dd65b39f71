// Concat: top shapes for several axes (and legacy concat_dim), forward values against an
// index-mapping reference, numerical gradients on axes 0 and 1, single-bottom sharing and
// shape errors.
#include "core/layers/concat_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter Param(int axis) {
  pb::LayerParameter p;
  p.set_type("Concat");
  p.mutable_concat_param()->set_axis(axis);
  return p;
}

struct Config {
  int axis;
  std::vector<std::vector<int>> shapes;
};

class ConcatConfigTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    for (const auto& s : GetParam().shapes) {
      x_.push_back(std::make_unique<Blob>(s));
      test::FillGaussian(x_.back().get(), gen_);
      bottoms_.push_back(x_.back().get());
    }
  }
  std::mt19937 gen_{::hogstream::TestSeed()};
  std::vector<std::unique_ptr<Blob>> x_;
  Blobs bottoms_;
  Blob y_;
};

TEST_P(ConcatConfigTest, ForwardMatchesReference) {
  const Config c = GetParam();
  auto layer = CreateLayer(Param(c.axis));
  layer->SetUp(bottoms_, {&y_});
  layer->Forward(bottoms_, {&y_});
  const int axis = x_[0]->CanonicalAxisIndex(c.axis);
  std::vector<int> want_shape = x_[0]->shape();
  for (size_t i = 1; i < x_.size(); ++i) want_shape[axis] += x_[i]->shape(axis);
  ASSERT_EQ(y_.shape(), want_shape);
  // Walk every bottom element and find it in the top.
  const int inner = x_[0]->count(axis + 1);
  int offset = 0;
  for (const auto& b : x_) {
    for (int i = 0; i < b->count(); ++i) {
      const int o = i / (b->shape(axis) * inner), a = (i / inner) % b->shape(axis);
      const int t = (o * y_.shape(axis) + offset + a) * inner + i % inner;
      EXPECT_EQ(y_.cpu_data()[t], b->cpu_data()[i]);
    }
    offset += b->shape(axis);
  }
}

TEST_P(ConcatConfigTest, Gradient) {
  ConcatLayer layer(Param(GetParam().axis));
  layer.SetUp(bottoms_, {&y_});
  test::CheckGradients(&layer, bottoms_, {&y_});
}

INSTANTIATE_TEST_SUITE_P(
    Configs, ConcatConfigTest,
    ::testing::Values(Config{0, {{2, 3, 4, 2}, {3, 3, 4, 2}}},
                      Config{1, {{2, 2, 3, 2}, {2, 3, 3, 2}, {2, 1, 3, 2}}},
                      Config{-1, {{2, 3, 2}, {2, 3, 4}}}, Config{1, {{4, 2}, {4, 5}}},
                      Config{0, {{3}, {2}, {4}}}));

TEST(ConcatLayerTest, LegacyConcatDim) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob a(2, 3, 4, 5), b(2, 3, 2, 5), y;
  test::FillGaussian(&a, gen);
  test::FillGaussian(&b, gen);
  pb::LayerParameter p;
  p.set_type("Concat");
  p.mutable_concat_param()->set_concat_dim(2);
  auto layer = CreateLayer(p);
  layer->SetUp({&a, &b}, {&y});
  layer->Forward({&a, &b}, {&y});
  EXPECT_EQ(y.shape(), (std::vector<int>{2, 3, 6, 5}));
  EXPECT_EQ(y.cpu_data()[y.offset(1, 2, 5, 4)], b.cpu_data()[b.offset(1, 2, 1, 4)]);
  EXPECT_EQ(y.cpu_data()[y.offset(1, 2, 3, 4)], a.cpu_data()[a.offset(1, 2, 3, 4)]);
}

TEST(ConcatLayerTest, SingleBottomSharesMemory) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob a(2, 3, 2, 2), y;
  test::FillGaussian(&a, gen);
  auto layer = CreateLayer(Param(1));
  layer->SetUp({&a}, {&y});
  layer->Forward({&a}, {&y});
  EXPECT_EQ(y.shape(), a.shape());
  EXPECT_EQ(y.cpu_data(), a.cpu_data());
  EXPECT_EQ(y.cpu_diff(), a.cpu_diff());
}

TEST(ConcatLayerTest, BadShapesAreErrors) {
  Blob a(2, 3, 4, 5), b(2, 3, 5, 5), c({2, 3, 4}), y;
  auto layer = CreateLayer(Param(1));
  try {
    layer->SetUp({&a, &b}, {&y});
    ADD_FAILURE() << "mismatched shapes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(a.shape_string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(b.shape_string()), std::string::npos) << e.what();
  }
  auto axes = CreateLayer(Param(1));
  EXPECT_THROW(axes->SetUp({&a, &c}, {&y}), Error);
  auto range = CreateLayer(Param(4));
  EXPECT_THROW(range->SetUp({&a, &a}, {&y}), Error);
  pb::LayerParameter both = Param(1);
  both.mutable_concat_param()->set_concat_dim(1);
  auto twice = CreateLayer(both);
  EXPECT_THROW(twice->SetUp({&a, &a}, {&y}), Error);
  pb::LayerParameter legacy;
  legacy.set_type("Concat");
  legacy.mutable_concat_param()->set_concat_dim(4);
  auto far = CreateLayer(legacy);
  EXPECT_THROW(far->SetUp({&a, &a}, {&y}), Error);
}

}  // namespace
}  // namespace hogstream

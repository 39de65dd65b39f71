// Split: shared data, summed diffs and gradients for 1-3 tops.
#include "core/layers/split_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter SplitParam() {
  pb::LayerParameter p;
  p.set_type("Split");
  return p;
}

class SplitLayerTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    for (int i = 0; i < GetParam(); ++i) {
      owned_.push_back(std::make_unique<Blob>());
      tops_.push_back(owned_.back().get());
    }
  }
  std::vector<std::unique_ptr<Blob>> owned_;
  Blobs tops_;
};

TEST_P(SplitLayerTest, TopsShareBottomData) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5);
  test::FillGaussian(&x, gen);
  auto layer = CreateLayer(SplitParam());
  layer->SetUp({&x}, tops_);
  layer->Forward({&x}, tops_);
  for (Blob* t : tops_) {
    EXPECT_EQ(t->shape(), x.shape());
    EXPECT_EQ(t->data(), x.data());
    EXPECT_NE(t->diff(), x.diff());
  }
}

TEST_P(SplitLayerTest, BackwardSumsTopDiffs) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5);
  test::FillGaussian(&x, gen);
  SplitLayer layer(SplitParam());
  layer.SetUp({&x}, tops_);
  layer.Forward({&x}, tops_);
  std::normal_distribution<float> nd;
  std::vector<double> sum(x.count(), 0.0);
  for (Blob* t : tops_)
    for (int i = 0; i < t->count(); ++i) sum[i] += t->mutable_cpu_diff()[i] = nd(gen);
  layer.Backward(tops_, {true}, {&x});
  for (int i = 0; i < x.count(); ++i) EXPECT_NEAR(x.cpu_diff()[i], sum[i], 1e-5);
}

TEST_P(SplitLayerTest, Gradient) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5);
  test::FillGaussian(&x, gen);
  SplitLayer layer(SplitParam());
  layer.SetUp({&x}, tops_);
  test::CheckGradients(&layer, {&x}, tops_);
}

INSTANTIATE_TEST_SUITE_P(Tops, SplitLayerTest, ::testing::Values(1, 2, 3));

TEST(SplitLayerErrorsTest, BadBlobs) {
  Blob x(2, 3, 4, 5), y;
  EXPECT_THROW(SplitLayer(SplitParam()).SetUp({&x}, {&y, &x}), Error);  // in place
  EXPECT_THROW(SplitLayer(SplitParam()).SetUp({&x}, {}), Error);
  EXPECT_THROW(SplitLayer(SplitParam()).SetUp({}, {&y}), Error);
}

}  // namespace
}  // namespace hogstream

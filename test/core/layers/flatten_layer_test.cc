// Flatten: top shapes, shared data and diff, gradient, bad axes.
#include "core/layers/flatten_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter FlattenParam(int axis = 1, int end_axis = -1) {
  pb::LayerParameter p;
  p.set_type("Flatten");
  p.mutable_flatten_param()->set_axis(axis);
  p.mutable_flatten_param()->set_end_axis(end_axis);
  return p;
}

std::vector<int> TopShape(int axis, int end_axis) {
  Blob x(2, 3, 4, 5), y;
  auto layer = CreateLayer(FlattenParam(axis, end_axis));
  layer->SetUp({&x}, {&y});
  return y.shape();
}

TEST(FlattenLayerTest, Shapes) {
  EXPECT_EQ(TopShape(1, -1), (std::vector<int>{2, 60}));
  EXPECT_EQ(TopShape(0, -1), (std::vector<int>{120}));
  EXPECT_EQ(TopShape(2, -1), (std::vector<int>{2, 3, 20}));
  EXPECT_EQ(TopShape(1, 2), (std::vector<int>{2, 12, 5}));
  EXPECT_EQ(TopShape(-3, -2), (std::vector<int>{2, 12, 5}));
  EXPECT_EQ(TopShape(1, 1), (std::vector<int>{2, 3, 4, 5}));
  // Caffe's quirk: end_axis just before axis inserts a unit axis.
  EXPECT_EQ(TopShape(2, 1), (std::vector<int>{2, 3, 1, 4, 5}));
}

TEST(FlattenLayerTest, ForwardSharesDataAndBackwardSharesDiff) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen);
  std::vector<float> before(x.cpu_data(), x.cpu_data() + x.count());
  FlattenLayer layer(FlattenParam());
  layer.SetUp({&x}, {&y});
  layer.Forward({&x}, {&y});
  EXPECT_EQ(y.data(), x.data());
  for (int i = 0; i < x.count(); ++i) EXPECT_EQ(y.cpu_data()[i], before[i]);

  std::normal_distribution<float> nd;
  std::vector<float> dy(y.count());
  for (float& v : dy) v = nd(gen);
  std::copy(dy.begin(), dy.end(), y.mutable_cpu_diff());
  layer.Backward({&y}, {true}, {&x});
  EXPECT_EQ(x.diff(), y.diff());
  for (int i = 0; i < x.count(); ++i) EXPECT_EQ(x.cpu_diff()[i], dy[i]);
}

TEST(FlattenLayerTest, Gradient) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen);
  FlattenLayer layer(FlattenParam(1, 2));
  layer.SetUp({&x}, {&y});
  test::CheckGradients(&layer, {&x}, {&y});
}

TEST(FlattenLayerTest, BadParameters) {
  Blob x(2, 3, 4, 5), y;
  EXPECT_THROW(FlattenLayer(FlattenParam(4, -1)).SetUp({&x}, {&y}), Error);
  EXPECT_THROW(FlattenLayer(FlattenParam(1, -5)).SetUp({&x}, {&y}), Error);
  EXPECT_THROW(FlattenLayer(FlattenParam(3, 1)).SetUp({&x}, {&y}), Error);
  EXPECT_THROW(FlattenLayer(FlattenParam()).SetUp({&x}, {&x}), Error);
}

}  // namespace
}  // namespace hogstream

// Reshape: 0 / -1 / axis / num_axes shapes, shared data and diff, bad shapes.
#include "core/layers/reshape_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter ReshapeParam(std::vector<int> dims, int axis = 0, int num_axes = -1) {
  pb::LayerParameter p;
  p.set_type("Reshape");
  auto* rp = p.mutable_reshape_param();
  for (int d : dims) rp->mutable_shape()->add_dim(d);
  rp->set_axis(axis);
  rp->set_num_axes(num_axes);
  return p;
}

std::vector<int> TopShape(std::vector<int> dims, int axis = 0, int num_axes = -1) {
  Blob x(2, 3, 4, 5), y;
  auto layer = CreateLayer(ReshapeParam(dims, axis, num_axes));
  layer->SetUp({&x}, {&y});
  return y.shape();
}

TEST(ReshapeLayerTest, Shapes) {
  EXPECT_EQ(TopShape({6, 20}), (std::vector<int>{6, 20}));
  EXPECT_EQ(TopShape({0, -1}), (std::vector<int>{2, 60}));
  EXPECT_EQ(TopShape({-1, 0, 0, 5}), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(TopShape({0, 0, -1}), (std::vector<int>{2, 3, 20}));
  EXPECT_EQ(TopShape({-1}), (std::vector<int>{120}));
  // axis / num_axes pick the span of bottom axes that the new shape replaces.
  EXPECT_EQ(TopShape({-1}, 2), (std::vector<int>{2, 3, 20}));
  EXPECT_EQ(TopShape({3, 1}, 1, 1), (std::vector<int>{2, 3, 1, 4, 5}));
  EXPECT_EQ(TopShape({1}, 0, 0), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(TopShape({1}, -1, 0), (std::vector<int>{2, 3, 4, 5, 1}));
  EXPECT_EQ(TopShape({2, 0, -1}, -3, 2), (std::vector<int>{2, 3, 2, 5, 2}));
  EXPECT_EQ(TopShape({-1, 10}, 1, 3), (std::vector<int>{2, 6, 10}));
}

TEST(ReshapeLayerTest, SharesDataAndDiff) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen);
  std::vector<float> before(x.cpu_data(), x.cpu_data() + x.count());
  ReshapeLayer layer(ReshapeParam({0, -1, 4}));
  layer.SetUp({&x}, {&y});
  layer.Forward({&x}, {&y});
  EXPECT_EQ(y.shape(), (std::vector<int>{2, 15, 4}));
  EXPECT_EQ(y.data(), x.data());
  EXPECT_EQ(y.diff(), x.diff());
  for (int i = 0; i < x.count(); ++i) EXPECT_EQ(y.cpu_data()[i], before[i]);
}

// The top's diff is the bottom's, so the gradient arrives without Backward doing anything.
// (test::CheckGradients cannot run here: it zeroes the bottom diff after writing the top
// diff, which for this layer is the same memory.)
TEST(ReshapeLayerTest, GradientFlows) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen);
  ReshapeLayer layer(ReshapeParam({-1, 10}));
  layer.SetUp({&x}, {&y});
  layer.Forward({&x}, {&y});
  std::normal_distribution<float> nd;
  std::vector<float> dy(y.count());
  for (float& v : dy) v = nd(gen);
  std::copy(dy.begin(), dy.end(), y.mutable_cpu_diff());
  layer.Backward({&y}, {true}, {&x});
  for (int i = 0; i < x.count(); ++i) EXPECT_EQ(x.cpu_diff()[i], dy[i]);
}

TEST(ReshapeLayerTest, FollowsBottomReshape) {
  Blob x(2, 3, 4, 5), y;
  ReshapeLayer layer(ReshapeParam({0, -1}));
  layer.SetUp({&x}, {&y});
  x.Reshape({7, 3, 2, 2});
  layer.Forward({&x}, {&y});
  EXPECT_EQ(y.shape(), (std::vector<int>{7, 12}));
  EXPECT_EQ(y.data(), x.data());
}

TEST(ReshapeLayerTest, CountMismatchNamesBothShapes) {
  Blob x(2, 3, 4, 5), y;
  ReshapeLayer layer(ReshapeParam({2, 3, 4, 6}));
  try {
    layer.SetUp({&x}, {&y});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("2 3 4 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 4 6"), std::string::npos) << msg;
  }
}

TEST(ReshapeLayerTest, BadParameters) {
  Blob x(2, 3, 4, 5), y;
  auto setup = [&](const pb::LayerParameter& p) { ReshapeLayer(p).SetUp({&x}, {&y}); };
  EXPECT_THROW(setup(ReshapeParam({-1, -1})), Error);      // two inferred
  EXPECT_THROW(setup(ReshapeParam({7, -1})), Error);       // 120 not a multiple of 7
  EXPECT_THROW(setup(ReshapeParam({-2, 60})), Error);      // negative dimension
  EXPECT_THROW(setup(ReshapeParam({0}, -1, 0)), Error);    // 0 with no bottom axis to copy
  EXPECT_THROW(setup(ReshapeParam({120}, 5)), Error);      // axis beyond the bottom
  EXPECT_THROW(setup(ReshapeParam({120}, -6)), Error);
  EXPECT_THROW(setup(ReshapeParam({120}, 0, -2)), Error);  // num_axes < -1
  EXPECT_THROW(setup(ReshapeParam({120}, 2, 3)), Error);   // span beyond the bottom
  EXPECT_THROW(ReshapeLayer(ReshapeParam({-1})).SetUp({&x}, {&x}), Error);  // in place
}

}  // namespace
}  // namespace hogstream

// Input: top shapes from input_param, untouched caller data, bad parameters.
#include "core/layers/input_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter InputParam(const std::vector<std::vector<int>>& shapes) {
  pb::LayerParameter p;
  p.set_type("Input");
  for (const auto& s : shapes) {
    auto* shape = p.mutable_input_param()->add_shape();
    for (int d : s) shape->add_dim(d);
  }
  return p;
}

TEST(InputLayerTest, OneShapeForAllTops) {
  Blob a, b;
  auto layer = CreateLayer(InputParam({{2, 3, 4, 5}}));
  layer->SetUp({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(b.shape(), (std::vector<int>{2, 3, 4, 5}));
}

TEST(InputLayerTest, ShapePerTop) {
  Blob a, b;
  InputLayer layer(InputParam({{2, 3, 4, 5}, {2}}));
  layer.SetUp({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(b.shape(), std::vector<int>{2});
}

TEST(InputLayerTest, NoShapeLeavesTopsAlone) {
  Blob a(std::vector<int>{7, 2});
  InputLayer layer(InputParam({}));
  layer.SetUp({}, {&a});
  EXPECT_EQ(a.shape(), (std::vector<int>{7, 2}));
}

// Forward leaves the caller's data and shape untouched.
TEST(InputLayerTest, ForwardKeepsCallerData) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob a;
  InputLayer layer(InputParam({{2, 3, 4, 5}}));
  layer.SetUp({}, {&a});
  a.Reshape({3, 3, 4, 5});
  test::FillGaussian(&a, gen);
  const std::vector<float> before(a.cpu_data(), a.cpu_data() + a.count());
  layer.Forward({}, {&a});
  EXPECT_EQ(a.shape(), (std::vector<int>{3, 3, 4, 5}));
  for (int i = 0; i < a.count(); ++i) EXPECT_EQ(a.cpu_data()[i], before[i]);
}

TEST(InputLayerTest, Errors) {
  Blob a, b, c;
  EXPECT_THROW(InputLayer(InputParam({{2}, {3}})).SetUp({}, {&a, &b, &c}), Error);
  EXPECT_THROW(InputLayer(InputParam({{2}})).SetUp({&a}, {&b}), Error);
  EXPECT_THROW(InputLayer(InputParam({{2}})).SetUp({}, {}), Error);
  EXPECT_THROW(InputLayer(InputParam({{2, -3}})).SetUp({}, {&a}), Error);
}

}  // namespace
}  // namespace hogstream

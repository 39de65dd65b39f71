// DummyData: shapes, constant fill once at set-up, refills, legacy dims, bad parameters.
#include "core/layers/dummy_data_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <set>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter DummyParam(const std::vector<std::vector<int>>& shapes) {
  pb::LayerParameter p;
  p.set_type("DummyData");
  for (const auto& s : shapes) {
    auto* shape = p.mutable_dummy_data_param()->add_shape();
    for (int d : s) shape->add_dim(d);
  }
  return p;
}

pb::FillerParameter Constant(float v) {
  pb::FillerParameter f;
  f.set_type("constant");
  f.set_value(v);
  return f;
}

pb::FillerParameter Uniform(float lo, float hi) {
  pb::FillerParameter f;
  f.set_type("uniform");
  f.set_min(lo);
  f.set_max(hi);
  return f;
}

void ExpectAll(const Blob& b, float v) {
  for (int i = 0; i < b.count(); ++i) ASSERT_EQ(b.cpu_data()[i], v) << i;
}

TEST(DummyDataLayerTest, DefaultIsZeroAndShapesFollowParam) {
  Blob a, b;
  auto layer = CreateLayer(DummyParam({{2, 3, 4}, {5}}));
  layer->SetUp({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(b.shape(), std::vector<int>{5});
  ExpectAll(a, 0.f);
  ExpectAll(b, 0.f);
}

// A constant filler runs once at set-up; Forward then leaves the tops alone.
TEST(DummyDataLayerTest, ConstantFillsOnceAtSetUp) {
  std::mt19937 gen(::hogstream::TestSeed());
  const float v = std::uniform_real_distribution<float>(-5.f, 5.f)(gen);
  pb::LayerParameter p = DummyParam({{2, 3}});
  *p.mutable_dummy_data_param()->add_data_filler() = Constant(v);
  Blob a, b;
  DummyDataLayer layer(p);
  layer.SetUp({}, {&a, &b});
  ExpectAll(a, v);
  ExpectAll(b, v);
  test::FillGaussian(&a, gen);
  const std::vector<float> before(a.cpu_data(), a.cpu_data() + a.count());
  layer.Forward({}, {&a, &b});
  for (int i = 0; i < a.count(); ++i) EXPECT_EQ(a.cpu_data()[i], before[i]);
}

// Other fillers draw afresh on every Forward.
TEST(DummyDataLayerTest, RandomFillerRefillsEachForward) {
  pb::LayerParameter p = DummyParam({{4, 5}});
  *p.mutable_dummy_data_param()->add_data_filler() = Uniform(2.f, 3.f);
  Blob a;
  DummyDataLayer layer(p);
  layer.SetUp({}, {&a});
  layer.Forward({}, {&a});
  const std::vector<float> first(a.cpu_data(), a.cpu_data() + a.count());
  layer.Forward({}, {&a});
  int same = 0;
  for (int i = 0; i < a.count(); ++i) {
    EXPECT_GE(a.cpu_data()[i], 2.f);
    EXPECT_LE(a.cpu_data()[i], 3.f);
    same += a.cpu_data()[i] == first[i];
  }
  EXPECT_LT(same, a.count());
  EXPECT_GT(std::set<float>(first.begin(), first.end()).size(), 1u);
}

TEST(DummyDataLayerTest, FillerPerTop) {
  pb::LayerParameter p = DummyParam({{3, 2}, {4}});
  *p.mutable_dummy_data_param()->add_data_filler() = Constant(1.5f);
  *p.mutable_dummy_data_param()->add_data_filler() = Uniform(-2.f, -1.f);
  Blob a, b;
  DummyDataLayer layer(p);
  layer.SetUp({}, {&a, &b});
  layer.Forward({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{3, 2}));
  EXPECT_EQ(b.shape(), std::vector<int>{4});
  ExpectAll(a, 1.5f);
  for (int i = 0; i < b.count(); ++i) {
    EXPECT_GE(b.cpu_data()[i], -2.f);
    EXPECT_LE(b.cpu_data()[i], -1.f);
  }
}

TEST(DummyDataLayerTest, LegacyDimensions) {
  pb::LayerParameter p;
  p.set_type("DummyData");
  auto* dp = p.mutable_dummy_data_param();
  dp->add_num(5);
  dp->add_num(2);
  dp->add_channels(3);
  dp->add_height(4);
  dp->add_width(1);
  dp->add_width(6);
  Blob a, b;
  DummyDataLayer layer(p);
  layer.SetUp({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{5, 3, 4, 1}));
  EXPECT_EQ(b.shape(), (std::vector<int>{2, 3, 4, 6}));
}

TEST(DummyDataLayerTest, Errors) {
  Blob a, b, c;
  auto setup = [&](const pb::LayerParameter& p, const Blobs& bottom, const Blobs& top) {
    DummyDataLayer(p).SetUp(bottom, top);
  };
  EXPECT_THROW(setup(DummyParam({{2}, {3}}), {}, {&a, &b, &c}), Error);  // shape count
  EXPECT_THROW(setup(DummyParam({}), {}, {&a}), Error);                 // no shape
  EXPECT_THROW(setup(DummyParam({{2}}), {&c}, {&a}), Error);            // a bottom
  pb::LayerParameter fillers = DummyParam({{2}});
  *fillers.mutable_dummy_data_param()->add_data_filler() = Constant(1.f);
  *fillers.mutable_dummy_data_param()->add_data_filler() = Constant(2.f);
  EXPECT_THROW(setup(fillers, {}, {&a, &b, &c}), Error);                // filler count
  pb::LayerParameter bad_filler = DummyParam({{2}});
  bad_filler.mutable_dummy_data_param()->add_data_filler()->set_type("nonsense");
  EXPECT_THROW(setup(bad_filler, {}, {&a}), Error);
  pb::LayerParameter both = DummyParam({{2}});
  both.mutable_dummy_data_param()->add_num(2);
  both.mutable_dummy_data_param()->add_channels(1);
  both.mutable_dummy_data_param()->add_height(1);
  both.mutable_dummy_data_param()->add_width(1);
  EXPECT_THROW(setup(both, {}, {&a}), Error);                           // shape and legacy
  pb::LayerParameter partial;
  partial.mutable_dummy_data_param()->add_num(2);                       // no channels etc.
  EXPECT_THROW(setup(partial, {}, {&a}), Error);
}

}  // namespace
}  // namespace hogstream

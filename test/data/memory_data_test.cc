// The MemoryData layer: batches out of the caller's arrays in order and round again, in a Net
// too, and the misuses that are one-line errors.
#include "data/memory_data_layer.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <random>

#include "core/net.hpp"
#include "test/data/data_test_util.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter Param(int batch) {
  pb::LayerParameter p;
  HS_CHECK(google::protobuf::TextFormat::ParseFromString(
      "name: 'mem' type: 'MemoryData' top: 'data' top: 'label' memory_data_param { batch_size: " +
          std::to_string(batch) + " channels: 2 height: 1 width: 3 }",
      &p));
  return p;
}

TEST(MemoryDataLayer, GivesTheCallersItemsBatchByBatch) {
  std::mt19937 gen(::hogstream::TestSeed());
  std::normal_distribution<float> nd;
  std::vector<float> data(6 * 6), labels(6);
  for (float& v : data) v = nd(gen);
  for (int i = 0; i < 6; ++i) labels[i] = static_cast<float>(i);
  auto layer = CreateLayer(Param(4));
  auto* mem = dynamic_cast<MemoryDataLayer*>(layer.get());
  ASSERT_NE(mem, nullptr);
  Blob x, y;
  layer->SetUp({}, {&x, &y});
  EXPECT_EQ(x.shape(), (std::vector<int>{4, 2, 1, 3}));
  std::string e = test::ErrorOf([&] { layer->Forward({}, {&x, &y}); });
  EXPECT_NE(e.find("has no data: call Reset first"), std::string::npos) << e;
  e = test::ErrorOf([&] { mem->Reset(data.data(), labels.data(), 6); });
  EXPECT_NE(e.find("6 items is not a positive multiple of the batch size 4"), std::string::npos) << e;
  mem->set_batch_size(3);
  layer->Reshape({}, {&x, &y});
  mem->Reset(data.data(), labels.data(), 6);
  for (int pass = 0; pass < 4; ++pass) {
    layer->Forward({}, {&x, &y});
    ASSERT_EQ(x.shape(), (std::vector<int>{3, 2, 1, 3}));
    const int first = pass % 2 * 3;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(y.cpu_data()[i], first + i);
    for (int k = 0; k < 18; ++k) ASSERT_EQ(x.cpu_data()[k], data[first * 6 + k]);
  }
  e = test::ErrorOf([&] { mem->set_batch_size(4); });
  EXPECT_NE(e.find("batch size 4 does not divide the 6 items"), std::string::npos) << e;
  e = test::ErrorOf([&] { CreateLayer(pb::LayerParameter(Param(0)))->SetUp({}, {&x, &y}); });
  EXPECT_NE(e.find("each > 0"), std::string::npos) << e;
}

}  // namespace
}  // namespace hogstream

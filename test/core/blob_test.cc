#include "core/blob.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "core/context.hpp"
#include "core/proto/hogstream.pb.h"

namespace hogstream {
namespace HS_UNITY_ID {

TEST(Blob, ShapeCountAndAxes) {
  Blob b(std::vector<int>{2, 3, 4, 5});
  EXPECT_EQ(b.count(), 120);
  EXPECT_EQ(b.count(1), 60);
  EXPECT_EQ(b.count(1, 3), 12);
  EXPECT_EQ(b.shape(-1), 5);
  EXPECT_EQ(b.CanonicalAxisIndex(-4), 0);
  EXPECT_THROW(b.CanonicalAxisIndex(4), Bug);
  EXPECT_EQ(b.offset(1, 2, 3, 4), 119);
  EXPECT_EQ(b.offset(std::vector<int>{1, 2}), 100);
  EXPECT_THROW(b.Reshape(std::vector<int>{2, -1}), Error);
}

TEST(Blob, ReshapeKeepsMemoryWhenShrinking) {
  Blob b(std::vector<int>{4, 10});
  const float* p = b.mutable_cpu_data();
  b.Reshape(std::vector<int>{2, 10});
  EXPECT_EQ(b.cpu_data(), p);
  b.Reshape(std::vector<int>{8, 10});
  EXPECT_EQ(b.count(), 80);
}

TEST(Blob, FreshMemoryIsZeroAndAligned) {
  Blob b(std::vector<int>{1000});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.cpu_data()) % 64, 0u);
  EXPECT_EQ(b.asum_data(), 0.f);
}

TEST(Blob, UpdateSubtractsDiff) {
  Blob b(std::vector<int>{3});
  for (int i = 0; i < 3; ++i) {
    b.mutable_cpu_data()[i] = i + 1.f;
    b.mutable_cpu_diff()[i] = 0.5f * i;
  }
  b.Update();
  EXPECT_FLOAT_EQ(b.cpu_data()[0], 1.f);
  EXPECT_FLOAT_EQ(b.cpu_data()[2], 2.f);
}

TEST(Blob, ProtoRoundTripAndShapeCheck) {
  Blob a(std::vector<int>{2, 3});
  for (int i = 0; i < 6; ++i) a.mutable_cpu_data()[i] = i * 0.5f - 1;
  pb::BlobProto p;
  a.ToProto(&p);
  Blob b(std::vector<int>{2, 3});
  b.FromProto(p, false);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.cpu_data()[i], a.cpu_data()[i]);
  Blob wrong(std::vector<int>{3, 2});
  EXPECT_THROW(wrong.FromProto(p, false), Error);
  p.mutable_data()->RemoveLast();
  EXPECT_THROW(b.FromProto(p, true), Error);
}

TEST(Context, EachThreadHasItsOwnGenerator) {
  Context::Get().set_seed(5);
  const auto mine = Context::Get().rng()();
  uint32_t other_first = 0;
  std::thread t([&] {
    // A thread's default context is its own: reseeding it leaves ours alone.
    Context::Get().set_seed(5);
    other_first = Context::Get().rng()();
    Context::Get().set_seed(99);
  });
  t.join();
  EXPECT_EQ(mine, other_first);
  const auto next = Context::Get().rng()();
  Context::Get().set_seed(5);
  Context::Get().rng()();
  EXPECT_EQ(Context::Get().rng()(), next);
}

TEST(Context, ScopeInstallsAndRestores) {
  Context* before = &Context::Get();
  {
    Context mine(Mode::CPU, 0, 11);
    ContextScope scope(&mine);
    EXPECT_EQ(&Context::Get(), &mine);
    EXPECT_EQ(Context::Get().seed(), 11u);
  }
  EXPECT_EQ(&Context::Get(), before);
}

#ifndef HOGSTREAM_CUDA
TEST(Context, GpuModeWithoutCudaIsAClearError) {
  EXPECT_THROW(Context(Mode::GPU, 0, 1), Error);
}
#endif

}  // namespace
}  // namespace hogstream

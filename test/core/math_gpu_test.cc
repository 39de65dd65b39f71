// GPU math against the CPU twins on fresh random inputs. Skips where no GPU is present (and
// on builds without CUDA).
#include <gtest/gtest.h>
#include "test/test_seed.hpp"

#include <random>

#include "core/blob.hpp"
#include "core/context.hpp"
#include "core/math.hpp"
#include "core/math_gpu.hpp"
#include "core/synced_memory.hpp"

#ifdef HOGSTREAM_CUDA
#include <cuda_runtime.h>
#endif

namespace hogstream {
namespace HS_UNITY_ID {

#ifdef HOGSTREAM_CUDA
class MathGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!GpuAvailable()) GTEST_SKIP() << "no GPU on this machine";
    ctx_ = std::make_unique<Context>(Mode::GPU, 0, 7);
    scope_ = std::make_unique<ContextScope>(ctx_.get());
  }
  void TearDown() override {
    scope_.reset();
    ctx_.reset();
  }
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<ContextScope> scope_;
};

void Randomize(Blob* b, std::mt19937& gen) {
  std::normal_distribution<float> d;
  for (int i = 0; i < b->count(); ++i) b->mutable_cpu_data()[i] = d(gen);
}

TEST_F(MathGpu, GemmMatchesCpuInEveryTransposeForm) {
  std::mt19937 gen(::hogstream::TestSeed());
  const int M = 37, N = 29, K = 53;
  for (int t = 0; t < 4; ++t) {
    const Trans ta = t & 1 ? Trans::Yes : Trans::No, tb = t & 2 ? Trans::Yes : Trans::No;
    Blob a(std::vector<int>{M * K}), b(std::vector<int>{K * N}), c(std::vector<int>{M * N});
    Randomize(&a, gen);
    Randomize(&b, gen);
    Randomize(&c, gen);
    std::vector<float> ref(c.cpu_data(), c.cpu_data() + c.count());
    gemm(ta, tb, M, N, K, 0.7f, a.cpu_data(), b.cpu_data(), 0.3f, ref.data());
    gpu_gemm(ta, tb, M, N, K, 0.7f, a.gpu_data(), b.gpu_data(), 0.3f, c.mutable_gpu_data());
    gpu_sync();
    // Relative bound: different summation order, K = 53 terms of unit size.
    for (int i = 0; i < c.count(); ++i)
      ASSERT_NEAR(c.cpu_data()[i], ref[i], 1e-4f * (1 + std::fabs(ref[i]))) << "form " << t;
  }
}

TEST_F(MathGpu, ElementwiseMatchCpu) {
  std::mt19937 gen(::hogstream::TestSeed());
  const int n = 100003;
  Blob x(std::vector<int>{n}), y(std::vector<int>{n});
  Randomize(&x, gen);
  Randomize(&y, gen);
  std::vector<float> ref(y.cpu_data(), y.cpu_data() + n);
  axpy(n, 1.5f, x.cpu_data(), ref.data());
  scal(n, -0.5f, ref.data());
  gpu_axpy(n, 1.5f, x.gpu_data(), y.mutable_gpu_data());
  gpu_scal(n, -0.5f, y.mutable_gpu_data());
  gpu_sync();
  for (int i = 0; i < n; ++i) ASSERT_NEAR(y.cpu_data()[i], ref[i], 1e-6f * (1 + std::fabs(ref[i])));
  gpu_relu(n, 0.1f, x.gpu_data(), y.mutable_gpu_data());
  gpu_sync();
  for (int i = 0; i < n; ++i) {
    const float v = x.cpu_data()[i];
    ASSERT_EQ(y.cpu_data()[i], v > 0 ? v : 0.1f * v);
  }
}
// A GPU-mode thread's host buffers are page-locked (async copies need it); the CPU side of
// this rule is Net.CpuWorkNeverAsksForPinnedMemory.
TEST_F(MathGpu, GpuModeHostMemoryIsPinned) {
  const uint64_t before = PinAttempts();
  bool pinned = false;
  void* p = HostAlloc(1 << 20, &pinned);
  EXPECT_TRUE(pinned);
  EXPECT_EQ(PinAttempts(), before + 1);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  HostFree(p, pinned);
}
#else
TEST(MathGpu, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA (HOGSTREAM_CUDA off)"; }
#endif

}  // namespace
}  // namespace hogstream

// Micro-benchmarks of the engine's kernels at the shapes LeNet and cifar10_quick use, single
// thread: GEMM in each transpose form, the lowerings (im2col, im2row, col2im), and whole layer
// forward/backward passes. Run: build/hogstream_bench [--benchmark_filter=REGEX]
#include <benchmark/benchmark.h>
#include <google/protobuf/text_format.h>

#include <random>
#include <vector>

#include "core/blob.hpp"
#include "core/context.hpp"
#include "core/layer.hpp"
#include "core/math.hpp"

namespace hogstream {
namespace {

std::vector<float> Random(size_t n) {
  std::mt19937 gen(42);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// args: M, N, K, transA, transB
void BM_Gemm(benchmark::State& st) {
  const int M = st.range(0), N = st.range(1), K = st.range(2);
  const Trans ta = st.range(3) ? Trans::Yes : Trans::No, tb = st.range(4) ? Trans::Yes : Trans::No;
  auto a = Random(static_cast<size_t>(M) * K), b = Random(static_cast<size_t>(K) * N);
  std::vector<float> c(static_cast<size_t>(M) * N);
  for (auto _ : st) {
    gemm(ta, tb, M, N, K, 1.f, a.data(), b.data(), 0.f, c.data());
    benchmark::ClobberMemory();
  }
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Gemm)
    ->ArgNames({"M", "N", "K", "tA", "tB"})
    ->Args({32, 1024, 75, 0, 0})    // cifar conv1 forward
    ->Args({32, 256, 800, 0, 0})    // cifar conv2 forward
    ->Args({32, 800, 256, 0, 1})    // conv2 weight gradient, dY * col^T
    ->Args({32, 800, 256, 0, 0})    // conv2 weight gradient, dY * row
    ->Args({32, 75, 1024, 0, 1})    // conv1 weight gradient, dY * col^T
    ->Args({32, 75, 1024, 0, 0})    // conv1 weight gradient, dY * row
    ->Args({800, 256, 32, 1, 0})    // conv2 data gradient
    ->Args({64, 500, 800, 0, 1})    // LeNet ip1 forward
    ->Args({50, 64, 500, 0, 0});    // LeNet conv2 forward

// args: C, H, W, k, pad, stride
template <int kWhich>
void BM_Lower(benchmark::State& st) {
  const int C = st.range(0), H = st.range(1), W = st.range(2), k = st.range(3), p = st.range(4),
            s = st.range(5);
  const int oh = (H + 2 * p - k) / s + 1, ow = (W + 2 * p - k) / s + 1;
  auto im = Random(static_cast<size_t>(C) * H * W);
  std::vector<float> col(static_cast<size_t>(C) * k * k * oh * ow);
  for (auto _ : st) {
    if (kWhich == 0) im2col(im.data(), C, H, W, k, k, p, p, s, s, 1, 1, col.data());
    if (kWhich == 1) im2row(im.data(), C, H, W, k, k, p, p, s, s, 1, 1, col.data());
    if (kWhich == 2) col2im(col.data(), C, H, W, k, k, p, p, s, s, 1, 1, im.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(st.iterations() * col.size() * sizeof(float));
}
BENCHMARK_TEMPLATE(BM_Lower, 0)->Name("BM_im2col")->Args({3, 32, 32, 5, 2, 1})->Args({32, 16, 16, 5, 2, 1});
BENCHMARK_TEMPLATE(BM_Lower, 1)->Name("BM_im2row")->Args({3, 32, 32, 5, 2, 1})->Args({32, 16, 16, 5, 2, 1});
BENCHMARK_TEMPLATE(BM_Lower, 2)->Name("BM_col2im")->Args({32, 16, 16, 5, 2, 1})->Args({20, 12, 12, 5, 0, 1});

// A whole layer at a training shape: forward then backward (all gradients).
void LayerPass(benchmark::State& st, const std::string& text, std::vector<int> in_shape) {
  pb::LayerParameter p;
  HS_CHECK(google::protobuf::TextFormat::ParseFromString(text, &p));
  auto layer = CreateLayer(p);
  Blob x(in_shape), y;
  auto r = Random(x.count());
  std::copy(r.begin(), r.end(), x.mutable_cpu_data());
  layer->SetUp({&x}, {&y});
  for (auto _ : st) {
    layer->Forward({&x}, {&y});
    std::copy_n(y.cpu_data(), y.count(), y.mutable_cpu_diff());
    layer->Backward({&y}, {true}, {&x});
  }
}
void BM_CifarConv2(benchmark::State& st) {
  LayerPass(st, R"(type: "Convolution" convolution_param { num_output: 32 kernel_size: 5 pad: 2
                   weight_filler { type: "gaussian" std: 0.01 } })", {100, 32, 16, 16});
}
void BM_CifarPool1(benchmark::State& st) {
  LayerPass(st, R"(type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 })",
            {100, 32, 32, 32});
}
void BM_CifarPool2(benchmark::State& st) {
  LayerPass(st, R"(type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 })",
            {100, 32, 16, 16});
}
void BM_LenetPool1(benchmark::State& st) {
  LayerPass(st, R"(type: "Pooling" pooling_param { pool: MAX kernel_size: 2 stride: 2 })",
            {64, 20, 24, 24});
}
BENCHMARK(BM_CifarConv2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CifarPool1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CifarPool2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LenetPool1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hogstream

int main(int argc, char** argv) {
  hogstream::Context ctx(hogstream::Mode::CPU, 0, 1);
  hogstream::ContextScope scope(&ctx);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}

// The host<->GPU link's own rate, which the GPU segment is measured against (issue 11: the
// segment must reach >= 80 % of it). A pinned host buffer and a device buffer of TOTAL MiB are
// swept chunk by chunk, each chunk copied to the device and back, the way a segment round moves
// a chunk (master down, delta up). Two forms per chunk size:
//   serial    cudaMemcpy H2D then D2H, chunk after chunk (the plain figure the issue names);
//   overlap   H2D on one stream and D2H of the previous chunk on another, so both copy engines
//             run at once (the most a pipelined segment can get).
// Rates are "weights GB/s": buffer bytes swept per second (each byte crosses twice). Each figure
// is the median of REPEAT sweeps after one warm-up sweep.
//
//   gpu_copy_bench [TOTAL_MIB=256] [REPEAT=5] [DEVICE=0]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_copy_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t total = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;
  const int repeat = argc > 2 ? std::atoi(argv[2]) : 5;
  const int device = argc > 3 ? std::atoi(argv[3]) : 0;
  if (total == 0 || repeat < 1) {
    std::fprintf(stderr, "usage: gpu_copy_bench [TOTAL_MIB>0] [REPEAT>0] [DEVICE]\n");
    return 1;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= device) {
    std::fprintf(stderr, "gpu_copy_bench: no CUDA device %d is visible\n", device);
    return 1;
  }
  void *host = nullptr, *dev = nullptr;
  cudaStream_t up, down;
  if (!Ok(cudaSetDevice(device), "cudaSetDevice") || !Ok(cudaMallocHost(&host, total), "cudaMallocHost") ||
      !Ok(cudaMalloc(&dev, total), "cudaMalloc") || !Ok(cudaStreamCreate(&up), "stream") ||
      !Ok(cudaStreamCreate(&down), "stream"))
    return 1;
  for (size_t i = 0; i < total; i += 4096) static_cast<char*>(host)[i] = static_cast<char>(i >> 12);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  std::printf("device %d: %s, buffer %zu MiB, median of %d sweeps\n", device, prop.name, total >> 20, repeat);
  std::printf("%-10s %14s %14s\n", "chunk", "serial GB/s", "overlap GB/s");
  using clock = std::chrono::steady_clock;
  for (size_t chunk = 64 << 10; chunk <= (16u << 20) && chunk <= total; chunk *= 4) {
    const size_t chunks = total / chunk;
    auto sweep = [&](bool overlap) {
      char* h = static_cast<char*>(host);
      char* d = static_cast<char*>(dev);
      const auto t0 = clock::now();
      for (size_t c = 0; c < chunks; ++c) {
        if (!overlap) {
          cudaMemcpy(d + c * chunk, h + c * chunk, chunk, cudaMemcpyHostToDevice);
          cudaMemcpy(h + c * chunk, d + c * chunk, chunk, cudaMemcpyDeviceToHost);
        } else {
          cudaMemcpyAsync(d + c * chunk, h + c * chunk, chunk, cudaMemcpyHostToDevice, up);
          if (c > 0) cudaMemcpyAsync(h + (c - 1) * chunk, d + (c - 1) * chunk, chunk, cudaMemcpyDeviceToHost, down);
          // The next chunk's D2H must follow this chunk's H2D: one stream waits on the other.
          cudaStreamSynchronize(up);
        }
      }
      if (overlap) {
        cudaMemcpyAsync(h + (chunks - 1) * chunk, d + (chunks - 1) * chunk, chunk, cudaMemcpyDeviceToHost, down);
        cudaStreamSynchronize(down);
      }
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      return static_cast<double>(chunks * chunk) / s / 1e9;
    };
    double rate[2];
    for (int o = 0; o < 2; ++o) {
      sweep(o);  // warm-up
      std::vector<double> r;
      for (int k = 0; k < repeat; ++k) r.push_back(sweep(o));
      rate[o] = Median(r);
    }
    if (!Ok(cudaGetLastError(), "copies")) return 1;
    std::printf("%-10s %14.2f %14.2f\n",
                (chunk >= (1u << 20) ? std::to_string(chunk >> 20) + " MiB" : std::to_string(chunk >> 10) + " KiB").c_str(),
                rate[0], rate[1]);
  }
  cudaFree(dev);
  cudaFreeHost(host);
  return 0;
}

// The GPU<->host segment's own rate (sync/gpu_segment.hpp), to set beside the link's
// (bench/gpu_copy_bench.cpp): a host master and a device copy of TOTAL MiB, no solver, the
// segment's daemon sweeping for SECONDS per chunk size. Each sweep moves every weight down (the
// position) and back up (the delta) and runs the rule kernel over it, so "weights GB/s" (buffer
// bytes swept per second) compares with gpu_copy_bench's columns directly.
//
//   gpu_segment_bench [TOTAL_MIB=256] [SECONDS=2] [SLOTS=4]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include "core/context.hpp"
#include "core/device_api.hpp"
#include "core/gpu_engine.hpp"
#include "sync/gpu_segment.hpp"

int main(int argc, char** argv) {
  using namespace hogstream;
  const size_t total = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  const long slots = argc > 3 ? std::atol(argv[3]) : 4;
  if (total == 0 || seconds <= 0 || slots < 1) {
    std::fprintf(stderr, "usage: gpu_segment_bench [TOTAL_MIB>0] [SECONDS>0] [SLOTS>0]\n");
    return 1;
  }
  if (!GpuAvailable()) {
    std::fprintf(stderr, "gpu_segment_bench: no CUDA device is visible\n");
    return 1;
  }
  try {
    Context ctx(Mode::GPU, 0, 1);  // loads the GPU engine, which registers the CUDA runtime
    ContextScope scope(&ctx);
    DeviceApi* api = LoadedDeviceApi();
    if (!api) {
      std::fprintf(stderr, "gpu_segment_bench: no device runtime registered (a CPU-only build?)\n");
      return 1;
    }
    const size_t n = total / sizeof(float);
    std::vector<float> master(n, 1.f);
    auto* device = static_cast<float*>(api->Alloc(n * sizeof(float)));
    std::printf("%s, buffer %zu MiB, %.1f s per row, %ld slots\n", api->name(), total >> 20, seconds, slots);
    std::printf("%-10s %10s %16s\n", "chunk", "sweeps/s", "weights GB/s");
    for (size_t chunk = 64 << 10; chunk <= (16u << 20) && chunk <= total; chunk *= 4) {
      GpuSegmentOptions o;
      o.chunk_floats = static_cast<uint32_t>(chunk / sizeof(float));
      o.slots = static_cast<uint32_t>(slots);
      GpuSegment seg(*api, master.data(), device, n, o);
      const auto t0 = std::chrono::steady_clock::now();
      seg.Start();
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      seg.Stop();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double sweeps = static_cast<double>(seg.stats().chunks) / static_cast<double>(seg.chunks()) / secs;
      std::printf("%7zu KiB %10.2f %16.2f\n", chunk >> 10, sweeps, sweeps * static_cast<double>(total) * 1e-9);
    }
    api->Free(device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_segment_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

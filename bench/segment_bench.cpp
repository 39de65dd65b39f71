// Sweep rate of an in-process Segment (one daemon thread, no solvers) over a large buffer, per
// chunk size and access mode, against the memory bandwidth measured by memcpy in the same run.
// Prints a table. Not a Google Benchmark: one sweep of 64 MiB takes tens of milliseconds and
// the daemon runs on its own thread, so a timed window over its own counter fits better.
//
// Bound: per element a sweep moves 44 bytes through memory:
//   position copy  master w -> slot          1 read  + 1 write
//   slave          reads w, last, pos; writes w, last, delta   3 reads + 3 writes
//   master         reads delta, w; writes w   2 reads + 1 write
//   = 6 reads + 5 writes = 11 x 4 bytes.
// memcpy of B bytes moves 2B (B read + B written), so bandwidth = 2B / t, and the best a sweep
// can do is bandwidth / (44 n) sweeps per second. Small chunks keep the slots (pos, delta) in
// cache, so DRAM sees only master w, slave w and last (24 bytes/element read or written back):
// beating "100%" of the 44-byte bound is possible there; the last column is against that
// stricter 24-byte bound (master w, slave w, last: each read once and written back once).
//
// Run: segment_bench [MiB=64] [seconds per row=1] [--json]
// --json: one JSON object per line instead of the table (a "memcpy" row, then one "sweep" row
// per access mode and chunk size), for scripts and jq:
//   {"row":"memcpy","mib":64,"floats":16777216,"bandwidth_gbs":20.1,"bound_sweeps_per_s":27.2}
//   {"row":"sweep","access":"plain","chunk_kib":64,"sweeps_per_s":21.3,"weights_gbs":1.43,
//    "rule_traffic_gbs":15.7,"of_bound":0.78,"of_24b_bound":0.43}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "sync/local_segment.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using hogstream::Access;

struct Freer {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], Freer>;

Buffer Alloc(size_t n, float fill) {
  Buffer b(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64)));
  for (size_t i = 0; i < n; ++i) b[i] = fill + static_cast<float>(i % 1000) * 1e-3f;
  return b;
}

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Best-of-3 memcpy bandwidth, counting read + write bytes.
double MemcpyBandwidth(size_t n, double secs) {
  Buffer a = Alloc(n, 1), b = Alloc(n, 2);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    int iters = 0;
    const auto t0 = Clock::now();
    do {
      std::memcpy(iters % 2 ? a.get() : b.get(), iters % 2 ? b.get() : a.get(), n * sizeof(float));
      ++iters;
    } while (Seconds(t0, Clock::now()) < secs / 3);
    best = std::max(best, 2.0 * n * sizeof(float) * iters / Seconds(t0, Clock::now()));
  }
  return best;
}

// Sweeps per second of the daemon, timed between two sweep boundaries at least `secs` apart.
double SweepRate(float* master, float* slave, size_t n, uint32_t chunk_floats, Access access, double secs) {
  hogstream::SegmentOptions opt;
  opt.chunk_floats = chunk_floats;
  opt.access = access;
  hogstream::Segment seg(master, slave, n, opt);
  seg.Start();
  auto wait_next = [&](uint64_t after) {
    uint64_t s;
    while ((s = seg.stats().sweeps) <= after) std::this_thread::sleep_for(std::chrono::microseconds(50));
    return std::make_pair(s, Clock::now());
  };
  auto [s0, t0] = wait_next(seg.stats().sweeps);  // warm: first full sweep done
  uint64_t s1 = s0;
  Clock::time_point t1;
  do {
    std::tie(s1, t1) = wait_next(s1);
  } while (Seconds(t0, t1) < secs);
  seg.Stop();
  return static_cast<double>(s1 - s0) / Seconds(t0, t1);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::vector<const char*> args;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json = true;
    else args.push_back(argv[i]);
  }
  const size_t mib = args.size() > 0 ? std::strtoul(args[0], nullptr, 10) : 64;
  const double secs = args.size() > 1 ? std::atof(args[1]) : 1.0;
  if (mib == 0 || !(secs > 0)) {
    std::fprintf(stderr, "usage: segment_bench [MiB=64] [seconds per row=1] [--json]\n");
    return 1;
  }
  const size_t n = mib * (1u << 20) / sizeof(float);
  const double bytes = n * sizeof(float);
  constexpr double kRuleBytes = 44;  // per element per sweep, see the top of this file
  constexpr double kDramBytes = 24;  // the part that must reach DRAM when slots stay in cache

  const double bw = MemcpyBandwidth(n, secs);
  if (json) {
    std::printf("{\"row\":\"memcpy\",\"mib\":%zu,\"floats\":%zu,\"bandwidth_gbs\":%.4f,"
                "\"bound_sweeps_per_s\":%.4f}\n", mib, n, bw / 1e9, bw / (kRuleBytes * n));
  } else {
    std::printf("buffer %zu MiB (%zu floats); memcpy bandwidth %.2f GB/s (read+write)\n", mib, n, bw / 1e9);
    std::printf("bound = bandwidth / (44 B x n) = %.2f sweeps/s = %.2f GB/s of weights\n\n",
                bw / (kRuleBytes * n), bw / (kRuleBytes * n) * bytes / 1e9);
    std::printf("%-7s %-8s %10s %13s %18s %9s %12s\n", "access", "chunk", "sweeps/s", "weights GB/s",
                "rule traffic GB/s", "of bound", "of 24B bound");
  }

  Buffer master = Alloc(n, 1), slave = Alloc(n, 1);
  const size_t kib[] = {4, 16, 64, 256, 1024, 4096};
  for (Access access : {Access::kPlain, Access::kAtomic}) {
    for (size_t k : kib) {
      if (access == Access::kAtomic && k != 64 && k != 1024) continue;
      const auto chunk = static_cast<uint32_t>(k * 1024 / sizeof(float));
      const double rate = SweepRate(master.get(), slave.get(), n, chunk, access, secs);
      char label[16];
      std::snprintf(label, sizeof label, k >= 1024 ? "%zu MiB" : "%zu KiB", k >= 1024 ? k / 1024 : k);
      if (json) {
        std::printf("{\"row\":\"sweep\",\"access\":\"%s\",\"chunk_kib\":%zu,\"sweeps_per_s\":%.4f,"
                    "\"weights_gbs\":%.4f,\"rule_traffic_gbs\":%.4f,\"of_bound\":%.4f,"
                    "\"of_24b_bound\":%.4f}\n",
                    access == Access::kPlain ? "plain" : "atomic", k, rate, rate * bytes / 1e9,
                    rate * kRuleBytes * n / 1e9, rate * kRuleBytes * n / bw, rate * kDramBytes * n / bw);
      } else {
        std::printf("%-7s %-8s %10.2f %13.2f %18.2f %8.0f%% %11.0f%%\n",
                    access == Access::kPlain ? "plain" : "atomic", label, rate, rate * bytes / 1e9,
                    rate * kRuleBytes * n / 1e9, 100 * rate * kRuleBytes * n / bw,
                    100 * rate * kDramBytes * n / bw);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

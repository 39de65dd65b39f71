// LaneSums: vectorisable double-precision sums in a fixed order.
#pragma once

#include <algorithm>
#include <array>

namespace hogstream {

// Double-precision sums (dot, asum, sumsq and the layers' per-channel statistics) go through
// LaneSums: term i is added into lane i % kSumLanes and the lanes are added in order at the
// end. A fixed order (the same result on every machine and build), and kSumLanes independent
// chains instead of one serial chain of double adds (which the compiler may not reorder), so
// the loop vectorises: ~10x faster than the serial loop on long sums.
constexpr int kSumLanes = 32;
template <int Sums>
struct LaneSums {
  double lane[Sums][kSumLanes] = {};
  // Adds term(i) for i < n (term returns one double, or Sums of them as an array).
  template <typename Term>
  void Add(int n, Term term) {
    int i = 0;
    for (; i + kSumLanes <= n; i += kSumLanes) {
      for (int l = 0; l < kSumLanes; ++l) Put(l, term(i + l));
    }
    for (int l = 0; i < n; ++i, ++l) Put(l, term(i));
  }
  double Total(int s = 0) const {
    double t = 0;
    for (int l = 0; l < kSumLanes; ++l) t += lane[s][l];
    return t;
  }

 private:
  void Put(int l, double v) { lane[0][l] += v; }
  template <typename A>
  void Put(int l, const A& v) {
    for (int s = 0; s < Sums; ++s) lane[s][l] += v[s];
  }
};

// SegmentSums: Sums sums of one short segment (a channel's values in one image), added into
// out[0..Sums), for layers that walk an N x C x spatial blob in memory order and keep
// per-channel totals. Terms are float (term returns std::array<float, Sums>); they go into
// kSegmentLanes float lanes, a lane takes at most kSegmentLanes terms before the block's
// lanes are added in double into out, so each float sum is short. A fixed order, as above.
// Why memory order: a channel-by-channel walk jumps an image's length between segments,
// which the prefetcher does not follow; from memory it is 2-3x slower on 8x8..32x32 maps.
constexpr int kSegmentLanes = 16;
template <int Sums, typename Term>
void SegmentSums(int n, Term term, double* out) {
  for (int i = 0; i < n;) {
    float lane[Sums][kSegmentLanes] = {};
    const int end = std::min(n, i + kSegmentLanes * kSegmentLanes);
    for (; i + kSegmentLanes <= end; i += kSegmentLanes) {
      for (int l = 0; l < kSegmentLanes; ++l) {
        const std::array<float, Sums> v = term(i + l);
        for (int s = 0; s < Sums; ++s) lane[s][l] += v[s];
      }
    }
    for (int l = 0; i < end; ++i, ++l) {
      const std::array<float, Sums> v = term(i);
      for (int s = 0; s < Sums; ++s) lane[s][l] += v[s];
    }
    for (int s = 0; s < Sums; ++s) {
      double t = 0;
      for (int l = 0; l < kSegmentLanes; ++l) t += lane[s][l];
      out[s] += t;
    }
  }
}

}  // namespace hogstream

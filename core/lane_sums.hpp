// LaneSums: vectorisable double-precision sums in a fixed order.
#pragma once

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

}  // namespace hogstream

// What `hogstream describe` and `hogstream time` print, as library calls so that tests and
// other programs can use them. Neither changes the net's weights.
#pragma once

#include <ostream>

#include "core/net.hpp"

namespace hogstream {

// One row per layer (name, type, top shapes, parameter count), then `params: N`.
void DescribeNet(const Net& net, std::ostream& os);

struct TimingReport {
  int iterations = 0;
  std::vector<double> forward_ms, backward_ms;  // per layer, mean over iterations
  double mean_forward_ms = 0, mean_backward_ms = 0, mean_total_ms = 0, median_total_ms = 0;
};

// Times `iterations` forward+backward passes after one warm-up pass; fills Input-layer tops
// with random values first (1-d tops, i.e. labels, with 0).
TimingReport TimeNet(Net& net, int iterations);
void PrintTiming(const Net& net, const TimingReport& r, std::ostream& os);

}  // namespace hogstream

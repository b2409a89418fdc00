// The bench's one statistic, shared by remora-bench (results.hpp) and remora-copy-floor.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace remora::bench {

// Median of `samples` (0 when empty); the mean of the middle two for an even count.
inline double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  size_t n = samples.size();
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

}  // namespace remora::bench

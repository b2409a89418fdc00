// The raw loopback TCP ceiling of this machine, measured beside Remora's figures: `bytes`
// split across N plain TCP connections (one sender and one receiver thread each), for each
// N, best of `reps` (issue 21). What one stream carries bounds a single-connection transport;
// what N carry bounds bulk striped over N data connections.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace remora::bench {

struct CeilingPoint {
  int streams = 0;
  double gb_per_s = 0;  // 1e9 bytes per second; 0 if it could not be measured
  std::string error;
};

std::vector<CeilingPoint> measure_tcp_ceiling(const std::vector<int>& streams, uint64_t bytes, int reps);

}  // namespace remora::bench

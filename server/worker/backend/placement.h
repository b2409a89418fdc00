// Planned migration's placements (Driver::MemPlace; issue 40, N5): what a placement holds.
// The cuda backend maps whole granules of its device (2 MiB on current GPUs) at the placed
// addresses: allocations that share a granule share one extent, and each extent holds every
// granule it touches. A placement is charged what its extents hold, not the sum of its
// allocations' sizes - else 2048 allocations of 1 byte, 2 MiB apart, would be charged 2 KiB
// and hold 4 GiB. Pure arithmetic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "worker/backend/driver.h"

namespace remora::worker {

struct PlacementExtent {
  DevPtr lo = 0, hi = 0;  // whole granules: [lo, hi)
  std::vector<std::pair<DevPtr, uint64_t>> members;  // the allocations in it, by address
  uint64_t bytes() const { return hi - lo; }
  // What it holds beyond its allocations' sizes.
  uint64_t slack() const {
    uint64_t used = 0;
    for (const auto& m : members) used += m.second;
    return bytes() > used ? bytes() - used : 0;
  }
};

// The extents of `allocations` ({address, bytes}, sorted by address, not overlapping, each
// ending below 2^60 - callers refuse anything else) in granules of `granule` bytes.
inline std::vector<PlacementExtent> PlacementExtents(const std::vector<std::pair<DevPtr, uint64_t>>& allocations,
                                                     uint64_t granule) {
  granule = std::max<uint64_t>(granule, 1);
  std::vector<PlacementExtent> extents;
  for (const auto& [at, bytes] : allocations) {
    DevPtr lo = at / granule * granule;
    DevPtr hi = (at + std::max<uint64_t>(bytes, 1) + granule - 1) / granule * granule;
    if (!extents.empty() && lo < extents.back().hi) {
      extents.back().hi = std::max(extents.back().hi, hi);
    } else {
      extents.push_back({lo, hi, {}});
    }
    extents.back().members.emplace_back(at, bytes);
  }
  return extents;
}

// Bytes a placement of `allocations` holds (the sum of its extents).
inline uint64_t PlacementBytes(const std::vector<std::pair<DevPtr, uint64_t>>& allocations, uint64_t granule) {
  uint64_t sum = 0;
  for (const PlacementExtent& e : PlacementExtents(allocations, granule)) sum += e.bytes();
  return sum;
}

}  // namespace remora::worker

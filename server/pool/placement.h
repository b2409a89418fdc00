// Choosing a tenant's GPUs across the pool's servers (remoractl pool attach, the Slurm
// prolog, the Kubernetes driver). Pure: a PoolView in, the GPUs to assign out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pool/records.h"

namespace remora::pool {

enum class PlacementPolicy {
  // Least loaded: the GPUs with the fewest tenants, then the least memory charged; among
  // equals, servers holding fewer of the tenant's GPUs first (a tenant's GPUs spread).
  kSpread,
  // Packed: the servers that already hold the tenant's GPUs (or this request's), then the
  // busiest servers, so whole servers stay free; on a server, its least loaded GPU.
  kPack,
};

Result<PlacementPolicy> ParsePlacementPolicy(std::string_view text);  // "spread" | "pack"
std::string_view PlacementPolicyName(PlacementPolicy p);

struct PlacementRequest {
  std::string tenant;
  int count = 1;
  PlacementPolicy policy = PlacementPolicy::kSpread;
  std::string model;             // the GPU's name contains this (case-insensitive); "": any
  uint64_t min_free_memory = 0;  // its memory not charged to tenants, at least this
  std::vector<std::string> servers;  // only these servers; empty: any
};

// `count` GPUs of live, healthy servers not yet assigned to the tenant, in the order they
// were chosen. kInvalidValue naming what is missing when fewer qualify (nothing is chosen
// then).
Result<std::vector<Assignment>> Place(const PoolView& view, const PlacementRequest& request);

}  // namespace remora::pool

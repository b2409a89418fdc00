#include "pool/placement.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>

namespace remora::pool {

Result<PlacementPolicy> ParsePlacementPolicy(std::string_view text) {
  if (text == "spread" || text == "least-loaded") return PlacementPolicy::kSpread;
  if (text == "pack" || text == "packed") return PlacementPolicy::kPack;
  return Error(Err::kInvalidValue, "placement policy '{}': expected spread (least loaded) or pack", text);
}

std::string_view PlacementPolicyName(PlacementPolicy p) { return p == PlacementPolicy::kPack ? "pack" : "spread"; }

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Candidate {
  const ServerRecord* server;
  const PoolGpu* gpu;
  int tenants = 0;  // tenants assigned to it
};

}  // namespace

Result<std::vector<Assignment>> Place(const PoolView& view, const PlacementRequest& req) {
  if (req.count <= 0) return Error(Err::kInvalidValue, "a placement needs at least one GPU");
  std::map<std::pair<std::string, std::string>, int> load;  // (server, uuid) -> tenants
  std::set<std::pair<std::string, std::string>> own;        // the tenant's own GPUs
  std::map<std::string, int> on_server;                      // the tenant's GPUs per server
  for (const Assignment& a : view.assignments) {
    load[{a.server, a.uuid}]++;
    if (a.tenant == req.tenant) {
      own.insert({a.server, a.uuid});
      on_server[a.server]++;
    }
  }
  std::map<std::string, uint64_t> server_used;
  std::vector<Candidate> candidates;
  size_t alive = 0, matching = 0;
  std::string model = Lower(req.model);
  for (const auto& [name, s] : view.servers) {
    if (!req.servers.empty() && std::find(req.servers.begin(), req.servers.end(), name) == req.servers.end()) continue;
    if (s.health != "ok") continue;
    alive++;
    for (const PoolGpu& g : s.gpus) {
      server_used[name] += g.used;
      if (!model.empty() && Lower(g.name).find(model) == std::string::npos) continue;
      if (g.total_memory < g.used || g.total_memory - g.used < req.min_free_memory) continue;
      matching++;
      if (own.count({name, g.uuid})) continue;
      candidates.push_back({&s, &g, load[{name, g.uuid}]});
    }
  }
  if (static_cast<int>(candidates.size()) < req.count) {
    std::string what = req.model.empty() ? "" : fmt::format(" named like '{}'", req.model);
    if (req.min_free_memory) what += fmt::format(" with {} bytes free", req.min_free_memory);
    return Error(Err::kInvalidValue, "the pool has {} GPU(s){} on {} live server(s), {} of them not yet tenant '{}''s: {} asked",
                 matching, what, alive, candidates.size(), req.tenant, req.count);
  }
  std::vector<Assignment> out;
  std::vector<bool> taken(candidates.size(), false);
  for (int n = 0; n < req.count; n++) {
    size_t best = SIZE_MAX;
    auto key = [&](const Candidate& c) {
      const std::string& s = c.server->name;
      int mine = on_server[s];
      if (req.policy == PlacementPolicy::kSpread)
        return std::make_tuple(int64_t{c.tenants}, int64_t{mine}, int64_t(c.gpu->used), int64_t{0}, s, c.gpu->index);
      return std::make_tuple(int64_t{-mine}, -int64_t(server_used[s]), int64_t{c.tenants}, int64_t(c.gpu->used), s,
                             c.gpu->index);
    };
    for (size_t i = 0; i < candidates.size(); i++)
      if (!taken[i] && (best == SIZE_MAX || key(candidates[i]) < key(candidates[best]))) best = i;
    taken[best] = true;
    const Candidate& c = candidates[best];
    on_server[c.server->name]++;
    out.push_back({req.tenant, c.server->name, c.gpu->uuid, c.gpu->index, 0});
  }
  return out;
}

}  // namespace remora::pool

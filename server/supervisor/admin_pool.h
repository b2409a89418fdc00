// The admin API of a pool's server (supervisor --pool): tenant changes go to the pool's store
// (pool/pool_admin.h) instead of this server's database, and every server applies them from
// its mirror. Run on the admin thread (they block on the store), never on the loop thread.
// After a change each call waits (at most kApplyWaitMs) until every live server applied it,
// so a tenant created here is served by every server when remoractl returns.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "admin.capnp.h"
#include "remora/base/status.h"
#include "sched/compute_settings.h"

namespace remora::server {

class Supervisor;

namespace admin_pool {

inline constexpr int kApplyWaitMs = 5000;

// Returns the token (shown once). `gpus`: GPUs of this server to assign at once.
Result<std::string> CreateTenant(Supervisor& sup, const std::string& name, std::optional<uint64_t> memory_limit,
                                 const std::vector<int>& gpus, std::optional<uint64_t> pool_limit);
// Refused while the tenant has sessions on any server (their last reports) unless `force`.
Status DeleteTenant(Supervisor& sup, const std::string& name, bool force);
Status SetMemoryLimit(Supervisor& sup, const std::string& name, std::optional<uint64_t> limit);
Status SetPoolLimit(Supervisor& sup, const std::string& name, std::optional<uint64_t> limit);
Status SetCompute(Supervisor& sup, const std::string& name, const sched::ComputeSettings& settings);
// This server's GPU `gpu`.
Status Attach(Supervisor& sup, const std::string& name, int gpu);
Status Detach(Supervisor& sup, const std::string& name, int gpu);

Status FillInfo(Supervisor& sup, admin::rpc::PoolInfo::Builder out);
Status Place(Supervisor& sup, admin::rpc::Admin::PoolAttachParams::Reader in, admin::rpc::Admin::PoolAttachResults::Builder out);
Status Detach(Supervisor& sup, const std::string& tenant, const std::string& server, int gpu, int* detached);
// GPU `gpu` of any server of the pool.
Status Assign(Supervisor& sup, const std::string& tenant, const std::string& server, int gpu);

}  // namespace admin_pool
}  // namespace remora::server

// The server's durable state: tenants (name, token key, memory limit, compute settings),
// their GPU attachments and the session id counter. One interface; SQLite (WAL) implements it.
// Thread-safety: implementations serialize calls internally.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remora/base/status.h"
#include "remora/protocol/auth.h"
#include "sched/compute_settings.h"

namespace remora::server {

struct TenantRecord {
  std::string name;
  Key stored_key{};                     // StoredKey of the token (see auth.h); never the token
  std::optional<Key> server_key;        // ServerKey of the token; absent for tenants made before it
  std::optional<uint64_t> memory_limit; // bytes per GPU; nullopt = unlimited
  std::vector<std::string> gpu_uuids;   // attached GPUs of this server, by UUID
  int64_t created_at = 0;               // unix seconds
  sched::ComputeSettings compute;       // share, cap and priority on each GPU (default: none)
  // A pool's tenant (server/pool/): bytes across every GPU of every server of the pool;
  // nullopt = unlimited. Not kept by the SQLite store (one server has no pool).
  std::optional<uint64_t> pool_limit;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  virtual Result<std::vector<TenantRecord>> LoadTenants() = 0;
  // kInvalidValue if the tenant exists.
  virtual Status CreateTenant(const TenantRecord& t) = 0;
  // kInvalidValue ("no such tenant") if absent. Attachments go with it.
  virtual Status DeleteTenant(const std::string& name) = 0;
  virtual Status SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) = 0;
  // kInvalidValue ("no such tenant") if absent.
  virtual Status SetCompute(const std::string& name, const sched::ComputeSettings& settings) = 0;
  virtual Status Attach(const std::string& name, const std::string& gpu_uuid) = 0;
  virtual Status Detach(const std::string& name, const std::string& gpu_uuid) = 0;
  // Monotonic across restarts.
  virtual Result<uint64_t> NextSessionId() = 0;
};

// Opens (creating if needed) DIR/state.db. A file that is not a Remora state database, is
// corrupt or unreadable is an error with a clear message: the server must not start with
// empty state in its place.
Result<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& state_dir);

}  // namespace remora::server

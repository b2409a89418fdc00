// A synchronous client of remora-server's admin API (server/common/admin.capnp), for
// remoractl and remorafs. No Cap'n Proto types in this header.
//
// Thread-safety: an AdminClient may be used from any number of threads at once; it runs the
// RPC on a private thread with its own event loop and each method blocks until its answer
// arrives. Errors are Status values with one-line messages: the server's refusal (its code
// is the server's Err), or kDevicesUnavailable when the server cannot be reached or the
// connection breaks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remora/base/status.h"
#include "sched/compute_settings.h"

namespace remora::admin {

struct ConnectOptions {
  // One of the two:
  std::string state_dir;  // the server's --state-dir: its admin.sock (root or the server's uid)
  std::string url;        // unix:///path/admin.sock or tcp://HOST:PORT
  // For tcp:// URLs: the admin token (remora1.admin.<secret>); it never crosses the wire.
  std::string token;
  int timeout_ms = 10000;  // connecting, and each call
};

struct ServerInfo {
  std::string version;
  std::string hostname;
  std::string backend;  // "cuda" or "host-emulated"
  bool emulated = false;
  int driver_version = 0;
  int pid = 0;
  int64_t started_at = 0;
  bool auth_required = true;
};

struct TenantGpuUsage {
  int gpu = 0;
  uint64_t used = 0;
  uint64_t context_overhead = 0;
  uint64_t gpu_time_ns = 0;  // measured while compute shares are enforced on the GPU
};

struct TenantInfo {
  std::string name;
  std::optional<uint64_t> memory_limit;  // per GPU; nullopt = unlimited
  uint64_t memory_used = 0;              // sum over GPUs, counted against the limit
  uint64_t context_overhead = 0;         // sum over GPUs, not counted
  uint64_t refused = 0;                  // allocations refused by the quota
  uint32_t sessions = 0;
  std::vector<int> gpus;                 // attached GPUs, ascending
  std::vector<TenantGpuUsage> usage;     // per GPU (attached or in use)
  int64_t created_at = 0;
  sched::ComputeSettings compute;        // share, cap, priority
  uint64_t gpu_time_ns = 0;              // sum over GPUs
  std::optional<uint64_t> pool_limit;    // a pool's tenant: bytes across the pool; nullopt = none
  uint64_t pool_share = 0;               // the part of pool_limit this server holds now
};

struct GpuInfo {
  int index = 0;
  std::string name;
  std::string uuid;
  std::string pci_bus_id;
  uint64_t total_memory = 0;
  uint64_t used = 0;                 // all tenants
  std::vector<std::string> tenants;  // attached
  bool compute_enforced = false;     // its work is scheduled by compute shares
  uint64_t turn_session = 0;         // the session whose turn it is (0: none)
};

struct SessionInfo {
  uint64_t id = 0;
  std::string tenant;
  uint32_t client_pid = 0;
  std::string host;
  std::string user;
  std::string program;
  std::string transport;
  std::string peer;
  int64_t started_at = 0;
  uint64_t memory_current = 0;
  int worker_pid = 0;
  std::string data_path;  // how bulk moves: shared-memory | socket | rdma-host-staged
  std::string migrate_failed = {};  // why the last move asked for did not happen ("": none)
  uint64_t gpu_time_ns = 0;  // all GPUs, measured while compute shares are enforced
};

// ---- a pool of servers (remora-server --pool) ----
struct PoolServerInfo {
  std::string name;
  std::vector<std::string> urls;
  std::string backend;
  bool emulated = false;
  std::string version;
  std::string health;  // ok | draining
  int64_t started_at = 0, updated_at = 0;
  uint32_t sessions = 0;
  int64_t applied_revision = 0;
};

struct PoolGpuInfo {
  std::string server;
  int index = 0;
  std::string uuid, name;
  uint64_t total_memory = 0, used = 0;
  std::vector<std::string> tenants;
  bool gone = false;  // its server left the pool: assigned, unreachable
};

struct PoolTenantHere {
  std::string server;
  uint64_t used = 0;
  uint32_t sessions = 0;
  uint64_t share = 0;
};

struct PoolTenantInfo {
  std::string name;
  std::optional<uint64_t> memory_limit;  // per GPU
  std::optional<uint64_t> pool_limit;    // across the pool
  uint64_t used = 0, shares = 0;
  uint32_t sessions = 0, gpus = 0;
  std::vector<PoolTenantHere> servers;
};

struct PoolAssignmentInfo {
  std::string tenant, server;
  int gpu = 0;
  std::string uuid;
  bool gone = false;
};

struct PoolInfo {
  std::string name;  // the answering server's
  std::vector<std::string> endpoints;
  std::string prefix;
  int64_t revision = 0;
  bool fresh = false;
  bool registered = false;
  std::vector<PoolServerInfo> servers;
  std::vector<PoolGpuInfo> gpus;
  std::vector<PoolTenantInfo> tenants;
  std::vector<PoolAssignmentInfo> assignments;
};

struct PoolPlacement {
  std::string tenant;
  int count = 1;
  std::string policy;  // spread | pack ("" : spread)
  std::string model;
  uint64_t min_free_memory = 0;
  std::vector<std::string> servers;
};

// The admin token in `path` (its first line, trailing blanks dropped). kInitializationError,
// naming the file, if it cannot be read.
Result<std::string> ReadTokenFile(const std::string& path);

// Where a command line (remoractl, remorafs) says to connect: `url` if given (a tcp:// URL
// takes the admin token from `token_file`, else $REMORA_ADMIN_TOKEN), else `state_dir`, else
// $REMORA_STATE_DIR. kInvalidValue when the command line does not say enough (a usage
// error); ReadTokenFile's error otherwise.
Result<ConnectOptions> ConnectOptionsFrom(const std::string& state_dir, const std::string& url,
                                          const std::string& token_file);

class AdminClient {
 public:
  virtual ~AdminClient() = default;

  // Connects (and logs in, over TCP). Errors name the socket or address.
  static Result<std::unique_ptr<AdminClient>> Connect(const ConnectOptions& options);

  virtual Result<ServerInfo> Info() = 0;
  // Returns the tenant's token (shown once). gpus: nullopt = every GPU of the server.
  virtual Result<std::string> CreateTenant(const std::string& name, std::optional<uint64_t> memory_limit,
                                           std::optional<std::vector<int>> gpus) = 0;
  virtual Result<std::vector<TenantInfo>> ListTenants() = 0;
  virtual Status SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) = 0;
  // Replaces the tenant's compute settings (applies to running sessions). Clients that
  // predate compute shares (test doubles) answer kNotSupported.
  virtual Status SetCompute(const std::string& name, const sched::ComputeSettings& settings) {
    (void)name;
    (void)settings;
    return Status(Err::kNotSupported, "this admin client cannot set compute settings");
  }
  virtual Status DeleteTenant(const std::string& name, bool force) = 0;
  virtual Result<std::vector<GpuInfo>> ListGpus() = 0;
  virtual Status Attach(const std::string& name, int gpu) = 0;
  virtual Status Detach(const std::string& name, int gpu) = 0;
  virtual Result<std::vector<SessionInfo>> ListSessions() = 0;
  virtual Status KillSession(uint64_t id, const std::string& reason = "") = 0;
  // Planned migration: asks session `id`'s application to move it to the server at `url`
  // (`token`: the tenant's token there, empty for the application's own). Returns once
  // asked; the session leaves this server's list when the move is complete.
  virtual Status MigrateSession(uint64_t id, const std::string& url, const std::string& token) {
    (void)id;
    (void)url;
    (void)token;
    return Status(Err::kNotSupported, "this admin client cannot migrate sessions");
  }

  // ---- a pool (the server answers kNotSupported unless it runs with --pool) ----
  // A tenant of the pool, with a limit across the pool (nullopt: none); gpus: GPUs of the
  // answering server to assign at once (nullopt: none).
  virtual Result<std::string> CreatePoolTenant(const std::string& name, std::optional<uint64_t> memory_limit,
                                               std::optional<uint64_t> pool_limit, std::optional<std::vector<int>> gpus) {
    (void)name, (void)memory_limit, (void)pool_limit, (void)gpus;
    return Status(Err::kNotSupported, "this admin client knows no pool");
  }
  virtual Result<PoolInfo> Pool() { return Status(Err::kNotSupported, "this admin client knows no pool"); }
  virtual Result<std::vector<PoolAssignmentInfo>> PoolAttach(const PoolPlacement& request) {
    (void)request;
    return Status(Err::kNotSupported, "this admin client knows no pool");
  }
  // One GPU (server, index), all of a server's (gpu < 0) or all (server ""). Returns how many.
  virtual Result<int> PoolDetach(const std::string& tenant, const std::string& server, int gpu) {
    (void)tenant, (void)server, (void)gpu;
    return Status(Err::kNotSupported, "this admin client knows no pool");
  }
  // GPU `gpu` (the server's index) of server `server` to the tenant.
  virtual Status PoolAssign(const std::string& tenant, const std::string& server, int gpu) {
    (void)tenant, (void)server, (void)gpu;
    return Status(Err::kNotSupported, "this admin client knows no pool");
  }
  virtual Status SetPoolLimit(const std::string& name, std::optional<uint64_t> limit) {
    (void)name, (void)limit;
    return Status(Err::kNotSupported, "this admin client knows no pool");
  }
};

}  // namespace remora::admin

// What /metrics shows: a plain-data snapshot of the server's state (taken on the supervisor's
// loop thread by Supervisor::CollectMetrics) and its rendering in the Prometheus text
// exposition format 0.0.4. No I/O and no locks here; RenderMetrics is a pure function, so
// every metric's name, type and labels are unit-tested. docs/OPERATIONS.md lists them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace remora::server {

struct MetricsSnapshot {
  std::string version;
  std::string backend;  // "cuda" or "host-emulated"
  bool emulated = false;
  int64_t started_at = 0;  // unix seconds

  uint64_t handshakes_accepted = 0;
  uint64_t handshakes_refused = 0;  // failed authentication or protocol, or no handshake slot
  uint64_t sessions_started = 0;
  uint64_t sessions_lost = 0;       // workers that crashed, were killed by a signal or exited non-zero

  struct Gpu {
    int index = 0;
    std::string name, uuid, pci_bus_id;
    uint64_t total_memory = 0;
    uint64_t used = 0;  // charged to tenants (the ledger)
    bool compute_enforced = false;  // compute shares schedule (and measure) its work
    bool mps = false;               // contexts on it are shared through MPS
  };
  std::vector<Gpu> gpus;

  struct TenantGpu {
    int gpu = 0;
    bool attached = false;
    uint64_t used = 0;
    uint64_t context_overhead = 0;
    uint64_t gpu_time_ns = 0;  // measured while compute shares were enforced
  };
  struct Tenant {
    std::string name;
    std::optional<uint64_t> memory_limit;  // per GPU; nullopt = unlimited
    uint32_t compute_weight = 100;         // effective (100 when unset)
    std::optional<double> compute_max;     // cap as a fraction of each GPU; nullopt = none
    std::string priority = "normal";
    uint64_t refused = 0;
    uint32_t sessions = 0;
    std::vector<TenantGpu> gpus;  // attached, or holding memory
  };
  std::vector<Tenant> tenants;

  struct Session {
    uint64_t id = 0;
    std::string tenant, transport, data_path, program, user, host;
    int64_t started_at = 0;  // unix seconds
    uint64_t memory_used = 0;
    bool has_counters = false;  // the worker publishes its counters
    uint64_t calls = 0, bytes_to_device = 0, bytes_from_device = 0;
    uint64_t gpu_time_ns = 0;   // all GPUs, measured while compute shares were enforced
  };
  std::vector<Session> sessions;

  // A server of a pool (--pool): the pool as its mirror has it, the same from every server.
  struct PoolServer {
    std::string name, health;
    uint32_t sessions = 0;
    uint32_t gpus = 0;
    uint64_t memory_total = 0, memory_used = 0;
  };
  struct PoolTenantServer {
    std::string server;
    uint64_t used = 0, share = 0;
  };
  struct PoolTenant {
    std::string name;
    std::optional<uint64_t> limit;  // across the pool
    uint64_t shares = 0;            // held by its servers together
    std::vector<PoolTenantServer> servers;
  };
  struct Pool {
    std::string name;         // this server's
    bool registered = false;  // it holds its lease
    bool fresh = false;       // the mirror follows the store
    int64_t revision = 0;
    uint32_t gpus_gone = 0;   // assigned GPUs of servers that left
    std::vector<PoolServer> servers;
    std::vector<PoolTenant> tenants;
  };
  std::optional<Pool> pool;
};

// Readings of the physical GPUs (NVML, cuda backend only); absent values are not shown.
struct GpuSample {
  std::string pci_bus_id;
  std::optional<double> utilization;  // 0..1, the fraction of the last sample period a kernel ran
  std::optional<uint64_t> memory_used;  // bytes in use on the device, every process included
};

// The exposition text (Content-Type: text/plain; version=0.0.4). Without `details` only the
// server's and the GPUs' series: no tenant and no session series (their names, quotas,
// usage, and each session's program, user and host), which only an authenticated scraper
// (--metrics-token-file) or everyone (--metrics-public-details) gets.
std::string RenderMetrics(const MetricsSnapshot& snapshot, const std::vector<GpuSample>& samples, bool details = true);

// A label value made safe for the exposition format and for the people reading it:
// printable ASCII kept (with \ and " escaped), anything else becomes '?', at most 128 bytes.
std::string LabelValue(std::string_view raw);

}  // namespace remora::server

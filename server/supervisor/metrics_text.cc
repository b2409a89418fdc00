#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <string_view>
#include <utility>

#include "supervisor/metrics.h"

namespace remora::server {
namespace {

using Labels = std::vector<std::pair<std::string_view, std::string>>;

// Writes one metric family at a time: HELP and TYPE once, then its samples.
class Exposition {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    name_ = name;
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(const Labels& labels, uint64_t value) { Line(labels, fmt::format("{}", value)); }
  void Seconds(const Labels& labels, uint64_t ns) { Sample(labels, static_cast<double>(ns) / 1e9); }
  void Sample(const Labels& labels, double value) {
    Line(labels, std::isfinite(value) ? fmt::format("{}", value) : std::string("NaN"));
  }
  std::string Take() { return std::move(out_); }

 private:
  void Line(const Labels& labels, const std::string& value) {
    out_ += name_;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); i++)
        fmt::format_to(std::back_inserter(out_), "{}{}=\"{}\"", i ? "," : "", labels[i].first, labels[i].second);
      out_ += '}';
    }
    out_ += ' ';
    out_ += value;
    out_ += '\n';
  }

  std::string out_;
  std::string_view name_;
};

std::string Str(int64_t v) { return fmt::format("{}", v); }

}  // namespace

std::string LabelValue(std::string_view raw) {
  constexpr size_t kMaxBytes = 128;
  std::string out;
  for (char c : raw.substr(0, kMaxBytes)) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c >= 0x20 && c <= 0x7e) {
      out += c;
    } else {
      out += '?';
    }
  }
  return out;
}

std::string RenderMetrics(const MetricsSnapshot& s, const std::vector<GpuSample>& samples, bool details) {
  Exposition e;
  e.Family("remora_build_info", "gauge", "Remora server version and GPU backend; always 1.");
  e.Sample({{"version", LabelValue(s.version)}, {"backend", LabelValue(s.backend)},
            {"emulated", s.emulated ? "true" : "false"}},
           uint64_t{1});
  e.Family("remora_start_time_seconds", "gauge", "When the server started, in seconds since the Unix epoch.");
  e.Sample({}, static_cast<uint64_t>(s.started_at));
  e.Family("remora_handshakes_total", "counter",
           "Client handshakes: accepted (authenticated) or refused (bad token or protocol, or no free handshake slot).");
  e.Sample({{"result", "accepted"}}, s.handshakes_accepted);
  e.Sample({{"result", "refused"}}, s.handshakes_refused);
  e.Family("remora_sessions_started_total", "counter", "Sessions started (one worker process each).");
  e.Sample({}, s.sessions_started);
  e.Family("remora_sessions_lost_total", "counter",
           "Sessions whose worker ended abnormally (crashed, killed by a signal or exited non-zero).");
  e.Sample({}, s.sessions_lost);
  e.Family("remora_sessions", "gauge", "Sessions running now.");
  e.Sample({}, static_cast<uint64_t>(s.sessions.size()));

  // ---- GPUs ----------------------------------------------------------------------------
  e.Family("remora_gpu_info", "gauge", "A GPU of this server (host-emulated GPUs say so in backend); always 1.");
  for (const auto& g : s.gpus)
    e.Sample({{"gpu", Str(g.index)}, {"name", LabelValue(g.name)}, {"uuid", LabelValue(g.uuid)},
              {"pci_bus_id", LabelValue(g.pci_bus_id)}, {"backend", LabelValue(s.backend)}},
             uint64_t{1});
  e.Family("remora_gpu_memory_total_bytes", "gauge", "Memory of the GPU.");
  for (const auto& g : s.gpus) e.Sample({{"gpu", Str(g.index)}}, g.total_memory);
  e.Family("remora_gpu_memory_used_bytes", "gauge", "GPU memory charged to tenants (the quota ledger).");
  for (const auto& g : s.gpus) e.Sample({{"gpu", Str(g.index)}}, g.used);
  e.Family("remora_gpu_compute_enforced", "gauge",
           "1 while compute shares schedule and measure the GPU's work (a tenant of it has a share, cap or priority).");
  for (const auto& g : s.gpus) e.Sample({{"gpu", Str(g.index)}}, uint64_t{g.compute_enforced ? 1u : 0u});
  e.Family("remora_gpu_mps_active", "gauge",
           "1 if the sessions' contexts on the GPU are shared through NVIDIA MPS (no time-slicing between them).");
  for (const auto& g : s.gpus) e.Sample({{"gpu", Str(g.index)}}, uint64_t{g.mps ? 1u : 0u});
  auto sample_of = [&](const MetricsSnapshot::Gpu& g) -> const GpuSample* {
    for (const auto& x : samples)
      if (x.pci_bus_id == g.pci_bus_id) return &x;
    return nullptr;
  };
  bool any_util = false, any_mem = false;
  for (const auto& g : s.gpus)
    if (const GpuSample* x = sample_of(g)) {
      any_util |= x->utilization.has_value();
      any_mem |= x->memory_used.has_value();
    }
  if (any_util) {
    e.Family("remora_gpu_utilization_ratio", "gauge",
             "Fraction of the last sample period in which a kernel ran on the GPU (NVML; cuda backend).");
    for (const auto& g : s.gpus)
      if (const GpuSample* x = sample_of(g); x && x->utilization) e.Sample({{"gpu", Str(g.index)}}, *x->utilization);
  }
  if (any_mem) {
    e.Family("remora_gpu_device_memory_used_bytes", "gauge",
             "GPU memory in use as the driver sees it, every process and context included (NVML; cuda backend).");
    for (const auto& g : s.gpus)
      if (const GpuSample* x = sample_of(g); x && x->memory_used) e.Sample({{"gpu", Str(g.index)}}, *x->memory_used);
  }

  // ---- the pool: its servers and GPUs (per server and in total; no tenant) ---------------
  if (s.pool) {
    const MetricsSnapshot::Pool& p = *s.pool;
    uint64_t gpus = 0, total = 0, used = 0;
    for (const auto& x : p.servers) gpus += x.gpus, total += x.memory_total, used += x.memory_used;
    e.Family("remora_pool_info", "gauge", "This server's name in its pool; always 1.");
    e.Sample({{"server", LabelValue(p.name)}}, uint64_t{1});
    e.Family("remora_pool_registered", "gauge", "1 while this server holds its lease in the pool's store.");
    e.Sample({}, uint64_t{p.registered});
    e.Family("remora_pool_mirror_fresh", "gauge", "1 while this server's copy of the pool follows the store.");
    e.Sample({}, uint64_t{p.fresh});
    e.Family("remora_pool_revision", "gauge", "The store revision of this server's copy of the pool.");
    e.Sample({}, static_cast<uint64_t>(p.revision));
    e.Family("remora_pool_servers", "gauge", "Live servers of the pool (their lease holds).");
    e.Sample({}, uint64_t{p.servers.size()});
    e.Family("remora_pool_gpus", "gauge", "GPUs of the pool: of live servers, and assigned ones of servers that left.");
    e.Sample({{"state", "live"}}, gpus);
    e.Sample({{"state", "gone"}}, uint64_t{p.gpus_gone});
    e.Family("remora_pool_memory_total_bytes", "gauge", "Memory of the live servers' GPUs together.");
    e.Sample({}, total);
    e.Family("remora_pool_memory_used_bytes", "gauge", "Memory charged to tenants on the live servers together.");
    e.Sample({}, used);
    e.Family("remora_pool_server_up", "gauge", "A live server of the pool, with its health (ok, draining); always 1.");
    for (const auto& x : p.servers) e.Sample({{"server", LabelValue(x.name)}, {"health", LabelValue(x.health)}}, uint64_t{1});
    e.Family("remora_pool_server_gpus", "gauge", "The server's GPUs.");
    for (const auto& x : p.servers) e.Sample({{"server", LabelValue(x.name)}}, uint64_t{x.gpus});
    e.Family("remora_pool_server_memory_total_bytes", "gauge", "The server's GPU memory.");
    for (const auto& x : p.servers) e.Sample({{"server", LabelValue(x.name)}}, x.memory_total);
    e.Family("remora_pool_server_memory_used_bytes", "gauge", "Memory charged to tenants on the server (its last report).");
    for (const auto& x : p.servers) e.Sample({{"server", LabelValue(x.name)}}, x.memory_used);
    e.Family("remora_pool_server_sessions", "gauge", "Sessions on the server (its last report).");
    for (const auto& x : p.servers) e.Sample({{"server", LabelValue(x.name)}}, uint64_t{x.sessions});
  }

  // Who uses the server, how much and for what are the authenticated scraper's only
  // (docs/SECURITY.md, N9): the aggregates above are anyone's.
  if (!details) return e.Take();

  // ---- tenants --------------------------------------------------------------------------
  auto each_tenant_gpu = [&](const std::function<void(const MetricsSnapshot::Tenant&, const MetricsSnapshot::TenantGpu&)>& fn) {
    for (const auto& t : s.tenants)
      for (const auto& g : t.gpus) fn(t, g);
  };
  e.Family("remora_tenant_memory_limit_bytes", "gauge",
           "The tenant's memory limit on each attached GPU (absent: unlimited).");
  each_tenant_gpu([&](const auto& t, const auto& g) {
    if (t.memory_limit && g.attached) e.Sample({{"tenant", LabelValue(t.name)}, {"gpu", Str(g.gpu)}}, *t.memory_limit);
  });
  e.Family("remora_tenant_memory_used_bytes", "gauge", "GPU memory charged to the tenant, counted against its limit.");
  each_tenant_gpu([&](const auto& t, const auto& g) {
    e.Sample({{"tenant", LabelValue(t.name)}, {"gpu", Str(g.gpu)}}, g.used);
  });
  e.Family("remora_tenant_context_overhead_bytes", "gauge",
           "GPU memory of the tenant's CUDA contexts, reported apart and not counted against its limit.");
  each_tenant_gpu([&](const auto& t, const auto& g) {
    e.Sample({{"tenant", LabelValue(t.name)}, {"gpu", Str(g.gpu)}}, g.context_overhead);
  });
  e.Family("remora_tenant_gpu_attached", "gauge", "A GPU attached to the tenant; always 1.");
  each_tenant_gpu([&](const auto& t, const auto& g) {
    if (g.attached) e.Sample({{"tenant", LabelValue(t.name)}, {"gpu", Str(g.gpu)}}, uint64_t{1});
  });
  e.Family("remora_tenant_allocations_refused_total", "counter",
           "Allocations refused because the tenant's memory limit was reached.");
  for (const auto& t : s.tenants) e.Sample({{"tenant", LabelValue(t.name)}}, t.refused);
  e.Family("remora_tenant_sessions", "gauge", "Sessions the tenant is running now.");
  for (const auto& t : s.tenants) e.Sample({{"tenant", LabelValue(t.name)}}, uint64_t{t.sessions});
  e.Family("remora_tenant_compute_weight", "gauge",
           "The tenant's compute weight on each GPU (1..10000; a share of 30% is 3000; 100 when unset), with its "
           "priority class.");
  for (const auto& t : s.tenants)
    e.Sample({{"tenant", LabelValue(t.name)}, {"priority", LabelValue(t.priority)}}, uint64_t{t.compute_weight});
  e.Family("remora_tenant_compute_max_ratio", "gauge",
           "The tenant's hard cap of GPU time on each GPU, as a fraction of it (absent: no cap).");
  for (const auto& t : s.tenants)
    if (t.compute_max) e.Sample({{"tenant", LabelValue(t.name)}}, *t.compute_max);
  e.Family("remora_tenant_gpu_time_seconds_total", "counter",
           "GPU time the tenant's work took on the GPU since the server started (measured while compute shares are "
           "enforced on it).");
  each_tenant_gpu([&](const auto& t, const auto& g) {
    e.Seconds({{"tenant", LabelValue(t.name)}, {"gpu", Str(g.gpu)}}, g.gpu_time_ns);
  });

  // ---- sessions -------------------------------------------------------------------------
  auto id = [](const MetricsSnapshot::Session& x) -> Labels {
    return {{"session", fmt::format("{}", x.id)}, {"tenant", LabelValue(x.tenant)}};
  };
  e.Family("remora_session_info", "gauge",
           "A running session: its transport, data path and the client's program, user and host; always 1.");
  for (const auto& x : s.sessions) {
    Labels l = id(x);
    l.insert(l.end(), {{"transport", LabelValue(x.transport)}, {"data_path", LabelValue(x.data_path)},
                       {"program", LabelValue(x.program)}, {"user", LabelValue(x.user)}, {"host", LabelValue(x.host)}});
    e.Sample(l, uint64_t{1});
  }
  e.Family("remora_session_start_time_seconds", "gauge",
           "When the session started, in seconds since the Unix epoch (age: time() - this).");
  for (const auto& x : s.sessions) e.Sample(id(x), static_cast<uint64_t>(x.started_at));
  e.Family("remora_session_memory_used_bytes", "gauge", "GPU memory the session holds, all GPUs.");
  for (const auto& x : s.sessions) e.Sample(id(x), x.memory_used);
  e.Family("remora_session_calls_total", "counter", "CUDA calls the session's worker has dispatched.");
  for (const auto& x : s.sessions)
    if (x.has_counters) e.Sample(id(x), x.calls);
  e.Family("remora_session_gpu_time_seconds_total", "counter",
           "GPU time the session's work took, all GPUs (measured while compute shares are enforced).");
  for (const auto& x : s.sessions) e.Seconds(id(x), x.gpu_time_ns);
  e.Family("remora_session_transferred_bytes_total", "counter",
           "Bytes the session's copies moved between host and GPU memory, by direction.");
  for (const auto& x : s.sessions) {
    if (!x.has_counters) continue;
    Labels l = id(x);
    l.emplace_back("direction", "host_to_device");
    e.Sample(l, x.bytes_to_device);
    l.back().second = "device_to_host";
    e.Sample(l, x.bytes_from_device);
  }

  // ---- the pool's tenants (the authenticated scraper's only) ----------------------------
  if (s.pool) {
    const MetricsSnapshot::Pool& p = *s.pool;
    e.Family("remora_pool_tenant_limit_bytes", "gauge", "The tenant's memory limit across the pool (absent: none).");
    for (const auto& t : p.tenants)
      if (t.limit) e.Sample({{"tenant", LabelValue(t.name)}}, *t.limit);
    e.Family("remora_pool_tenant_shares_bytes", "gauge",
             "The parts of the tenant's pool-wide limit its servers hold together (never above the limit).");
    for (const auto& t : p.tenants) e.Sample({{"tenant", LabelValue(t.name)}}, t.shares);
    e.Family("remora_pool_tenant_share_bytes", "gauge", "The part of the tenant's pool-wide limit a server holds.");
    for (const auto& t : p.tenants)
      for (const auto& x : t.servers) e.Sample({{"tenant", LabelValue(t.name)}, {"server", LabelValue(x.server)}}, x.share);
    e.Family("remora_pool_tenant_memory_used_bytes", "gauge", "Memory charged to the tenant on a server (its last report).");
    for (const auto& t : p.tenants)
      for (const auto& x : t.servers) e.Sample({{"tenant", LabelValue(t.name)}, {"server", LabelValue(x.server)}}, x.used);
  }
  return e.Take();
}

}  // namespace remora::server

// The supervisor's side of /metrics: what a scrape reads (on the loop thread, like the admin
// API) and the endpoint that serves it.
#include <algorithm>
#include <set>

#include "remora/base/log.h"
#include "pool/pool_agent.h"
#include "supervisor/gpu_telemetry.h"
#include "supervisor/metrics_server.h"
#include "supervisor/supervisor.h"

namespace remora::server {

MetricsSnapshot Supervisor::CollectMetrics() {
  MetricsSnapshot m;
  m.version = REMORA_VERSION;
  m.backend = inventory_.backend;
  m.emulated = inventory_.emulated;
  m.started_at = started_at_;
  m.handshakes_accepted = counters_.handshakes_accepted.load();
  m.handshakes_refused = counters_.handshakes_refused.load();
  m.sessions_started = counters_.sessions_started.load();
  m.sessions_lost = counters_.sessions_lost.load();
  for (const GpuInfo& g : inventory_.gpus)
    m.gpus.push_back({g.index, g.name, g.uuid, g.pci_bus_id, g.total_memory, ledger_->GpuUsed(static_cast<uint32_t>(g.index)),
                      ComputeEnforced(g.index), g.mps});
  for (const auto& [name, t] : tenants_) {
    MetricsSnapshot::Tenant mt;
    mt.name = name;
    mt.memory_limit = t.record.memory_limit;
    const sched::ComputeSettings& cs = t.record.compute;
    mt.compute_weight = cs.effective_weight();
    if (cs.max) mt.compute_max = static_cast<double>(cs.max->quota_us) / static_cast<double>(cs.max->period_us);
    mt.priority = sched::PriorityName(cs.priority);
    TenantUsage first = ledger_->Tenant(t.ledger_index, 0);
    mt.refused = first.refused;
    mt.sessions = first.sessions;
    for (const GpuInfo& g : inventory_.gpus) {
      TenantUsage u = ledger_->Tenant(t.ledger_index, static_cast<uint32_t>(g.index));
      uint64_t time = compute_.board().TenantUsageNs(t.ledger_index, static_cast<uint32_t>(g.index));
      bool attached = std::find(t.gpus.begin(), t.gpus.end(), g.index) != t.gpus.end();
      if (attached || u.used != 0 || u.context_overhead != 0 || time != 0)
        mt.gpus.push_back({g.index, attached, u.used, u.context_overhead, time});
    }
    m.tenants.push_back(std::move(mt));
  }
  for (const auto& [pid, s] : sessions_) {
    MetricsSnapshot::Session ms;
    ms.id = s.id;
    ms.tenant = s.tenant;
    ms.transport = TransportName(s.transport);
    ms.data_path = TransportDataPath(s.transport);
    ms.program = s.client.program;
    ms.user = s.client.user;
    ms.host = s.client.hostname;
    ms.started_at = s.started_at;
    for (uint32_t g = 0; g < kLedgerMaxGpus; g++) {
      ms.memory_used += ledger_->SessionUsed(s.ledger_slot, g);
      ms.gpu_time_ns += compute_.board().SessionUsageNs(s.ledger_slot, g);
    }
    if (const SessionCounters* c = s.stats.counters()) {
      ms.has_counters = true;
      ms.calls = c->calls.load(std::memory_order_relaxed);
      ms.bytes_to_device = c->bytes_to_device.load(std::memory_order_relaxed);
      ms.bytes_from_device = c->bytes_from_device.load(std::memory_order_relaxed);
    }
    m.sessions.push_back(std::move(ms));
  }
  std::sort(m.sessions.begin(), m.sessions.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  if (pool_) m.pool = CollectPoolMetrics();
  return m;
}

MetricsSnapshot::Pool Supervisor::CollectPoolMetrics() {
  MetricsSnapshot::Pool p;
  bool fresh = false;
  pool::PoolView v = pool_->View(&fresh);
  p.name = pool_name_;
  p.registered = pool_->lease() != 0;
  p.fresh = fresh;
  p.revision = v.revision;
  for (const auto& [name, r] : v.servers) {
    MetricsSnapshot::PoolServer x{name, r.health, r.sessions, static_cast<uint32_t>(r.gpus.size()), 0, 0};
    for (const auto& g : r.gpus) x.memory_total += g.total_memory, x.memory_used += g.used;
    p.servers.push_back(std::move(x));
  }
  std::set<std::pair<std::string, std::string>> gone;
  for (const auto& a : v.assignments)
    if (!v.servers.count(a.server)) gone.insert({a.server, a.uuid});
  p.gpus_gone = static_cast<uint32_t>(gone.size());
  for (const auto& [name, t] : v.tenants) {
    MetricsSnapshot::PoolTenant x{name, t.pool_limit, v.SharesOf(name), {}};
    std::map<std::string, MetricsSnapshot::PoolTenantServer> here;
    for (const auto& [server, r] : v.servers)
      if (auto it = r.tenants.find(name); it != r.tenants.end()) here[server] = {server, it->second.used, 0};
    if (auto sh = v.shares.find(name); sh != v.shares.end())
      for (const auto& [server, bytes] : sh->second) {
        here[server].server = server;
        here[server].share = bytes;
      }
    for (auto& [server, h] : here) x.servers.push_back(h);
    p.tenants.push_back(std::move(x));
  }
  return p;
}

Status Supervisor::StartMetrics() {
  if (options_.metrics_listen.empty()) return Status::Ok();
  std::shared_ptr<GpuTelemetry> telemetry;
  if (!inventory_.emulated) {
    auto t = GpuTelemetry::LoadNvml();
    if (t.ok()) telemetry = std::move(*t);
    else LOG_INFO("metrics: no GPU utilisation readings: {}", t.status().message());
  }
  std::vector<std::string> buses;
  for (const GpuInfo& g : inventory_.gpus) buses.push_back(g.pci_bus_id);
  MetricsServerOptions o;
  o.listen_url = options_.metrics_listen;
  o.public_details = options_.metrics_public_details;
  if (!options_.metrics_token_file.empty()) {
    ASSIGN_OR_RETURN(o.bearer_token, LoadOrCreateMetricsToken(options_.metrics_token_file));
  }
  // The endpoint's thread: a snapshot from the loop thread, then NVML and the text outside it.
  auto render = [this, telemetry, buses](bool details) {
    MetricsSnapshot snapshot = Call([this] { return CollectMetrics(); });
    return RenderMetrics(snapshot, telemetry ? telemetry->Sample(buses) : std::vector<GpuSample>{}, details);
  };
  ASSIGN_OR_RETURN(metrics_, MetricsServer::Start(o, std::move(render)));
  return Status::Ok();
}

}  // namespace remora::server

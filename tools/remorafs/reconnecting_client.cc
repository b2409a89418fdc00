#include "reconnecting_client.h"

#include "remora/base/log.h"

namespace remora::fs {
namespace {

const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

}  // namespace

template <typename Fn>
auto ReconnectingClient::Call(Fn&& fn) -> decltype(fn(std::declval<admin::AdminClient&>())) {
  std::shared_ptr<admin::AdminClient> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!client_) {
      auto connected = admin::AdminClient::Connect(options_);
      if (!connected.ok()) return Status(Err::kDevicesUnavailable, connected.status().message());
      client_ = std::move(*connected);
      LOG_INFO("connected to the server's admin API");
    }
    c = client_;
  }
  auto result = fn(*c);
  if (StatusOf(result).code() == Err::kDevicesUnavailable) {
    std::lock_guard<std::mutex> lock(mu_);
    if (client_ == c) {
      client_.reset();  // the next call reconnects; `c` ends when its last caller returns
      LOG_WARN("lost the server's admin API: {}", StatusOf(result).message());
    }
  }
  return result;
}

Result<admin::ServerInfo> ReconnectingClient::Info() {
  return Call([&](admin::AdminClient& c) { return c.Info(); });
}

Result<std::string> ReconnectingClient::CreateTenant(const std::string& name, std::optional<uint64_t> memory_limit,
                                                     std::optional<std::vector<int>> gpus) {
  return Call([&](admin::AdminClient& c) { return c.CreateTenant(name, memory_limit, gpus); });
}

Result<std::vector<admin::TenantInfo>> ReconnectingClient::ListTenants() {
  return Call([&](admin::AdminClient& c) { return c.ListTenants(); });
}

Status ReconnectingClient::SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) {
  return Call([&](admin::AdminClient& c) { return c.SetMemoryLimit(name, limit); });
}

Status ReconnectingClient::SetCompute(const std::string& name, const sched::ComputeSettings& settings) {
  return Call([&](admin::AdminClient& c) { return c.SetCompute(name, settings); });
}

Status ReconnectingClient::DeleteTenant(const std::string& name, bool force) {
  return Call([&](admin::AdminClient& c) { return c.DeleteTenant(name, force); });
}

Result<std::vector<admin::GpuInfo>> ReconnectingClient::ListGpus() {
  return Call([&](admin::AdminClient& c) { return c.ListGpus(); });
}

Status ReconnectingClient::Attach(const std::string& name, int gpu) {
  return Call([&](admin::AdminClient& c) { return c.Attach(name, gpu); });
}

Status ReconnectingClient::Detach(const std::string& name, int gpu) {
  return Call([&](admin::AdminClient& c) { return c.Detach(name, gpu); });
}

Result<std::vector<admin::SessionInfo>> ReconnectingClient::ListSessions() {
  return Call([&](admin::AdminClient& c) { return c.ListSessions(); });
}

Status ReconnectingClient::KillSession(uint64_t id, const std::string& reason) {
  return Call([&](admin::AdminClient& c) { return c.KillSession(id, reason); });
}

Result<admin::PoolInfo> ReconnectingClient::Pool() {
  return Call([&](admin::AdminClient& c) { return c.Pool(); });
}

}  // namespace remora::fs

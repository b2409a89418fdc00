// An AdminClient that connects on first use, and again on the next call after its
// connection broke, so that a mounted remorafs outlives a restart of its server.
//
// Contract:
//  - Never retries a call: the call that finds the connection broken fails (with
//    kDevicesUnavailable) and the next one reconnects.
//  - A failed connection attempt is kDevicesUnavailable with the reason, whatever the cause.
//  - Thread-safe; calls run concurrently on one connection. Connecting holds a mutex, so
//    callers wait for one attempt (bounded by ConnectOptions::timeout_ms).
//  - Creates no thread before its first call (remorafs daemonizes with fork after
//    constructing it).
#pragma once

#include <memory>
#include <mutex>

#include "admin_client.h"

namespace remora::fs {

class ReconnectingClient final : public admin::AdminClient {
 public:
  explicit ReconnectingClient(admin::ConnectOptions options) : options_(std::move(options)) {}

  Result<admin::ServerInfo> Info() override;
  Result<std::string> CreateTenant(const std::string& name, std::optional<uint64_t> memory_limit,
                                   std::optional<std::vector<int>> gpus) override;
  Result<std::vector<admin::TenantInfo>> ListTenants() override;
  Status SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) override;
  Status SetCompute(const std::string& name, const sched::ComputeSettings& settings) override;
  Status DeleteTenant(const std::string& name, bool force) override;
  Result<std::vector<admin::GpuInfo>> ListGpus() override;
  Status Attach(const std::string& name, int gpu) override;
  Status Detach(const std::string& name, int gpu) override;
  Result<std::vector<admin::SessionInfo>> ListSessions() override;
  Status KillSession(uint64_t id, const std::string& reason) override;
  Result<admin::PoolInfo> Pool() override;

 private:
  template <typename Fn>
  auto Call(Fn&& fn) -> decltype(fn(std::declval<admin::AdminClient&>()));

  const admin::ConnectOptions options_;
  std::mutex mu_;
  std::shared_ptr<admin::AdminClient> client_;  // under mu_; null until connected
};

}  // namespace remora::fs

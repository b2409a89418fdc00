// The supervisor's tenant administration (the admin API's tenant calls, loop thread like
// the rest): creating and deleting tenants, their memory limits and GPU sets, and telling
// their live sessions' workers.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include <fmt/ranges.h>

#include "control.capnp.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "supervisor/supervisor.h"

namespace remora::server {

void Supervisor::PushGpus(const std::string& tenant) {
  const TenantState& t = tenants_.at(tenant);
  for (auto& [pid, s] : sessions_) {
    if (s.tenant != tenant) continue;
    Status st = SendControl(s, [&](void* m) {
      auto list = static_cast<control::ControlMessage::Builder*>(m)->initSetGpus(static_cast<unsigned>(t.gpus.size()));
      for (size_t i = 0; i < t.gpus.size(); i++) list.set(static_cast<unsigned>(i), t.gpus[i]);
    });
    if (!st.ok()) LOG_WARN("session {}: cannot tell its worker about the new GPU set: {}", s.id, st.message());
  }
}

Status Supervisor::ApplyLimit(TenantState& t) {
  uint64_t limit = t.record.memory_limit.value_or(kUnlimited);
  for (uint32_t g = 0; g < kLedgerMaxGpus; g++) RETURN_IF_ERROR(ledger_->SetLimit(t.ledger_index, g, limit));
  return Status::Ok();
}

Result<TenantState*> Supervisor::FindTenant(const std::string& name) {
  auto it = tenants_.find(name);
  if (it == tenants_.end()) return Error(Err::kInvalidValue, "no such tenant '{}'", name);
  return &it->second;
}

Result<std::string> Supervisor::CreateTenant(const std::string& name, std::optional<uint64_t> memory_limit,
                                             std::optional<std::vector<int>> gpus) {
  RETURN_IF_ERROR(ValidateTenantName(name));
  if (tenants_.count(name)) return Error(Err::kInvalidValue, "tenant '{}' already exists", name);
  std::vector<int> attach;
  if (gpus) {
    for (int g : *gpus) {
      if (g < 0 || static_cast<size_t>(g) >= inventory_.gpus.size())
        return Error(Err::kInvalidValue, "no GPU {} on this server (it has {})", g, inventory_.gpus.size());
      if (std::find(attach.begin(), attach.end(), g) == attach.end()) attach.push_back(g);
    }
    std::sort(attach.begin(), attach.end());
  } else {
    for (const GpuInfo& g : inventory_.gpus) attach.push_back(g.index);
  }
  Token token{name, RandomSecret()};
  TenantState t;
  t.record.name = name;
  Verifier v = VerifierFor(token.secret);
  t.record.stored_key = v.stored_key;
  t.record.server_key = v.server_key;
  t.record.memory_limit = memory_limit;
  t.record.created_at = static_cast<int64_t>(std::time(nullptr));
  for (int g : attach) t.record.gpu_uuids.push_back(inventory_.gpus[static_cast<size_t>(g)].uuid);
  t.gpus = attach;
  RETURN_IF_ERROR(store_->CreateTenant(t.record));
  ASSIGN_OR_RETURN(t.ledger_index, ledger_->AddTenant(name));
  RETURN_IF_ERROR(ApplyLimit(t));
  compute_.board().AddTenant(t.ledger_index, t.record.compute);
  {
    std::lock_guard<std::mutex> lock(tenants_mu_);
    tenants_.emplace(name, std::move(t));
  }
  LOG_INFO("tenant '{}' created (memory limit {}, GPUs [{}])", name,
           memory_limit ? FormatSize(*memory_limit) : "unlimited", fmt::join(attach, ","));
  return FormatToken(token);
}

void Supervisor::EndSessionNow(pid_t pid, const std::string& reason) {
  SessionState& s = sessions_.at(pid);
  (void)SendControl(s, [&](void* m) { static_cast<control::ControlMessage::Builder*>(m)->setEndSession(reason); });
  SignalWorker(pid, SIGKILL);
  int status;
  ::waitpid(pid, &status, 0);
  (void)registry_->Remove(pid);
  compute_.board().CloseSession(s.ledger_slot, MonotonicNanos());
  ApplyIpcActions(ipc_.SessionEnded(pid));  // its exports are its tenant's: nothing of them stays
  ledger_->CloseSession(s.ledger_slot);
  LOG_INFO("session {} of tenant '{}' ended: {}", s.id, s.tenant, reason);
  sessions_.erase(pid);
}

void Supervisor::ForgetTenant(const std::string& name) {
  auto it = tenants_.find(name);
  if (it == tenants_.end()) return;
  std::vector<pid_t> pids;
  for (auto& [pid, s] : sessions_)
    if (s.tenant == name) pids.push_back(pid);
  for (pid_t pid : pids) EndSessionNow(pid, "the tenant was deleted by the administrator");
  if (Status st = ledger_->RemoveTenant(it->second.ledger_index); !st.ok()) LOG_WARN("tenant '{}': {}", name, st.message());
  modules_->RemoveTenant(name);
  {
    std::lock_guard<std::mutex> lock(tenants_mu_);
    tenants_.erase(name);
  }
  UpdateComputeEnforcement();
}

Status Supervisor::DeleteTenant(const std::string& name, bool force) {
  RETURN_IF_ERROR(FindTenant(name).status());
  size_t running = 0;
  for (auto& [pid, s] : sessions_) running += s.tenant == name;
  if (running != 0 && !force)
    return Error(Err::kNotPermitted, "tenant '{}' has {} running session(s); use --force to end them", name, running);
  RETURN_IF_ERROR(store_->DeleteTenant(name));
  ForgetTenant(name);
  LOG_INFO("tenant '{}' deleted", name);
  return Status::Ok();
}

Status Supervisor::SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) {
  ASSIGN_OR_RETURN(TenantState * t, FindTenant(name));
  RETURN_IF_ERROR(store_->SetMemoryLimit(name, limit));
  t->record.memory_limit = limit;
  RETURN_IF_ERROR(ApplyLimit(*t));
  LOG_INFO("tenant '{}' memory limit set to {}", name, limit ? FormatSize(*limit) : "unlimited");
  return Status::Ok();
}

Status Supervisor::AttachGpu(const std::string& name, int gpu) {
  ASSIGN_OR_RETURN(TenantState * t, FindTenant(name));
  if (gpu < 0 || static_cast<size_t>(gpu) >= inventory_.gpus.size())
    return Error(Err::kInvalidValue, "no GPU {} on this server (it has {})", gpu, inventory_.gpus.size());
  if (std::find(t->gpus.begin(), t->gpus.end(), gpu) != t->gpus.end()) return Status::Ok();
  const std::string& uuid = inventory_.gpus[static_cast<size_t>(gpu)].uuid;
  RETURN_IF_ERROR(store_->Attach(name, uuid));
  t->record.gpu_uuids.push_back(uuid);
  t->gpus.push_back(gpu);
  std::sort(t->gpus.begin(), t->gpus.end());
  LOG_INFO("GPU {} attached to tenant '{}'", gpu, name);
  UpdateComputeEnforcement();
  PushGpus(name);
  return Status::Ok();
}

Status Supervisor::DetachGpu(const std::string& name, int gpu) {
  ASSIGN_OR_RETURN(TenantState * t, FindTenant(name));
  auto it = std::find(t->gpus.begin(), t->gpus.end(), gpu);
  if (it == t->gpus.end()) return Error(Err::kInvalidValue, "GPU {} is not attached to tenant '{}'", gpu, name);
  const std::string& uuid = inventory_.gpus[static_cast<size_t>(gpu)].uuid;
  RETURN_IF_ERROR(store_->Detach(name, uuid));
  t->record.gpu_uuids.erase(std::remove(t->record.gpu_uuids.begin(), t->record.gpu_uuids.end(), uuid), t->record.gpu_uuids.end());
  t->gpus.erase(it);
  LOG_INFO("GPU {} detached from tenant '{}'", gpu, name);
  UpdateComputeEnforcement();
  PushGpus(name);
  return Status::Ok();
}

}  // namespace remora::server

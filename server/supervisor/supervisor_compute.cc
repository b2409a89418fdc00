// The supervisor's side of compute shares: settings from the admin API into the state store
// and the board, and which GPUs are scheduled at all (loop thread, like the rest).
#include <algorithm>

#include "remora/base/log.h"
#include "supervisor/supervisor.h"

namespace remora::server {

Status CheckComputeSettings(const sched::ComputeSettings& settings) {
  if (settings.weight && (*settings.weight < sched::kMinWeight || *settings.weight > sched::kMaxWeight))
    return Error(Err::kInvalidValue, "compute weight {} is outside {}..{}", *settings.weight, sched::kMinWeight, sched::kMaxWeight);
  if (settings.max && (settings.max->period_us < sched::kMinPeriodUs || settings.max->period_us > sched::kMaxPeriodUs ||
                       settings.max->quota_us == 0 || settings.max->quota_us >= settings.max->period_us))
    return Error(Err::kInvalidValue, "compute.max {} is not a quota below a period of {}..{} us", sched::FormatMax(settings.max),
                 sched::kMinPeriodUs, sched::kMaxPeriodUs);
  return Status::Ok();
}

Status Supervisor::SetCompute(const std::string& name, const sched::ComputeSettings& settings) {
  ASSIGN_OR_RETURN(TenantState * t, FindTenant(name));
  RETURN_IF_ERROR(CheckComputeSettings(settings));
  RETURN_IF_ERROR(store_->SetCompute(name, settings));
  t->record.compute = settings;
  compute_.board().SetTenant(t->ledger_index, settings);
  UpdateComputeEnforcement();
  LOG_INFO("tenant '{}' compute: share {} (weight {}), cap {}, priority {}", name, sched::FormatShare(settings.weight),
           sched::FormatWeight(settings.weight), sched::DescribeMax(settings.max), sched::PriorityName(settings.priority));
  return Status::Ok();
}

void Supervisor::UpdateComputeEnforcement() {
  for (const GpuInfo& g : inventory_.gpus) {
    if (g.index < 0 || static_cast<uint32_t>(g.index) >= sched::kBoardMaxGpus) continue;
    bool on = options_.compute_control == "on";
    for (const auto& [name, t] : tenants_)
      if (!t.record.compute.empty() && std::find(t.gpus.begin(), t.gpus.end(), g.index) != t.gpus.end()) on = true;
    auto gpu = static_cast<uint32_t>(g.index);
    if (compute_.board().enabled(gpu) == on) continue;
    compute_.board().SetEnabled(gpu, on);
    LOG_INFO("GPU {}: compute shares {}", g.index, on ? "enforced (work scheduled and measured)" : "off (no tenant of it has compute settings)");
  }
}

}  // namespace remora::server

#include "worker/hooks/activity_hooks.h"

#include <cstring>
#include <string>
#include <vector>

#include "activity_wire.h"
#include "remora/base/log.h"
#include "worker/backend/activity.h"
#include "worker/calls/generated_call.h"
#include "worker/session/executor.h"

namespace remora::worker {
namespace {

Activity* Source(OpContext& x, const char* call) {
  auto a = x.executor().driver().activity();
  if (!a.ok()) {
    LOG_WARN("{}: {}", call, a.status().message());
    return nullptr;
  }
  return *a;
}

}  // namespace

CUresult ActivityEnable(OpContext& x, unsigned int kinds, unsigned long long* now) {
  if ((kinds & ~api::activity::kAllKinds) != 0) return CUDA_ERROR_INVALID_VALUE;
  Activity* a = Source(x, "remoraActivityEnable");
  if (a == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  Status st = a->Enable(kinds);
  if (!st.ok()) {
    LOG_WARN("remoraActivityEnable: {}", st.message());
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (kinds == 0) x.executor().session().activity_pending().clear();
  *now = a->Now();
  return CUDA_SUCCESS;
}

CUresult ActivityPush(OpContext& x, unsigned int kind, unsigned long long id) {
  Activity* a = Source(x, "remoraActivityPush");
  if (a == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return a->Push(kind, id).ok() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult ActivityPop(OpContext& x, unsigned int kind) {
  Activity* a = Source(x, "remoraActivityPop");
  if (a == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return a->Pop(kind).ok() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult ActivityFlush(OpContext& x, void* records, size_t capacity, size_t* used, unsigned int* more,
                       unsigned long long* now, unsigned long long* dropped) {
  Activity* a = Source(x, "remoraActivityFlush");
  if (a == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  std::vector<api::activity::Record> got;
  uint64_t lost = 0;
  if (Status st = a->Flush(&got, &lost); !st.ok()) {
    LOG_WARN("remoraActivityFlush: {}", st.message());
    return CUDA_ERROR_UNKNOWN;
  }
  Executor& ex = x.executor();
  std::string& pending = ex.session().activity_pending();
  for (api::activity::Record& r : got) {
    if (r.kind != api::activity::RecordKind::kExternalCorrelation) {
      int ordinal = ex.OrdinalOf(static_cast<int>(r.device));
      if (ordinal < 0) continue;  // a GPU this session does not have (not its work)
      r.device = static_cast<uint32_t>(ordinal);
    }
    api::activity::Append(&pending, r);
  }
  // Whole records only: walk them until the next would not fit.
  size_t n = 0;
  while (n < pending.size()) {
    api::activity::detail::Fixed f;
    std::memcpy(&f, pending.data() + n, sizeof(f));
    size_t size = sizeof(f) + f.name_length;
    if (n + size > capacity) break;
    n += size;
  }
  if (n > 0) std::memcpy(records, pending.data(), n);  // records may be NULL with a capacity of 0
  pending.erase(0, n);
  *used = n;
  *more = pending.empty() ? 0 : 1;
  *now = a->Now();
  *dropped = lost;
  return CUDA_SUCCESS;
}

}  // namespace remora::worker

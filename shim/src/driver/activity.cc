// The remoraActivity* requests for Remora's libcupti.so.13 (core_activity.h).
#include "core_activity.h"

#include "cuda_client.h"
#include "driver/driver.h"

using namespace remora;
using namespace remora::shim;

#define REMORA_CORE extern "C" __attribute__((visibility("default")))

REMORA_CORE int remora_core_activity_enable(uint32_t kinds, uint64_t* now) {
  unsigned long long t = 0;
  Status st = gen::cuda::remoraActivityEnable(CallCtx{false, "cuptiActivityEnable"}, kinds, &t);
  if (st.ok()) *now = t;
  return driver::FromStatus(st, "cuptiActivityEnable");
}

REMORA_CORE int remora_core_activity_push(uint32_t kind, uint64_t id) {
  return driver::FromStatus(gen::cuda::remoraActivityPush(CallCtx{false, "cuptiActivityPushExternalCorrelationId"}, kind, id),
                            "cuptiActivityPushExternalCorrelationId");
}

REMORA_CORE int remora_core_activity_pop(uint32_t kind) {
  return driver::FromStatus(gen::cuda::remoraActivityPop(CallCtx{false, "cuptiActivityPopExternalCorrelationId"}, kind),
                            "cuptiActivityPopExternalCorrelationId");
}

REMORA_CORE int remora_core_activity_flush(void* records, size_t capacity, size_t* used, unsigned* more, uint64_t* now,
                                           uint64_t* dropped) {
  size_t u = 0;
  unsigned m = 0;
  unsigned long long t = 0, d = 0;
  Status st = gen::cuda::remoraActivityFlush(CallCtx{false, "cuptiActivityFlushAll"}, records, capacity, &u, &m, &t, &d);
  if (st.ok()) *used = u, *more = m, *now = t, *dropped = d;
  return driver::FromStatus(st, "cuptiActivityFlushAll");
}

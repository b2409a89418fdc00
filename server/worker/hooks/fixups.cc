#include "worker/hooks/fixups.h"

#include <algorithm>

#include "worker/calls/generated_call.h"
#include "worker/session/limits.h"

namespace remora::worker {

Status FixMemLocation(OpContext& x, CUmemLocation* location) {
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE)
    return Error(Err::kNotSupported, "memory location type {} is not supported by Remora (only device memory is)",
                 static_cast<int>(location->type));
  ASSIGN_OR_RETURN(int gpu, x.executor().GpuOf(location->id));
  RETURN_IF_ERROR(x.ChooseGpu(gpu));
  location->id = gpu;
  return Status::Ok();
}

Status FixAccessDesc(OpContext& x, CUmemAccessDesc* desc) { return FixMemLocation(x, &desc->location); }

Status CurrentContext(OpContext& x, CUcontext* ctx) {
  RETURN_IF_ERROR(x.Ready());
  *ctx = static_cast<CUcontext>(x.executor().driver().CurrentContext());
  return Status::Ok();
}

namespace {

// Device memory the driver sets aside for a context limit of `value` (the defaults count as
// context overhead): the malloc heap and the printf FIFO are their size; the stack is per
// resident thread of the whole GPU. The device-runtime limits are bounded instead.
Result<uint64_t> LimitBytes(Executor& ex, int gpu, int limit, uint64_t value) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE: {
      ASSIGN_OR_RETURN(const DeviceDescription* d, ex.Description(gpu));
      auto attr = [&](int i) { return static_cast<size_t>(i) < d->attributes.size() ? uint64_t(std::max(d->attributes[i], 0)) : 0; };
      uint64_t threads = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) * attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
      uint64_t bytes;
      if (__builtin_mul_overflow(value, threads, &bytes)) return Error(Err::kMemoryAllocation, "stack size too large");
      return bytes;
    }
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      return value;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
      if (value > 24) return Error(Err::kInvalidValue, "device runtime sync depth {} (at most 24)", value);
      return 0;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      if (value > (1u << 16)) return Error(Err::kInvalidValue, "pending launch count {} (at most 65536 here)", value);
      return 0;
    default:
      return 0;
  }
}

}  // namespace

Status NoteLimit(OpContext& x, CUlimit* limit) {
  x.set_note(static_cast<int64_t>(*limit));
  return Status::Ok();
}

Status ChargeLimit(OpContext& x, size_t* value) {
  RETURN_IF_ERROR(x.Ready());
  Executor& ex = x.executor();
  int gpu = x.gpu();
  int limit = static_cast<int>(x.note());
  ASSIGN_OR_RETURN(uint64_t bytes, LimitBytes(ex, gpu, limit, *value));
  uint64_t charged = ex.resources().limit_charge(gpu, limit);
  if (bytes > charged) RETURN_IF_ERROR(ex.Charge(gpu, bytes - charged));
  x.OnSettle([&ex, gpu, limit, bytes, charged](bool ok) {
    uint64_t& now = ex.resources().limit_charge(gpu, limit);
    if (!ok) {
      if (bytes > charged) ex.ReleaseCharge(gpu, bytes - charged);
      return;
    }
    if (bytes < charged) ex.ReleaseCharge(gpu, charged - bytes);
    now = bytes;
  });
  return Status::Ok();
}

Status FixAllocationProp(OpContext& x, CUmemAllocationProp* prop) { return FixMemLocation(x, &prop->location); }

}  // namespace remora::worker

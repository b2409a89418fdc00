#include "worker/api_fixups.h"

#include "worker/api_op.h"

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

Status FixAllocationProp(OpContext& x, CUmemAllocationProp* prop) { return FixMemLocation(x, &prop->location); }

}  // namespace remora::worker

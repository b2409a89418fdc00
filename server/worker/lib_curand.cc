#include "worker/lib_curand.h"

#include "worker/api_op.h"
#include "worker/lib_objects.h"

namespace remora::worker::gen::curand {

Status DeviceGeneratorCreated(OpContext&, LibObject* generator, curandRngType_t) {
  generator->mode = 1u;  // output in device memory
  return Status::Ok();
}

}  // namespace remora::worker::gen::curand

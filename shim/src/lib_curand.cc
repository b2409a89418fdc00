// cuRAND's mirror hook (lib_curand.h).
#include "lib_curand.h"

#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::curand {

void MirrorDeviceGenerator(curandGenerator_t* generator, curandRngType_t) {
  shim::Process::Get().lib_objects().SetMode(shim::HandleBits(HandleKind::kCurandGenerator, *generator), 1u);
}

}  // namespace remora::gen::curand

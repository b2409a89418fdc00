// Code on the server, loaded lazily: a fat binary is shipped (by content hash, the image
// only if the server has not seen it) when one of its kernels or variables is first used on
// a device; kernel layouts and variable addresses are then cached per device.
// Thread-safe.
#pragma once

#include "registry.h"
#include "runtime.h"

namespace remora::shim {

// The kernel on `device` (an ordinal < kMaxDevices), loading what it needs.
Result<const KernelInfo*> KernelOn(FunctionRecord* f, int device);
// Device address and size of a variable on `device`.
Result<std::pair<uint64_t, uint64_t>> GlobalOn(VariableRecord* v, int device);
// The function record behind a host-side kernel pointer (stub address or cudaKernel_t).
FunctionRecord* FunctionFromHost(const void* func);

}  // namespace remora::shim

// NCCL's datatypes as the client's argument checks (shim/src/libs/lib_nccl.cc), the worker's
// real-NCCL path (lib_nccl.cc) and the host backend's emulation (nccl_emu_reduce.cc) size them.
// Pure; thread-safe.
#pragma once

#include <nccl.h>

namespace remora::api {

// Bytes of one element of `t`; 0 for a value that is no NCCL datatype.
constexpr int NcclTypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

}  // namespace remora::api

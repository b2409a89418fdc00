// Every runtime function Remora does not implement yet (REMORA_UNSUPPORTED in
// cudart_abi.def): exported so that applications load and link, answering
// cudaErrorNotSupported with a one-time log line naming the call. This file must not include
// CUDA headers: the stubs are declared without parameters, which the x86-64 C calling
// convention makes compatible with any argument list.
#include "stubs.h"

#define REMORA_REMOTED(name)
#define REMORA_UNSUPPORTED(name) \
  extern "C" __attribute__((visibility("default"))) int name() { return remora::shim::NotSupportedCode(#name); }
#include "../cudart_abi.def"

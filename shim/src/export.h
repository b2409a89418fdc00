// Marks an extern "C" entry point of the CUDA runtime ABI. Which symbols are exported is
// decided by the version script generated from shim/cudart_abi.def.
#pragma once

#define REMORA_API extern "C" __attribute__((visibility("default")))

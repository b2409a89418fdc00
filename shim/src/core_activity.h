// The core's GPU-activity calls for Remora's libcupti.so.13 (shim/cupti/): plain C, exported
// by libremora-core.so (REMORA_CORE_1), each the remoraActivity* request of
// protocol/api/cuda.api on the calling thread's device. Each connects the session on first
// use, like any CUDA call. Thread-safe. Each returns a CUresult.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Collects `kinds` (protocol/api/activity_wire.h's Kinds) on the server; *now: its clock.
int remora_core_activity_enable(uint32_t kinds, uint64_t* now);
// Posted in call order with the work they label (errors show at the next synchronising call).
int remora_core_activity_push(uint32_t kind, uint64_t id);
int remora_core_activity_pop(uint32_t kind);
// Whole records (wire form) of the work done so far, at most `capacity` bytes; *more: ask again;
// *dropped: records the worker dropped since the last flush (it holds a bounded number).
int remora_core_activity_flush(void* records, size_t capacity, size_t* used, unsigned* more, uint64_t* now,
                               uint64_t* dropped);

#ifdef __cplusplus
}
#endif

// The worker's end of the client's libcupti.so.13 (protocol/api/cuda.api, remoraActivity*;
// docs/ARCHITECTURE.md, "Profiling (CUPTI)"): the session's GPU activity from the backend's
// source (Driver::activity(), activity.h), its devices made the application's ordinals.
// Executor thread only.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace remora::worker {

class OpContext;

// Collects `kinds` (protocol/api/activity_wire.h's Kinds; 0 stops and drops what is pending);
// *now: the clock the records' times are in. CUDA_ERROR_NOT_SUPPORTED where the backend has
// no source (no CUPTI on this server: the worker's log says where it looked).
CUresult ActivityEnable(OpContext& x, unsigned int kinds, unsigned long long* now);
CUresult ActivityPush(OpContext& x, unsigned int kind, unsigned long long id);
CUresult ActivityPop(OpContext& x, unsigned int kind);
// At most `capacity` bytes of whole records into `records` (*used of them); *more: some remain;
// *dropped: records dropped since the last flush (activity.h, kMaxHeldRecords).
CUresult ActivityFlush(OpContext& x, void* records, size_t capacity, size_t* used, unsigned int* more,
                       unsigned long long* now, unsigned long long* dropped);

}  // namespace remora::worker

// What the worker publishes about its session's traffic (common/session_stats.h): one call
// per request dispatched, and the bytes each host<->device copy asks to move (whatever its
// data path: bulk in frames, shared pinned memory, RDMA). Executor thread only.
#pragma once

#include "common/session_stats.h"
#include "remora.capnp.h"

namespace remora::worker {

void CountRequest(SessionCounters& counters, wire::Request::Reader request);

}  // namespace remora::worker

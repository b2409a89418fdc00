// The worker's hook after cuGraphLaunch (protocol/api/cuda.api, `wafter`): what a launch
// means to the session beyond the driver's work. Executor thread only.
#pragma once

#include <cuda.h>

#include "remora/base/status.h"

namespace remora::worker {

class OpContext;

// A launch of executable graph `exec` into `stream` succeeded: unless the stream captures
// (the launch became a node of the capture's graph), each of the graph's host nodes will call
// the client once more, and until the client has answered, work behind them waits on it
// (GraphTables::Launched, Executor::HostCallbacksOutstanding).
Status GraphLaunched(OpContext& x, CUgraphExec exec, CUstream stream);

}  // namespace remora::worker

// Graph calls whose client side does more than encode (shim/src/graph_client.cc). Shared by
// the runtime's entry points and (later) the driver facade's.
#pragma once

#include <cuda.h>

#include "remote_call.h"

namespace remora::shim {

// cuGraphLaunch with the host memory of the executable graph moved around it: sources into
// their device staging before the launch, destinations back after it, in the stream's order.
Status GraphLaunchWithBindings(const CallCtx& cc, CUgraphExec exec, CUstream stream);

}  // namespace remora::shim

// Graph calls whose client side does more than encode (shim/src/graph_client.cc). Shared by
// the runtime's entry points (api_graph.cc) and the driver facade's (driver/graph.cc).
#pragma once

#include <cuda.h>

#include "remote_call.h"

namespace remora::shim {

// The generic node calls (cuGraphAddNode_v2, cuGraphNodeSetParams, cuGraphExecNodeSetParams)
// for parameters a per-kind entry composed, or the reason it could not. AddNode writes the
// parameters as sent to *out (an allocation node's address) when given.
Status AddNode(const CallCtx& cc, CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
               size_t n, Result<CUgraphNodeParams> params, CUgraphNodeParams* out = nullptr);
Status SetNode(const CallCtx& cc, CUgraphNode node, Result<CUgraphNodeParams> params);
Status ExecSetNode(const CallCtx& cc, CUgraphExec exec, CUgraphNode node, Result<CUgraphNodeParams> params);

// cuGraphLaunch with the host memory of the executable graph moved around it: sources into
// their device staging before the launch, destinations back after it, in the stream's order.
Status GraphLaunchWithBindings(const CallCtx& cc, CUgraphExec exec, CUstream stream);

}  // namespace remora::shim

#include "worker/hooks/graph_hooks.h"

#include "cuda_api.h"
#include "worker/calls/generated_call.h"
#include "worker/session/executor.h"

namespace remora::worker {

Status GraphLaunched(OpContext& x, CUgraphExec exec, CUstream stream) {
  // Most graphs have no host node: they cost a table lookup, no driver call.
  GraphExec* e = x.executor().session().graphs().ExecOf(exec);
  if (e == nullptr || e->host_nodes.empty()) return Status::Ok();
  gen::cuda::Api& api = x.Library<gen::cuda::Api>();
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (api.cuStreamIsCapturing(stream, &capture) == CUDA_SUCCESS && capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return Status::Ok();
  for (const GraphExec::HostNode& n : e->host_nodes) {
    // A node disabled in this executable graph does not run (cuGraphNodeSetEnabled). A count
    // too high would keep device-wide waits from being made (a free would wait forever), one
    // too low only lets a transfer keep the transport's memory: a failed query counts the node.
    unsigned enabled = 1;
    if (api.cuGraphNodeGetEnabled(exec, static_cast<CUgraphNode>(n.node), &enabled) == CUDA_SUCCESS && !enabled) continue;
    std::lock_guard<std::mutex> lock(n.cb->mu);
    n.cb->launched++;
  }
  return Status::Ok();
}

}  // namespace remora::worker

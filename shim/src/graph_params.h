// The encoding of graph node parameters (graph_params.cc), shared by the graph entry points
// of graph_client.cc. Private to the shim.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "registry.h"
#include "remote_call.h"
#include "remora/protocol/api_args.h"

namespace remora::shim {

// The parameter layout of the worker's function `handle`: a kernel the runtime loaded, or a
// function of a module the driver API loaded (cuModuleGetFunction); nullptr if neither.
const KernelInfo* LayoutOf(uint64_t handle);
// Writes `p` to the call as cuda_graph_wire.h encodes node parameters. A host node's
// function is registered with the client's host callbacks (as a repeating one); its id goes
// to *host_id if given.
Status EncodeNodeParams(RemoteCall& c, const CUgraphNodeParams& p, uint64_t* host_id);
// Reads an executable graph's host-memory bindings from a reply and keeps them for its
// launches (GraphLaunchWithBindings).
Status ReadBindings(api::ArgReader& r, uint64_t exec);

}  // namespace remora::shim

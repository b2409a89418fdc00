// The worker's ends of the kernel queries that travel in a shape of Remora's own
// (protocol/api/cuda.api, `worker=`): every attribute of a kernel at once, and the cluster
// occupancy queries of a launch configuration sent as its parts. Executor thread only; the
// kernel's GPU is current (its handle argument chose it).
#pragma once

#include <cuda.h>

namespace remora::worker {

class OpContext;

// values[i] = attribute i of `func` for i < count (0 where the driver answers none).
CUresult FuncGetAttributes(OpContext& x, CUfunction func, int* values, unsigned int count);
// cuOccupancyMaxActiveClusters (potential 0) or cuOccupancyMaxPotentialClusterSize (1) of the
// configuration; attributes that name memory or events (an access policy window, the
// programmatic and completion events) are not passed on: no occupancy answer depends on them,
// and their pointers and handles are the client's.
CUresult OccupancyClusters(OpContext& x, int* value, CUfunction func, unsigned int potential, unsigned int gridDimX,
                           unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                           unsigned int blockDimZ, unsigned int sharedMemBytes, const CUlaunchAttribute* attrs,
                           unsigned int numAttrs);

}  // namespace remora::worker

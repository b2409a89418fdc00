// The arguments of the `hand` entries of protocol/api/cuda.api that carry graph node
// parameters and 3D copies: what the client (shim/src/graph_params.cc) writes and the worker
// (server/worker/graphs/ops_graph_nodes.cc) reads, in the flat encoding of api_args.h. The
// structures are plain data, laid out identically on both ends (same headers, same ABI).
//
// Node parameters (CUgraphNodeParams) travel as u32 type, then by type:
//   KERNEL       WireKernel, then the packed parameter bytes as an array of u8 (the
//                function's layout, as the worker reported it for launches)
//   MEMCPY       WireCopy3D
//   MEMSET       CUDA_MEMSET_NODE_PARAMS_v2 (dst checked against the session; ctx ignored)
//   HOST         u64 id of the function the client registered (it runs in the client)
//   GRAPH        u64 graph handle, u32 ownership
//   EVENT_RECORD, WAIT_EVENT   u64 event handle
//   MEM_ALLOC    CUmemPoolProps (location: the application's ordinal), array of
//                CUmemAccessDesc, u64 bytesize
//   MEM_FREE     u64 device address
//   CONDITIONAL  u64 conditional handle, u32 type, u32 size
//   EMPTY        nothing
// Other types are refused (external semaphores and batch memory operations are not remoted).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace remora::api::cuda {

struct WireKernel {
  uint64_t function;  // session handle of the kernel (a CUfunction of the session)
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_mem;
  uint32_t reserved;
};

// One side of a 3D copy as the client names it.
enum class WireSideKind : uint32_t {
  kDevice = 0,  // `address` is a device address of the session
  kHost = 1,    // host memory the worker cannot reach: `address` is the application's
                // address of the contiguous span the copy touches, `span` its size
  kRegion = 2,  // pinned host memory shared with the worker: `region`, offset `address`
  kArray = 3,   // a CUDA array: session handle `array`
};
struct WireCopySide {
  WireSideKind kind;
  uint32_t reserved;
  uint64_t address;
  uint64_t span;
  uint64_t region;
  uint64_t array;
  uint64_t x_bytes, y, z, lod;  // as in CUDA_MEMCPY3D (host: 0, the span starts there)
  uint64_t pitch, height;
};
struct WireCopy3D {
  WireCopySide src, dst;
  uint64_t width_bytes, height, depth;
};

// A host binding of a graph, as the worker reports it with an instantiation: the client
// copies `size` bytes between `client_addr` and device staging `staging` around a launch.
struct WireBinding {
  uint64_t client_addr;
  uint64_t size;
  uint64_t staging;
  uint8_t to_device;
  uint8_t reserved[7];
};

}  // namespace remora::api::cuda

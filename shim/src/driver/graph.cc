// The driver API's per-kind graph functions (add a kernel, copy, memset, host, child, event
// or memory node; set a node's or an executable node's parameters) as the driver composes
// them: each is the generic cuGraphAddNode_v2 / cuGraphNodeSetParams /
// cuGraphExecNodeSetParams with CUgraphNodeParams, whose client ends (graph_client.cc) resolve
// what only the client knows. The static CUDA runtime calls these for the runtime's graph API.
// cuGraphLaunch moves the host memory of the executable graph around the launch, as
// cudaGraphLaunch does (graph_client.h); a kernel node's parameters name the CUkernel it was
// made from, which is how the static runtime maps a node back to its host function.
#include <cstring>

#include "cuda_client.h"
#include "driver/driver.h"
#include "driver/objects.h"
#include "export.h"
#include "graph_client.h"
#include "registry.h"
#include "remote_call.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

Status Bad(const char* what) { return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, what); }

// A kernel node's function: `func`, or (func NULL) the CUkernel `kern` on the current
// context's device. The worker's function handle goes on the wire.
Result<CUgraphNodeParams> Kernel(const CUDA_KERNEL_NODE_PARAMS* k) {
  if (k == nullptr) return Bad("nodeParams is NULL");
  CUfunction func = k->func != nullptr ? k->func : reinterpret_cast<CUfunction>(k->kern);
  if (func == nullptr) return Bad("the kernel node names neither a function nor a kernel");
  ASSIGN_OR_RETURN(FunctionInfo f, FunctionOrKernel(func));
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel.func = reinterpret_cast<CUfunction>(f.kernel->handle);
  p.kernel.gridDimX = k->gridDimX;
  p.kernel.gridDimY = k->gridDimY;
  p.kernel.gridDimZ = k->gridDimZ;
  p.kernel.blockDimX = k->blockDimX;
  p.kernel.blockDimY = k->blockDimY;
  p.kernel.blockDimZ = k->blockDimZ;
  p.kernel.sharedMemBytes = k->sharedMemBytes;
  p.kernel.kernelParams = k->kernelParams;
  p.kernel.extra = k->extra;
  return p;
}

Result<CUgraphNodeParams> Copy(const CUDA_MEMCPY3D* m) {
  if (m == nullptr) return Bad("copyParams is NULL");
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  p.memcpy.copyParams = *m;
  return p;
}

Result<CUgraphNodeParams> Memset(const CUDA_MEMSET_NODE_PARAMS* m) {
  if (m == nullptr) return Bad("memsetParams is NULL");
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMSET;
  p.memset.dst = m->dst;
  p.memset.pitch = m->pitch;
  p.memset.value = m->value;
  p.memset.elementSize = m->elementSize;
  p.memset.width = m->width;
  p.memset.height = m->height;
  return p;
}

Result<CUgraphNodeParams> Host(const CUDA_HOST_NODE_PARAMS* h) {
  if (h == nullptr) return Bad("nodeParams is NULL");
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_HOST;
  p.host.fn = h->fn;
  p.host.userData = h->userData;
  return p;
}

CUgraphNodeParams Event(bool record, CUevent e) {
  CUgraphNodeParams p{};
  p.type = record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  if (record) p.eventRecord.event = e;
  else p.eventWait.event = e;
  return p;
}

CUgraphNodeParams Child(CUgraph g) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_GRAPH;
  p.graph.graph = g;
  p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE;
  return p;
}

CUresult Add(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n, Result<CUgraphNodeParams> params,
             const char* call, CUgraphNodeParams* out = nullptr) {
  return Done(AddNode(CallCtx{false, call}, node, graph, deps, nullptr, n, std::move(params), out), call);
}

CUresult Set(CUgraphNode node, Result<CUgraphNodeParams> params, const char* call) {
  return Done(SetNode(CallCtx{false, call}, node, std::move(params)), call);
}

CUresult ExecSet(CUgraphExec exec, CUgraphNode node, Result<CUgraphNodeParams> params, const char* call) {
  return Done(ExecSetNode(CallCtx{false, call}, exec, node, std::move(params)), call);
}

}  // namespace

// ---- adding nodes ------------------------------------------------------------------------------

REMORA_API CUresult cuGraphAddKernelNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                            size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return Add(phGraphNode, hGraph, dependencies, numDependencies, Kernel(nodeParams), "cuGraphAddKernelNode");
}
REMORA_API CUresult cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_MEMCPY3D* copyParams, CUcontext) {
  return Add(phGraphNode, hGraph, dependencies, numDependencies, Copy(copyParams), "cuGraphAddMemcpyNode");
}
REMORA_API CUresult cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext) {
  return Add(phGraphNode, hGraph, dependencies, numDependencies, Memset(memsetParams), "cuGraphAddMemsetNode");
}
REMORA_API CUresult cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                       size_t numDependencies, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return Add(phGraphNode, hGraph, dependencies, numDependencies, Host(nodeParams), "cuGraphAddHostNode");
}
REMORA_API CUresult cuGraphAddChildGraphNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, CUgraph childGraph) {
  return Add(phGraphNode, hGraph, dependencies, numDependencies, Child(childGraph), "cuGraphAddChildGraphNode");
}
REMORA_API CUresult cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                        size_t numDependencies) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_EMPTY;
  return Add(phGraphNode, hGraph, dependencies, numDependencies, p, "cuGraphAddEmptyNode");
}
REMORA_API CUresult cuGraphAddEventRecordNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                              size_t numDependencies, CUevent event) {
  return Add(phGraphNode, hGraph, dependencies, numDependencies, Event(true, event), "cuGraphAddEventRecordNode");
}
REMORA_API CUresult cuGraphAddEventWaitNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                            size_t numDependencies, CUevent event) {
  return Add(phGraphNode, hGraph, dependencies, numDependencies, Event(false, event), "cuGraphAddEventWaitNode");
}
REMORA_API CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                           size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr) return Done(Bad("nodeParams is NULL"), "cuGraphAddMemAllocNode");
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  static_assert(sizeof(p.alloc) == sizeof(*nodeParams), "CUDA_MEM_ALLOC_NODE_PARAMS v1 and v2 differ in size");
  std::memcpy(&p.alloc, nodeParams, sizeof(p.alloc));
  CUgraphNodeParams out{};
  CUresult r = Add(phGraphNode, hGraph, dependencies, numDependencies, p, "cuGraphAddMemAllocNode", &out);
  if (r == CUDA_SUCCESS) nodeParams->dptr = out.alloc.dptr;  // the address the worker reserved
  return r;
}
REMORA_API CUresult cuGraphAddMemFreeNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                          size_t numDependencies, CUdeviceptr dptr) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  p.free.dptr = dptr;
  return Add(phGraphNode, hGraph, dependencies, numDependencies, p, "cuGraphAddMemFreeNode");
}

// ---- a node's parameters -----------------------------------------------------------------------

REMORA_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return Set(hNode, Kernel(nodeParams), "cuGraphKernelNodeSetParams");
}
REMORA_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D* nodeParams) {
  return Set(hNode, Copy(nodeParams), "cuGraphMemcpyNodeSetParams");
}
REMORA_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  return Set(hNode, Memset(nodeParams), "cuGraphMemsetNodeSetParams");
}
REMORA_API CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return Set(hNode, Host(nodeParams), "cuGraphHostNodeSetParams");
}
REMORA_API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event) {
  return Set(hNode, Event(true, event), "cuGraphEventRecordNodeSetEvent");
}
REMORA_API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event) {
  return Set(hNode, Event(false, event), "cuGraphEventWaitNodeSetEvent");
}

// As the driver's: `func` is the worker's function on the node's device and, for a node made
// from a CUkernel (cuLibraryGetKernel: what the static runtime uses), `kern` names it.
REMORA_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  Status st = gen::cuda::cuGraphKernelNodeGetParams_v2(CallCtx{false, "cuGraphKernelNodeGetParams"}, hNode, nodeParams);
  if (!st.ok()) return Done(st, "cuGraphKernelNodeGetParams");
  auto [record, info] = Registry::Get().KernelByHandle(reinterpret_cast<uint64_t>(nodeParams->func));
  (void)info;
  if (record != nullptr && record->host_fun == record) nodeParams->kern = reinterpret_cast<CUkernel>(record);
  return CUDA_SUCCESS;
}

// ---- an executable graph's node parameters -----------------------------------------------------

REMORA_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                      const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return ExecSet(hGraphExec, hNode, Kernel(nodeParams), "cuGraphExecKernelNodeSetParams");
}
REMORA_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMCPY3D* copyParams,
                                                   CUcontext) {
  return ExecSet(hGraphExec, hNode, Copy(copyParams), "cuGraphExecMemcpyNodeSetParams");
}
REMORA_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext) {
  return ExecSet(hGraphExec, hNode, Memset(memsetParams), "cuGraphExecMemsetNodeSetParams");
}
REMORA_API CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                 const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return ExecSet(hGraphExec, hNode, Host(nodeParams), "cuGraphExecHostNodeSetParams");
}
REMORA_API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph) {
  return ExecSet(hGraphExec, hNode, Child(childGraph), "cuGraphExecChildGraphNodeSetParams");
}
REMORA_API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event) {
  return ExecSet(hGraphExec, hNode, Event(true, event), "cuGraphExecEventRecordNodeSetEvent");
}
REMORA_API CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event) {
  return ExecSet(hGraphExec, hNode, Event(false, event), "cuGraphExecEventWaitNodeSetEvent");
}

// ---- launching ---------------------------------------------------------------------------------

REMORA_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return Done(GraphLaunchWithBindings(CallCtx{false, "cuGraphLaunch"}, hGraphExec, hStream), "cuGraphLaunch");
}
REMORA_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return Done(GraphLaunchWithBindings(CallCtx{true, "cuGraphLaunch"}, hGraphExec, hStream), "cuGraphLaunch");
}

// ---- the earlier forms (binaries built against the headers of CUDA 11 and 12 call them) --------

namespace {

CUDA_KERNEL_NODE_PARAMS FromV1(const CUDA_KERNEL_NODE_PARAMS_v1& k) {
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = k.func;
  p.gridDimX = k.gridDimX;
  p.gridDimY = k.gridDimY;
  p.gridDimZ = k.gridDimZ;
  p.blockDimX = k.blockDimX;
  p.blockDimY = k.blockDimY;
  p.blockDimZ = k.blockDimZ;
  p.sharedMemBytes = k.sharedMemBytes;
  p.kernelParams = k.kernelParams;
  p.extra = k.extra;
  return p;
}

}  // namespace

REMORA_API CUresult cuGraphAddKernelNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return Done(Bad("nodeParams is NULL"), "cuGraphAddKernelNode");
  CUDA_KERNEL_NODE_PARAMS p = FromV1(*nodeParams);
  return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &p);
}
REMORA_API CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return Done(Bad("nodeParams is NULL"), "cuGraphKernelNodeSetParams");
  CUDA_KERNEL_NODE_PARAMS p = FromV1(*nodeParams);
  return cuGraphKernelNodeSetParams_v2(hNode, &p);
}
REMORA_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return Done(Bad("nodeParams is NULL"), "cuGraphExecKernelNodeSetParams");
  CUDA_KERNEL_NODE_PARAMS p = FromV1(*nodeParams);
  return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &p);
}
REMORA_API CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return Done(Bad("nodeParams is NULL"), "cuGraphKernelNodeGetParams");
  CUDA_KERNEL_NODE_PARAMS p{};
  CUresult r = cuGraphKernelNodeGetParams_v2(hNode, &p);
  if (r != CUDA_SUCCESS) return r;
  *nodeParams = CUDA_KERNEL_NODE_PARAMS_v1{p.func,      p.gridDimX,  p.gridDimY,      p.gridDimZ,     p.blockDimX,
                                           p.blockDimY, p.blockDimZ, p.sharedMemBytes, p.kernelParams, p.extra};
  return CUDA_SUCCESS;
}
// The error node and log of CUDA 11's form are not produced: Remora's worker reports the
// reason in the status and the server log.
REMORA_API CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                                       size_t bufferSize) {
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}
REMORA_API CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                                          size_t bufferSize) {
  return cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
REMORA_API CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode* hErrorNode_out,
                                      CUgraphExecUpdateResult* updateResult_out) {
  CUgraphExecUpdateResultInfo info{};
  CUresult r = cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);
  if (hErrorNode_out != nullptr) *hErrorNode_out = info.errorNode;
  if (updateResult_out != nullptr) *updateResult_out = info.result;
  return r;
}

REMORA_API CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                           size_t numDependencies) {
  return cuGraphAddDependencies_v2(hGraph, from, to, nullptr, numDependencies);
}
REMORA_API CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                              size_t numDependencies) {
  return cuGraphRemoveDependencies_v2(hGraph, from, to, nullptr, numDependencies);
}
REMORA_API CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to, size_t* numEdges) {
  return cuGraphGetEdges_v2(hGraph, from, to, nullptr, numEdges);
}
REMORA_API CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode* dependencies, size_t* numDependencies) {
  return cuGraphNodeGetDependencies_v2(hNode, dependencies, nullptr, numDependencies);
}
REMORA_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode* dependentNodes, size_t* numDependentNodes) {
  return cuGraphNodeGetDependentNodes_v2(hNode, dependentNodes, nullptr, numDependentNodes);
}
REMORA_API CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                   size_t numDependencies, CUgraphNodeParams* nodeParams) {
  return Done(gen::cuda::cuGraphAddNode_v2(CallCtx{false, "cuGraphAddNode"}, phGraphNode, hGraph, dependencies, nullptr,
                                           numDependencies, nodeParams),
              "cuGraphAddNode");
}

// ---- stream capture's earlier forms --------------------------------------------------------

REMORA_API CUresult cuStreamBeginCapture(CUstream hStream) {
  return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
REMORA_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return cuStreamBeginCapture_v2_ptsz(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
REMORA_API CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out) {
  return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr);
}
REMORA_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                cuuint64_t* id_out) {
  return cuStreamGetCaptureInfo_v3_ptsz(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr);
}
REMORA_API CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode* dependencies, size_t numDependencies,
                                                      unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, nullptr, numDependencies, flags);
}
REMORA_API CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream, CUgraphNode* dependencies,
                                                           size_t numDependencies, unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2_ptsz(hStream, dependencies, nullptr, numDependencies, flags);
}

// The runtime's graph functions whose arguments differ from the driver's (kernel nodes name
// host functions, copy nodes cudaMemcpy3DParms, symbols, per-kind setters): each converts to
// the driver's generic node parameters and goes through the driver entries of
// protocol/api/cuda.api (graph_client.cc). cudaGraphLaunch moves the host memory of the
// executable graph around the launch (graph_client.h). The rest of the graph API is
// generated (`via=` entries of cudart.api).
#include <cuda_runtime_api.h>

#include <cstring>

#include "arrays.h"
#include "cuda_client.h"
#include "export.h"
#include "graph_client.h"
#include "memops.h"
#include "modules.h"
#include "remote_call.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

cudaPitchedPtr Pitched(void* p, size_t pitch, size_t xsize, size_t ysize) { return cudaPitchedPtr{p, pitch, xsize, ysize}; }
cudaExtent Extent3(size_t w, size_t h, size_t d) { return cudaExtent{w, h, d}; }

cudaError_t Done(const Status& st, const char* call) {
  return static_cast<cudaError_t>(FinishApi(Domain::kCudart, st, call));
}

Status Invalid(const char* what) { return Error(Err::kInvalidValue, "{}", what); }

Result<CUgraphNodeParams> Kernel(const cudaKernelNodeParams* k) {
  if (k == nullptr) return Invalid("pNodeParams is NULL");
  FunctionRecord* f = FunctionFromHost(k->func);
  if (f == nullptr) return Error(Err::kInvalidDeviceFunction, "{} is not a registered kernel", k->func);
  ASSIGN_OR_RETURN(int device, Runtime::Get().CurrentDevice());
  ASSIGN_OR_RETURN(const KernelInfo* info, KernelOn(f, device));
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel.func = reinterpret_cast<CUfunction>(info->handle);
  p.kernel.gridDimX = k->gridDim.x;
  p.kernel.gridDimY = k->gridDim.y;
  p.kernel.gridDimZ = k->gridDim.z;
  p.kernel.blockDimX = k->blockDim.x;
  p.kernel.blockDimY = k->blockDim.y;
  p.kernel.blockDimZ = k->blockDim.z;
  p.kernel.sharedMemBytes = k->sharedMemBytes;
  p.kernel.kernelParams = k->kernelParams;
  p.kernel.extra = k->extra;
  return p;
}

// One side of a runtime 3D copy as the driver names it.
Status SideOf(cudaArray_t array, cudaPos pos, cudaPitchedPtr ptr, bool device, CUmemorytype* type, const void** host,
            CUdeviceptr* dev, CUarray* arr, size_t* x, size_t* y, size_t* z, size_t* pitch, size_t* height) {
  *x = pos.x;
  *y = pos.y;
  *z = pos.z;
  if (array != nullptr) {
    *type = CU_MEMORYTYPE_ARRAY;
    *arr = reinterpret_cast<CUarray>(array);
    return Status::Ok();
  }
  if (ptr.ptr == nullptr) return Invalid("a copy side names neither memory nor an array");
  *pitch = ptr.pitch;
  *height = ptr.ysize;
  if (device) {
    *type = CU_MEMORYTYPE_DEVICE;
    *dev = reinterpret_cast<CUdeviceptr>(ptr.ptr);
  } else {
    *type = CU_MEMORYTYPE_HOST;
    *host = ptr.ptr;
  }
  return Status::Ok();
}

Result<CUgraphNodeParams> Copy(const cudaMemcpy3DParms* m) {
  if (m == nullptr) return Invalid("pCopyParams is NULL");
  if (m->kind < cudaMemcpyHostToHost || m->kind > cudaMemcpyDefault)
    return Error(Err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind {}", static_cast<int>(m->kind));
  bool src_dev = m->kind == cudaMemcpyDeviceToHost || m->kind == cudaMemcpyDeviceToDevice ||
                 (m->kind == cudaMemcpyDefault && Classify(m->srcPtr.ptr) == remora::shim::Side::kDevice);
  bool dst_dev = m->kind == cudaMemcpyHostToDevice || m->kind == cudaMemcpyDeviceToDevice ||
                 (m->kind == cudaMemcpyDefault && Classify(m->dstPtr.ptr) == remora::shim::Side::kDevice);
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  CUDA_MEMCPY3D& c = p.memcpy.copyParams;
  RETURN_IF_ERROR(SideOf(m->srcArray, m->srcPos, m->srcPtr, src_dev, &c.srcMemoryType, &c.srcHost, &c.srcDevice, &c.srcArray,
                       &c.srcXInBytes, &c.srcY, &c.srcZ, &c.srcPitch, &c.srcHeight));
  const void* dst_host = nullptr;
  RETURN_IF_ERROR(SideOf(m->dstArray, m->dstPos, m->dstPtr, dst_dev, &c.dstMemoryType, &dst_host, &c.dstDevice, &c.dstArray,
                       &c.dstXInBytes, &c.dstY, &c.dstZ, &c.dstPitch, &c.dstHeight));
  c.dstHost = const_cast<void*>(dst_host);
  c.WidthInBytes = m->extent.width;
  c.Height = m->extent.height;
  c.Depth = m->extent.depth;
  // With an array the runtime counts the width, and an array's x position, in its elements;
  // the driver in bytes.
  if (m->srcArray != nullptr || m->dstArray != nullptr) {
    auto entry = ClientArrays::Get().FindArray(reinterpret_cast<uint64_t>(m->srcArray != nullptr ? m->srcArray : m->dstArray));
    if (!entry) return Error(Err::kInvalidResourceHandle, "not an array of this process");
    c.WidthInBytes *= entry->elem;
    if (m->srcArray != nullptr) c.srcXInBytes *= entry->elem;
    if (m->dstArray != nullptr) {
      auto d = ClientArrays::Get().FindArray(reinterpret_cast<uint64_t>(m->dstArray));
      if (!d) return Error(Err::kInvalidResourceHandle, "not an array of this process");
      c.dstXInBytes *= d->elem;
    }
  }
  return p;
}

Result<CUgraphNodeParams> Copy1D(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  cudaMemcpy3DParms m{};
  m.srcPtr = Pitched(const_cast<void*>(src), count, count, 1);
  m.dstPtr = Pitched(dst, count, count, 1);
  m.extent = Extent3(count, 1, 1);
  m.kind = kind;
  return Copy(&m);
}

Result<char*> SymbolAddress(const void* symbol, size_t count, size_t offset) {
  VariableRecord* v = Registry::Get().FindVariable(symbol);
  if (v == nullptr) return Error(Err::kInvalidSymbol, "{} is not a registered device variable", symbol);
  ASSIGN_OR_RETURN(int device, Runtime::Get().CurrentDevice());
  ASSIGN_OR_RETURN(auto g, GlobalOn(v, device));
  if (offset > g.second || count > g.second - offset)
    return Error(Err::kInvalidValue, "{} bytes at offset {} do not fit the {}-byte variable", count, offset, g.second);
  return reinterpret_cast<char*>(g.first) + offset;
}

CUgraphNodeParams Memset(const cudaMemsetParams* m) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMSET;
  p.memset.dst = reinterpret_cast<CUdeviceptr>(m->dst);
  p.memset.pitch = m->pitch;
  p.memset.value = m->value;
  p.memset.elementSize = m->elementSize;
  p.memset.width = m->width;
  p.memset.height = m->height;
  return p;
}

CUgraphNodeParams Host(const cudaHostNodeParams* h) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_HOST;
  p.host.fn = h->fn;
  p.host.userData = h->userData;
  return p;
}

CUgraphNodeParams EventNode(bool record, cudaEvent_t e) {
  CUgraphNodeParams p{};
  p.type = record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  if (record) p.eventRecord.event = e;
  else p.eventWait.event = e;
  return p;
}

CUgraphNodeParams Child(cudaGraph_t g, cudaGraphChildGraphNodeOwnership ownership) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_GRAPH;
  p.graph.graph = g;
  p.graph.ownership = static_cast<CUgraphChildGraphNodeOwnership>(ownership);
  return p;
}

// The runtime's generic parameters as the driver's (the output members written back after).
Result<CUgraphNodeParams> FromRuntime(const cudaGraphNodeParams* r) {
  if (r == nullptr) return Invalid("nodeParams is NULL");
  switch (r->type) {
    case cudaGraphNodeTypeKernel: {
      cudaKernelNodeParams k{r->kernel.func, r->kernel.gridDim, r->kernel.blockDim, r->kernel.sharedMemBytes,
                             r->kernel.kernelParams, r->kernel.extra};
      return Kernel(&k);
    }
    case cudaGraphNodeTypeMemcpy:
      return Copy(&r->memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
      cudaMemsetParams m{r->memset.dst, r->memset.pitch, r->memset.value, r->memset.elementSize, r->memset.width, r->memset.height};
      return Memset(&m);
    }
    case cudaGraphNodeTypeHost: {
      cudaHostNodeParams h{r->host.fn, r->host.userData};
      return Host(&h);
    }
    case cudaGraphNodeTypeGraph:
      return Child(r->graph.graph, r->graph.ownership);
    case cudaGraphNodeTypeEventRecord:
      return EventNode(true, r->eventRecord.event);
    case cudaGraphNodeTypeWaitEvent:
      return EventNode(false, r->eventWait.event);
    case cudaGraphNodeTypeMemAlloc: {
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      static_assert(sizeof(p.alloc) == sizeof(r->alloc), "the runtime's and the driver's allocation parameters differ");
      std::memcpy(&p.alloc, &r->alloc, sizeof(p.alloc));
      return p;
    }
    case cudaGraphNodeTypeMemFree: {
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
      p.free.dptr = reinterpret_cast<CUdeviceptr>(r->free.dptr);
      return p;
    }
    case cudaGraphNodeTypeConditional: {
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
      p.conditional.handle = r->conditional.handle;
      p.conditional.type = static_cast<CUgraphConditionalNodeType>(r->conditional.type);
      p.conditional.size = r->conditional.size;
      return p;
    }
    case cudaGraphNodeTypeEmpty: {
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_EMPTY;
      return p;
    }
    default:
      return Error(Err::kNotSupported, "graph nodes of type {} are not supported by Remora", static_cast<int>(r->type));
  }
}

cudaError_t Add(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, const cudaGraphEdgeData* edges,
                size_t n, Result<CUgraphNodeParams> params, const char* call, CUgraphNodeParams* out = nullptr) {
  return Done(AddNode(CallCtx{false, call}, node, graph, deps, reinterpret_cast<const CUgraphEdgeData*>(edges), n,
                      std::move(params), out),
              call);
}

cudaError_t Set(cudaGraphNode_t node, Result<CUgraphNodeParams> params, const char* call) {
  return Done(SetNode(CallCtx{false, call}, node, std::move(params)), call);
}

cudaError_t ExecSet(cudaGraphExec_t exec, cudaGraphNode_t node, Result<CUgraphNodeParams> params, const char* call) {
  return Done(ExecSetNode(CallCtx{false, call}, exec, node, std::move(params)), call);
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

// ---- adding nodes ------------------------------------------------------------------------------

REMORA_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                              size_t numDependencies, const cudaKernelNodeParams* pNodeParams) {
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, Kernel(pNodeParams), "cudaGraphAddKernelNode");
}
REMORA_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                              size_t numDependencies, const cudaMemcpy3DParms* pCopyParams) {
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, Copy(pCopyParams), "cudaGraphAddMemcpyNode");
}
REMORA_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                                size_t numDependencies, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, Copy1D(dst, src, count, kind), "cudaGraphAddMemcpyNode1D");
}
REMORA_API cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                      const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                      const void* symbol, const void* src, size_t count, size_t offset,
                                                      cudaMemcpyKind kind) {
  auto dst = SymbolAddress(symbol, count, offset);
  if (!dst.ok()) return Done(dst.status(), "cudaGraphAddMemcpyNodeToSymbol");
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, Copy1D(*dst, src, count, kind),
             "cudaGraphAddMemcpyNodeToSymbol");
}
REMORA_API cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                        const cudaGraphNode_t* pDependencies, size_t numDependencies, void* dst,
                                                        const void* symbol, size_t count, size_t offset, cudaMemcpyKind kind) {
  auto src = SymbolAddress(symbol, count, offset);
  if (!src.ok()) return Done(src.status(), "cudaGraphAddMemcpyNodeFromSymbol");
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, Copy1D(dst, *src, count, kind),
             "cudaGraphAddMemcpyNodeFromSymbol");
}
REMORA_API cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                              size_t numDependencies, const cudaMemsetParams* pMemsetParams) {
  if (pMemsetParams == nullptr) return Done(Invalid("pMemsetParams is NULL"), "cudaGraphAddMemsetNode");
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, Memset(pMemsetParams), "cudaGraphAddMemsetNode");
}
REMORA_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                            size_t numDependencies, const cudaHostNodeParams* pNodeParams) {
  if (pNodeParams == nullptr) return Done(Invalid("pNodeParams is NULL"), "cudaGraphAddHostNode");
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, Host(pNodeParams), "cudaGraphAddHostNode");
}
REMORA_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                  const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                  cudaGraph_t childGraph) {
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, Child(childGraph, cudaGraphChildGraphOwnershipClone),
             "cudaGraphAddChildGraphNode");
}
REMORA_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                             size_t numDependencies) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_EMPTY;
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, p, "cudaGraphAddEmptyNode");
}
REMORA_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                   const cudaGraphNode_t* pDependencies, size_t numDependencies, cudaEvent_t event) {
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, EventNode(true, event), "cudaGraphAddEventRecordNode");
}
REMORA_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t* pDependencies, size_t numDependencies, cudaEvent_t event) {
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, EventNode(false, event), "cudaGraphAddEventWaitNode");
}
REMORA_API cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                cudaMemAllocNodeParams* nodeParams) {
  if (nodeParams == nullptr) return Done(Invalid("nodeParams is NULL"), "cudaGraphAddMemAllocNode");
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  static_assert(sizeof(p.alloc) == sizeof(*nodeParams), "the runtime's and the driver's allocation parameters differ");
  std::memcpy(&p.alloc, nodeParams, sizeof(p.alloc));
  CUgraphNodeParams out{};
  cudaError_t e = Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, p, "cudaGraphAddMemAllocNode", &out);
  if (e == cudaSuccess) nodeParams->dptr = reinterpret_cast<void*>(out.alloc.dptr);
  return e;
}
REMORA_API cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t* pDependencies, size_t numDependencies, void* dptr) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  p.free.dptr = reinterpret_cast<CUdeviceptr>(dptr);
  return Add(pGraphNode, graph, pDependencies, nullptr, numDependencies, p, "cudaGraphAddMemFreeNode");
}
REMORA_API cudaError_t cudaGraphAddNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                        const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                        cudaGraphNodeParams* nodeParams) {
  CUgraphNodeParams out{};
  cudaError_t e = Add(pGraphNode, graph, pDependencies, dependencyData, numDependencies, FromRuntime(nodeParams),
                      "cudaGraphAddNode", &out);
  if (e != cudaSuccess) return e;
  if (nodeParams->type == cudaGraphNodeTypeMemAlloc) nodeParams->alloc.dptr = reinterpret_cast<void*>(out.alloc.dptr);
  if (nodeParams->type == cudaGraphNodeTypeConditional) nodeParams->conditional.phGraph_out = out.conditional.phGraph_out;
  return e;
}

REMORA_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* pHandle_out, cudaGraph_t graph,
                                                        unsigned int defaultLaunchValue, unsigned int flags) {
  return Done(gen::cuda::cuGraphConditionalHandleCreate(CallCtx{false, "cudaGraphConditionalHandleCreate"},
                                                        reinterpret_cast<CUgraphConditionalHandle*>(pHandle_out), graph,
                                                        nullptr, defaultLaunchValue, flags),
              "cudaGraphConditionalHandleCreate");
}

// ---- changing nodes --------------------------------------------------------------------------------

REMORA_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, cudaGraphNodeParams* nodeParams) {
  return Set(node, FromRuntime(nodeParams), "cudaGraphNodeSetParams");
}
REMORA_API cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node, cudaGraphNodeParams* nodeParams) {
  return ExecSet(graphExec, node, FromRuntime(nodeParams), "cudaGraphExecNodeSetParams");
}
REMORA_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const cudaKernelNodeParams* pNodeParams) {
  return Set(node, Kernel(pNodeParams), "cudaGraphKernelNodeSetParams");
}
REMORA_API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                        const cudaKernelNodeParams* pNodeParams) {
  return ExecSet(hGraphExec, node, Kernel(pNodeParams), "cudaGraphExecKernelNodeSetParams");
}
REMORA_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const cudaMemcpy3DParms* pNodeParams) {
  return Set(node, Copy(pNodeParams), "cudaGraphMemcpyNodeSetParams");
}
REMORA_API cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void* dst, const void* src, size_t count,
                                                      cudaMemcpyKind kind) {
  return Set(node, Copy1D(dst, src, count, kind), "cudaGraphMemcpyNodeSetParams1D");
}
REMORA_API cudaError_t cudaGraphMemcpyNodeSetParamsToSymbol(cudaGraphNode_t node, const void* symbol, const void* src,
                                                            size_t count, size_t offset, cudaMemcpyKind kind) {
  auto dst = SymbolAddress(symbol, count, offset);
  if (!dst.ok()) return Done(dst.status(), "cudaGraphMemcpyNodeSetParamsToSymbol");
  return Set(node, Copy1D(*dst, src, count, kind), "cudaGraphMemcpyNodeSetParamsToSymbol");
}
REMORA_API cudaError_t cudaGraphMemcpyNodeSetParamsFromSymbol(cudaGraphNode_t node, void* dst, const void* symbol, size_t count,
                                                              size_t offset, cudaMemcpyKind kind) {
  auto src = SymbolAddress(symbol, count, offset);
  if (!src.ok()) return Done(src.status(), "cudaGraphMemcpyNodeSetParamsFromSymbol");
  return Set(node, Copy1D(dst, *src, count, kind), "cudaGraphMemcpyNodeSetParamsFromSymbol");
}
REMORA_API cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                        const cudaMemcpy3DParms* pNodeParams) {
  return ExecSet(hGraphExec, node, Copy(pNodeParams), "cudaGraphExecMemcpyNodeSetParams");
}
REMORA_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void* dst,
                                                          const void* src, size_t count, cudaMemcpyKind kind) {
  return ExecSet(hGraphExec, node, Copy1D(dst, src, count, kind), "cudaGraphExecMemcpyNodeSetParams1D");
}
REMORA_API cudaError_t cudaGraphExecMemcpyNodeSetParamsToSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                                const void* symbol, const void* src, size_t count, size_t offset,
                                                                cudaMemcpyKind kind) {
  auto dst = SymbolAddress(symbol, count, offset);
  if (!dst.ok()) return Done(dst.status(), "cudaGraphExecMemcpyNodeSetParamsToSymbol");
  return ExecSet(hGraphExec, node, Copy1D(*dst, src, count, kind), "cudaGraphExecMemcpyNodeSetParamsToSymbol");
}
REMORA_API cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void* dst,
                                                                  const void* symbol, size_t count, size_t offset,
                                                                  cudaMemcpyKind kind) {
  auto src = SymbolAddress(symbol, count, offset);
  if (!src.ok()) return Done(src.status(), "cudaGraphExecMemcpyNodeSetParamsFromSymbol");
  return ExecSet(hGraphExec, node, Copy1D(dst, *src, count, kind), "cudaGraphExecMemcpyNodeSetParamsFromSymbol");
}
REMORA_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const cudaMemsetParams* pNodeParams) {
  if (pNodeParams == nullptr) return Done(Invalid("pNodeParams is NULL"), "cudaGraphMemsetNodeSetParams");
  return Set(node, Memset(pNodeParams), "cudaGraphMemsetNodeSetParams");
}
REMORA_API cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                        const cudaMemsetParams* pNodeParams) {
  if (pNodeParams == nullptr) return Done(Invalid("pNodeParams is NULL"), "cudaGraphExecMemsetNodeSetParams");
  return ExecSet(hGraphExec, node, Memset(pNodeParams), "cudaGraphExecMemsetNodeSetParams");
}
REMORA_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const cudaHostNodeParams* pNodeParams) {
  if (pNodeParams == nullptr) return Done(Invalid("pNodeParams is NULL"), "cudaGraphHostNodeSetParams");
  return Set(node, Host(pNodeParams), "cudaGraphHostNodeSetParams");
}
REMORA_API cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                      const cudaHostNodeParams* pNodeParams) {
  if (pNodeParams == nullptr) return Done(Invalid("pNodeParams is NULL"), "cudaGraphExecHostNodeSetParams");
  return ExecSet(hGraphExec, node, Host(pNodeParams), "cudaGraphExecHostNodeSetParams");
}
REMORA_API cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                            cudaGraph_t childGraph) {
  return ExecSet(hGraphExec, node, Child(childGraph, cudaGraphChildGraphOwnershipClone), "cudaGraphExecChildGraphNodeSetParams");
}
REMORA_API cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
  return Set(node, EventNode(true, event), "cudaGraphEventRecordNodeSetEvent");
}
REMORA_API cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
  return Set(node, EventNode(false, event), "cudaGraphEventWaitNodeSetEvent");
}
REMORA_API cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, cudaEvent_t event) {
  return ExecSet(hGraphExec, hNode, EventNode(true, event), "cudaGraphExecEventRecordNodeSetEvent");
}
REMORA_API cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, cudaEvent_t event) {
  return ExecSet(hGraphExec, hNode, EventNode(false, event), "cudaGraphExecEventWaitNodeSetEvent");
}

// ---- parameters back -------------------------------------------------------------------------------

REMORA_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* pNodeParams) {
  if (pNodeParams == nullptr) return Done(Invalid("pNodeParams is NULL"), "cudaGraphKernelNodeGetParams");
  CUDA_KERNEL_NODE_PARAMS k{};
  Status st = gen::cuda::cuGraphKernelNodeGetParams_v2(CallCtx{false, "cudaGraphKernelNodeGetParams"}, node, &k);
  if (!st.ok()) return Done(st, "cudaGraphKernelNodeGetParams");
  auto [record, info] = Registry::Get().KernelByHandle(reinterpret_cast<uint64_t>(k.func));
  pNodeParams->func = record != nullptr ? const_cast<void*>(record->host_fun) : nullptr;
  pNodeParams->gridDim = dim3(k.gridDimX, k.gridDimY, k.gridDimZ);
  pNodeParams->blockDim = dim3(k.blockDimX, k.blockDimY, k.blockDimZ);
  pNodeParams->sharedMemBytes = k.sharedMemBytes;
  pNodeParams->kernelParams = k.kernelParams;
  pNodeParams->extra = nullptr;
  (void)info;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, cudaMemcpy3DParms* pNodeParams) {
  if (pNodeParams == nullptr) return Done(Invalid("pNodeParams is NULL"), "cudaGraphMemcpyNodeGetParams");
  CUDA_MEMCPY3D m{};
  Status st = gen::cuda::cuGraphMemcpyNodeGetParams(CallCtx{false, "cudaGraphMemcpyNodeGetParams"}, node, &m);
  if (!st.ok()) return Done(st, "cudaGraphMemcpyNodeGetParams");
  cudaMemcpy3DParms r{};
  auto side = [](CUmemorytype t, const void* host, CUdeviceptr dev, CUarray arr, size_t pitch, size_t height, size_t width,
                 cudaArray_t* a, cudaPitchedPtr* p) {
    if (t == CU_MEMORYTYPE_ARRAY) {
      *a = reinterpret_cast<cudaArray_t>(arr);
      return;
    }
    void* ptr = t == CU_MEMORYTYPE_HOST ? const_cast<void*>(host) : reinterpret_cast<void*>(dev);
    *p = Pitched(ptr, pitch, width, height);
  };
  side(m.srcMemoryType, m.srcHost, m.srcDevice, m.srcArray, m.srcPitch, m.srcHeight, m.WidthInBytes, &r.srcArray, &r.srcPtr);
  side(m.dstMemoryType, m.dstHost, m.dstDevice, m.dstArray, m.dstPitch, m.dstHeight, m.WidthInBytes, &r.dstArray, &r.dstPtr);
  r.srcPos = cudaPos{m.srcXInBytes, m.srcY, m.srcZ};
  r.dstPos = cudaPos{m.dstXInBytes, m.dstY, m.dstZ};
  r.extent = Extent3(m.WidthInBytes, m.Height, m.Depth);
  // Back in the runtime's units: an array's elements.
  auto elem = [](cudaArray_t a) -> size_t {
    auto e = a != nullptr ? ClientArrays::Get().FindArray(reinterpret_cast<uint64_t>(a)) : std::nullopt;
    return e && e->elem > 0 ? e->elem : 1;
  };
  if (r.srcArray != nullptr || r.dstArray != nullptr) {
    r.extent.width /= elem(r.srcArray != nullptr ? r.srcArray : r.dstArray);
    r.srcPos.x /= elem(r.srcArray);
    r.dstPos.x /= elem(r.dstArray);
  }
  bool src_host = m.srcMemoryType == CU_MEMORYTYPE_HOST, dst_host = m.dstMemoryType == CU_MEMORYTYPE_HOST;
  r.kind = src_host ? (dst_host ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
                    : (dst_host ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
  *pNodeParams = r;
  return cudaSuccess;
}

// ---- launching ---------------------------------------------------------------------------------------

REMORA_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return Done(GraphLaunchWithBindings(CallCtx{false, "cudaGraphLaunch"}, graphExec, stream), "cudaGraphLaunch");
}
REMORA_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return Done(GraphLaunchWithBindings(CallCtx{true, "cudaGraphLaunch"}, graphExec, stream), "cudaGraphLaunch");
}

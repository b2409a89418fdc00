#include "worker/backend/host/host_graph_api.h"

#include <cstring>

namespace remora::worker {

CUresult HostGraphApi::cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  return g_.BeginCapture(s, mode, nullptr, nullptr, 0);
}
CUresult HostGraphApi::cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData*,
                                                   size_t n, CUstreamCaptureMode mode) {
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return g_.BeginCapture(s, mode, reinterpret_cast<EmuGraph*>(g), deps, n);
}
CUresult HostGraphApi::cuStreamEndCapture(CUstream s, CUgraph* g) { return g_.EndCapture(s, g); }
CUresult HostGraphApi::cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) { return g_.IsCapturing(s, status); }
CUresult HostGraphApi::cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* g,
                                                 const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* n) {
  return g_.CaptureInfo(s, status, id, g, deps, edges, n);
}
CUresult HostGraphApi::cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps, const CUgraphEdgeData*, size_t n,
                                                            unsigned int flags) {
  return g_.UpdateCaptureDependencies(s, deps, n, flags);
}

CUresult HostGraphApi::cuGraphCreate(CUgraph* g, unsigned int flags) {
  return flags != 0 ? CUDA_ERROR_INVALID_VALUE : g_.Create(g);
}
CUresult HostGraphApi::cuGraphDestroy(CUgraph g) { return g_.Destroy(g); }
CUresult HostGraphApi::cuGraphClone(CUgraph* out, CUgraph g) { return g_.Clone(out, g); }
CUresult HostGraphApi::cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long flags) {
  return g_.Instantiate(e, g, flags);
}
CUresult HostGraphApi::cuGraphInstantiateWithParams(CUgraphExec* e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = g_.Instantiate(e, g, p->flags);
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  p->hErrNode_out = nullptr;
  return r;
}
CUresult HostGraphApi::cuGraphExecDestroy(CUgraphExec e) { return g_.ExecDestroy(e); }
CUresult HostGraphApi::cuGraphLaunch(CUgraphExec e, CUstream s) { return g_.Launch(e, s); }
CUresult HostGraphApi::cuGraphUpload(CUgraphExec, CUstream) { return CUDA_SUCCESS; }  // nothing to upload in host RAM
CUresult HostGraphApi::cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  return g_.Update(e, g, info);
}
CUresult HostGraphApi::cuGraphExecGetFlags(CUgraphExec e, cuuint64_t* flags) { return g_.ExecFlags(e, flags); }
CUresult HostGraphApi::cuGraphDebugDotPrint(CUgraph g, const char* path, unsigned int) { return g_.DotPrint(g, path); }
CUresult HostGraphApi::cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* n) { return g_.Nodes(g, false, nodes, n); }
CUresult HostGraphApi::cuGraphGetRootNodes(CUgraph g, CUgraphNode* nodes, size_t* n) { return g_.Nodes(g, true, nodes, n); }
CUresult HostGraphApi::cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* n) {
  CUresult r = g_.Edges(g, from, to, n);
  if (r == CUDA_SUCCESS && edges != nullptr && from != nullptr)
    for (size_t i = 0; i < *n; i++) edges[i] = CUgraphEdgeData{};
  return r;
}
CUresult HostGraphApi::cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges, size_t* n) {
  CUresult r = g_.Neighbours(node, false, deps, n);
  if (r == CUDA_SUCCESS && edges != nullptr && deps != nullptr)
    for (size_t i = 0; i < *n; i++) edges[i] = CUgraphEdgeData{};
  return r;
}
CUresult HostGraphApi::cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges,
                                                       size_t* n) {
  CUresult r = g_.Neighbours(node, true, deps, n);
  if (r == CUDA_SUCCESS && edges != nullptr && deps != nullptr)
    for (size_t i = 0; i < *n; i++) edges[i] = CUgraphEdgeData{};
  return r;
}
CUresult HostGraphApi::cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                 const CUgraphEdgeData*, size_t n) {
  return g_.Connect(g, from, to, n, true);
}
CUresult HostGraphApi::cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                    const CUgraphEdgeData*, size_t n) {
  return g_.Connect(g, from, to, n, false);
}
CUresult HostGraphApi::cuGraphDestroyNode(CUgraphNode node) { return g_.DestroyNode(node); }
CUresult HostGraphApi::cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) { return g_.NodeType(node, type); }
CUresult HostGraphApi::cuGraphNodeFindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone) {
  return g_.FindInClone(out, original, clone);
}
CUresult HostGraphApi::cuGraphNodeSetEnabled(CUgraphExec e, CUgraphNode node, unsigned int enabled) {
  return g_.SetEnabled(e, node, enabled);
}
CUresult HostGraphApi::cuGraphNodeGetEnabled(CUgraphExec e, CUgraphNode node, unsigned int* enabled) {
  return g_.GetEnabled(e, node, enabled);
}
CUresult HostGraphApi::cuGraphAddNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData*,
                                         size_t n, CUgraphNodeParams* p) {
  return g_.AddNode(out, g, deps, n, p);
}
CUresult HostGraphApi::cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* p) { return g_.SetParams(node, p); }
CUresult HostGraphApi::cuGraphExecNodeSetParams(CUgraphExec e, CUgraphNode node, CUgraphNodeParams* p) {
  return g_.ExecSetParams(e, node, p);
}

CUresult HostGraphApi::cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  CUgraphNodeParams all{};
  CUresult r = g_.Params(node, CU_GRAPH_NODE_TYPE_KERNEL, &all);
  if (r == CUDA_SUCCESS) std::memcpy(p, &all.kernel, sizeof(*p));
  return r;
}
CUresult HostGraphApi::cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* p) {
  CUgraphNodeParams all{};
  CUresult r = g_.Params(node, CU_GRAPH_NODE_TYPE_MEMCPY, &all);
  if (r == CUDA_SUCCESS) *p = all.memcpy.copyParams;
  return r;
}
CUresult HostGraphApi::cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  CUgraphNodeParams all{};
  CUresult r = g_.Params(node, CU_GRAPH_NODE_TYPE_MEMSET, &all);
  if (r == CUDA_SUCCESS) std::memcpy(p, &all.memset, sizeof(*p));
  return r;
}
CUresult HostGraphApi::cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) {
  CUgraphNodeParams all{};
  CUresult r = g_.Params(node, CU_GRAPH_NODE_TYPE_HOST, &all);
  if (r == CUDA_SUCCESS) std::memcpy(p, &all.host, sizeof(*p));
  return r;
}
CUresult HostGraphApi::cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* g) { return g_.ChildGraph(node, g); }
CUresult HostGraphApi::cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* e) {
  CUgraphNodeParams all{};
  CUresult r = g_.Params(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, &all);
  if (r == CUDA_SUCCESS) *e = all.eventRecord.event;
  return r;
}
CUresult HostGraphApi::cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* e) {
  CUgraphNodeParams all{};
  CUresult r = g_.Params(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, &all);
  if (r == CUDA_SUCCESS) *e = all.eventWait.event;
  return r;
}
CUresult HostGraphApi::cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  CUgraphNodeParams all{};
  CUresult r = g_.Params(node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &all);
  if (r == CUDA_SUCCESS) std::memcpy(p, &all.alloc, sizeof(*p));
  return r;
}
CUresult HostGraphApi::cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* dptr) {
  CUgraphNodeParams all{};
  CUresult r = g_.Params(node, CU_GRAPH_NODE_TYPE_MEM_FREE, &all);
  if (r == CUDA_SUCCESS) *dptr = all.free.dptr;
  return r;
}
CUresult HostGraphApi::cuGraphKernelNodeGetAttribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue* v) {
  return g_.KernelAttribute(node, id, v, nullptr);
}
CUresult HostGraphApi::cuGraphKernelNodeSetAttribute(CUgraphNode node, CUkernelNodeAttrID id, const CUkernelNodeAttrValue* v) {
  return g_.KernelAttribute(node, id, nullptr, v);
}
CUresult HostGraphApi::cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) { return g_.CopyAttributes(dst, src); }
CUresult HostGraphApi::cuGraphConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph g, CUcontext, unsigned int value,
                                                      unsigned int flags) {
  return g_.ConditionalHandleCreate(out, g, value, flags);
}
CUresult HostGraphApi::cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned int count, unsigned int flags) {
  if (flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) return CUDA_ERROR_INVALID_VALUE;
  return g_.UserObjectCreate(out, ptr, destroy, count);
}
CUresult HostGraphApi::cuUserObjectRetain(CUuserObject o, unsigned int count) { return g_.UserObjectRef(o, static_cast<int>(count)); }
CUresult HostGraphApi::cuUserObjectRelease(CUuserObject o, unsigned int count) { return g_.UserObjectRef(o, -static_cast<int>(count)); }
// A graph's reference is the object's reference: the emulation keeps one count.
CUresult HostGraphApi::cuGraphRetainUserObject(CUgraph, CUuserObject o, unsigned int count, unsigned int flags) {
  return flags == CU_GRAPH_USER_OBJECT_MOVE ? CUDA_SUCCESS : g_.UserObjectRef(o, static_cast<int>(count));
}
CUresult HostGraphApi::cuGraphReleaseUserObject(CUgraph, CUuserObject o, unsigned int count) {
  return g_.UserObjectRef(o, -static_cast<int>(count));
}
CUresult HostGraphApi::cuDeviceGraphMemTrim(CUdevice) { return CUDA_SUCCESS; }
CUresult HostGraphApi::cuDeviceGetGraphMemAttribute(CUdevice, CUgraphMem_attribute attr, void* value) {
  if (attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<cuuint64_t*>(value) = 0;  // graph memory is ordinary emulated memory here
  return CUDA_SUCCESS;
}
CUresult HostGraphApi::cuDeviceSetGraphMemAttribute(CUdevice, CUgraphMem_attribute attr, void* value) {
  // Only the high watermarks can be reset, to zero.
  if ((attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) ||
      *static_cast<cuuint64_t*>(value) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

}  // namespace remora::worker

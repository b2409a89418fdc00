// The driver API's capture and graph functions on the host-emulated backend, over
// HostGraphs (host_graph.h). A base of the host backend's driver table (host_cuda_api.cc).
#pragma once

#include "cuda_api.h"
#include "worker/backend/host/host_graph.h"

namespace remora::worker {

class HostGraphApi : public gen::cuda::Api {
 public:
  explicit HostGraphApi(HostGraphs& graphs) : g_(graphs) {}

  CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) override;
  CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                                       size_t n, CUstreamCaptureMode mode) override;
  CUresult cuStreamEndCapture(CUstream s, CUgraph* g) override;
  CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) override;
  CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* g,
                                     const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* n) override;
  CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n,
                                                unsigned int flags) override;

  CUresult cuGraphCreate(CUgraph* g, unsigned int flags) override;
  CUresult cuGraphDestroy(CUgraph g) override;
  CUresult cuGraphClone(CUgraph* out, CUgraph g) override;
  CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long flags) override;
  CUresult cuGraphInstantiateWithParams(CUgraphExec* e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) override;
  CUresult cuGraphExecDestroy(CUgraphExec e) override;
  CUresult cuGraphLaunch(CUgraphExec e, CUstream s) override;
  CUresult cuGraphUpload(CUgraphExec e, CUstream s) override;
  CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo* info) override;
  CUresult cuGraphExecGetFlags(CUgraphExec e, cuuint64_t* flags) override;
  CUresult cuGraphDebugDotPrint(CUgraph g, const char* path, unsigned int flags) override;
  CUresult cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* n) override;
  CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode* nodes, size_t* n) override;
  CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* n) override;
  CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges, size_t* n) override;
  CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges, size_t* n) override;
  CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* edges,
                                     size_t n) override;
  CUresult cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                        const CUgraphEdgeData* edges, size_t n) override;
  CUresult cuGraphDestroyNode(CUgraphNode node) override;
  CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) override;
  CUresult cuGraphNodeFindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone) override;
  CUresult cuGraphNodeSetEnabled(CUgraphExec e, CUgraphNode node, unsigned int enabled) override;
  CUresult cuGraphNodeGetEnabled(CUgraphExec e, CUgraphNode node, unsigned int* enabled) override;
  CUresult cuGraphAddNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n,
                             CUgraphNodeParams* p) override;
  CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* p) override;
  CUresult cuGraphExecNodeSetParams(CUgraphExec e, CUgraphNode node, CUgraphNodeParams* p) override;
  CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) override;
  CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* p) override;
  CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) override;
  CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) override;
  CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* g) override;
  CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* e) override;
  CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* e) override;
  CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* p) override;
  CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* dptr) override;
  CUresult cuGraphKernelNodeGetAttribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue* v) override;
  CUresult cuGraphKernelNodeSetAttribute(CUgraphNode node, CUkernelNodeAttrID id, const CUkernelNodeAttrValue* v) override;
  CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) override;
  CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph g, CUcontext ctx, unsigned int value,
                                          unsigned int flags) override;
  CUresult cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned int count, unsigned int flags) override;
  CUresult cuUserObjectRetain(CUuserObject o, unsigned int count) override;
  CUresult cuUserObjectRelease(CUuserObject o, unsigned int count) override;
  CUresult cuGraphRetainUserObject(CUgraph g, CUuserObject o, unsigned int count, unsigned int flags) override;
  CUresult cuGraphReleaseUserObject(CUgraph g, CUuserObject o, unsigned int count) override;
  CUresult cuDeviceGraphMemTrim(CUdevice device) override;
  CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) override;
  CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) override;

 protected:
  HostGraphs& graphs() { return g_; }

 private:
  HostGraphs& g_;
};

}  // namespace remora::worker

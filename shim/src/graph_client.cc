// The client ends of the `hand` entries of protocol/api/cuda.api (capture and graphs): the
// arguments are encoded as protocol/api/cuda_graph_wire.h says, resolving what only the
// client knows (a kernel's parameter layout, whether host memory is shared with the worker,
// the functions of host nodes) and keeping what the application must get back in memory the
// client owns. The worker's ends are server/worker/graphs/ops_capture.cc, ops_graph*.cc.
#include <cstring>
#include <vector>

#include "callbacks.h"
#include "thread_slot.h"
#include "cuda_client.h"
#include "cuda_graph_wire.h"
#include "driver/objects.h"
#include "graph_client.h"
#include "graph_params.h"
#include "process.h"
#include "registry.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {

using api::cuda::WireBinding;

namespace {

RemoteCall Call(const CallCtx& cc, uint32_t fn) {
  return RemoteCall(cc, gen::cuda::kLibrary, fn, CallClass::kSync, Domain::kCuda);
}

}  // namespace

Status AddNode(const CallCtx& cc, CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
               size_t n, Result<CUgraphNodeParams> params, CUgraphNodeParams* out) {
  RETURN_IF_ERROR(params.status());
  RETURN_IF_ERROR(gen::cuda::cuGraphAddNode_v2(cc, node, graph, deps, edges, n, &*params));
  if (out != nullptr) *out = *params;
  return Status::Ok();
}

Status SetNode(const CallCtx& cc, CUgraphNode node, Result<CUgraphNodeParams> params) {
  RETURN_IF_ERROR(params.status());
  return gen::cuda::cuGraphNodeSetParams(cc, node, &*params);
}

Status ExecSetNode(const CallCtx& cc, CUgraphExec exec, CUgraphNode node, Result<CUgraphNodeParams> params) {
  RETURN_IF_ERROR(params.status());
  return gen::cuda::cuGraphExecNodeSetParams(cc, exec, node, &*params);
}

Status GraphLaunchWithBindings(const CallCtx& cc, CUgraphExec exec, CUstream stream) {
  Runtime& rt = Runtime::Get();
  RETURN_IF_ERROR(rt.managed().BeforeDeviceWork());
  std::vector<WireBinding> bindings = rt.graphs().Bindings(reinterpret_cast<uint64_t>(exec));
  if (bindings.empty()) return gen::cuda::cuGraphLaunch(cc, exec, stream);
  ASSIGN_OR_RETURN(Client * cl, rt.Session());
  int device = 0;
  RETURN_IF_ERROR(rt.CheckStream(reinterpret_cast<cudaStream_t>(stream), &device));
  auto stream_ref = [&](wire::StreamRef::Builder b) {
    b.setHandle(reinterpret_cast<uint64_t>(stream));
    b.setPerThread(cc.per_thread);
  };
  // The host memory the graph reads, into its staging, in the launch's stream order.
  for (const WireBinding& b : bindings) {
    if (!b.to_device) continue;
    RETURN_IF_ERROR(cl->Post(device, [&](wire::Request::Builder& r) {
      auto m = r.initMemcpyHtoD();
      m.setDst(b.staging);
      m.setSize(b.size);
      stream_ref(m.initStream());
      m.setAsync(true);
    }, AsBytes(reinterpret_cast<const void*>(b.client_addr), b.size)));
  }
  RETURN_IF_ERROR(gen::cuda::cuGraphLaunch(cc, exec, stream));
  // What it wrote, back into the application's memory once the stream gets there (before any
  // later call that waits for the stream returns: the replies arrive in order).
  for (const WireBinding& b : bindings) {
    if (b.to_device) continue;
    RETURN_IF_ERROR(cl->PostExpectingBulk(device, [&](wire::Request::Builder& r) {
      auto m = r.initMemcpyDtoH();
      m.setSrc(b.staging);
      m.setSize(b.size);
      stream_ref(m.initStream());
    }, AsWritableBytes(reinterpret_cast<void*>(b.client_addr), b.size)));
  }
  return Status::Ok();
}

}  // namespace remora::shim

namespace remora::gen::cuda {

using api::cuda::WireKernel;
using shim::Call;
using shim::RemoteCall;

Status cuStreamBeginCapture_v2(const shim::CallCtx& cc, CUstream hStream, CUstreamCaptureMode mode) {
  RemoteCall c = Call(cc, k_cuStreamBeginCapture_v2);
  RETURN_IF_ERROR(c.Stream(hStream));
  c.Put(mode);
  return c.Invoke();
}

Status cuStreamBeginCaptureToGraph(const shim::CallCtx& cc, CUstream hStream, CUgraph hGraph, const CUgraphNode* deps,
                                   const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  RemoteCall c = Call(cc, k_cuStreamBeginCaptureToGraph);
  RETURN_IF_ERROR(c.Stream(hStream));
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, hGraph, false));
  if (n > 0 && deps == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "dependencies is NULL");
  c.PutArray(deps, n, sizeof(CUgraphNode));
  c.Put<uint8_t>(edges != nullptr);
  if (edges != nullptr) c.PutArray(edges, n, sizeof(CUgraphEdgeData));
  c.Put<size_t>(n);
  c.Put(mode);
  return c.Invoke();
}

Status cuStreamEndCapture(const shim::CallCtx& cc, CUstream hStream, CUgraph* phGraph) {
  RemoteCall c = Call(cc, k_cuStreamEndCapture);
  RETURN_IF_ERROR(c.Stream(hStream));
  // phGraph may be NULL where the capture went into the application's graph
  // (cuStreamBeginCaptureToGraph): the driver on the worker decides, as it would here.
  c.Put<uint8_t>(phGraph != nullptr);
  if (phGraph != nullptr) *phGraph = nullptr;  // what a failed (invalidated, unjoined) capture leaves
  return c.Invoke([&](api::ArgReader& r) -> Status {
    uint64_t graph = r.Get<uint64_t>();
    if (phGraph != nullptr) *phGraph = reinterpret_cast<CUgraph>(graph);
    return r.Finish();
  });
}

Status cuStreamGetCaptureInfo_v3(const shim::CallCtx& cc, CUstream hStream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                 CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* n) {
  RemoteCall c = Call(cc, k_cuStreamGetCaptureInfo_v3);
  if (status == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "captureStatus_out is NULL");
  RETURN_IF_ERROR(c.Stream(hStream));
  c.Put<uint8_t>(0x1f);
  // The arrays stay valid until this thread asks again (CUDA: until the next capture call).
  auto& t_deps = shim::ThreadSlot<std::vector<CUgraphNode>>();
  auto& t_edges = shim::ThreadSlot<std::vector<CUgraphEdgeData>>();
  return c.Invoke([&](api::ArgReader& r) -> Status {
    *status = static_cast<CUstreamCaptureStatus>(r.Get<uint32_t>());
    uint64_t capture_id = r.Get<uint64_t>();
    uint64_t graph_h = r.Get<uint64_t>();
    uint64_t count = r.Get<uint64_t>();
    if (count > api::kMaxArgBytes / 8) return Error(Err::kUnknown, "malformed capture info");
    t_deps.resize(static_cast<size_t>(count));
    for (auto& d : t_deps) d = reinterpret_cast<CUgraphNode>(r.Get<uint64_t>());
    bool has_edges = r.Get<uint8_t>() != 0;
    t_edges.resize(has_edges ? static_cast<size_t>(count) : 0);
    for (auto& e : t_edges) e = r.Get<CUgraphEdgeData>();
    if (*status != CU_STREAM_CAPTURE_STATUS_NONE) {
      if (id) *id = capture_id;
      if (graph) *graph = reinterpret_cast<CUgraph>(graph_h);
      if (deps) *deps = t_deps.data();
      if (edges) *edges = has_edges ? t_edges.data() : nullptr;
      if (n) *n = t_deps.size();
    }
    return r.Finish();
  });
}

Status cuGraphDestroy(const shim::CallCtx& cc, CUgraph hGraph) {
  RemoteCall c = Call(cc, k_cuGraphDestroy);
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, hGraph, false));
  return c.Invoke();
}

Status cuGraphClone(const shim::CallCtx& cc, CUgraph* phGraphClone, CUgraph originalGraph) {
  RemoteCall c = Call(cc, k_cuGraphClone);
  if (phGraphClone == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "phGraphClone is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, originalGraph, false));
  return c.Invoke([&](api::ArgReader& r) -> Status {
    *phGraphClone = reinterpret_cast<CUgraph>(r.Get<uint64_t>());
    return r.Finish();
  });
}

Status cuGraphInstantiateWithFlags(const shim::CallCtx& cc, CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  RemoteCall c = Call(cc, k_cuGraphInstantiateWithFlags);
  if (phGraphExec == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "phGraphExec is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, hGraph, false));
  c.Put(flags);
  return c.Invoke([&](api::ArgReader& r) -> Status {
    uint64_t exec = r.Get<uint64_t>();
    RETURN_IF_ERROR(shim::ReadBindings(r, exec));
    *phGraphExec = reinterpret_cast<CUgraphExec>(exec);
    return r.Finish();
  });
}

Status cuGraphInstantiateWithParams(const shim::CallCtx& cc, CUgraphExec* phGraphExec, CUgraph hGraph,
                                    CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  RemoteCall c = Call(cc, k_cuGraphInstantiateWithParams);
  if (phGraphExec == nullptr || p == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "a NULL argument");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, hGraph, false));
  c.Put<cuuint64_t>(p->flags);
  RETURN_IF_ERROR(c.Stream(p->hUploadStream));
  return c.Invoke([&](api::ArgReader& r) -> Status {
    uint64_t exec = r.Get<uint64_t>();
    RETURN_IF_ERROR(shim::ReadBindings(r, exec));
    p->result_out = static_cast<CUgraphInstantiateResult>(r.Get<uint32_t>());
    p->hErrNode_out = reinterpret_cast<CUgraphNode>(r.Get<uint64_t>());
    *phGraphExec = reinterpret_cast<CUgraphExec>(exec);
    return r.Finish();
  });
}

Status cuGraphExecDestroy(const shim::CallCtx& cc, CUgraphExec hGraphExec) {
  RemoteCall c = Call(cc, k_cuGraphExecDestroy);
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphExec, hGraphExec, false));
  Status st = c.Invoke();
  if (st.ok()) shim::Runtime::Get().graphs().ForgetExec(reinterpret_cast<uint64_t>(hGraphExec));
  return st;
}

Status cuGraphExecUpdate_v2(const shim::CallCtx& cc, CUgraphExec hGraphExec, CUgraph hGraph,
                            CUgraphExecUpdateResultInfo* info) {
  RemoteCall c = Call(cc, k_cuGraphExecUpdate_v2);
  if (info == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "resultInfo is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphExec, hGraphExec, false));
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, hGraph, false));
  uint32_t code = 0;
  Status st = c.Invoke([&](api::ArgReader& r) -> Status {
    info->result = static_cast<CUgraphExecUpdateResult>(r.Get<uint32_t>());
    info->errorNode = reinterpret_cast<CUgraphNode>(r.Get<uint64_t>());
    info->errorFromNode = reinterpret_cast<CUgraphNode>(r.Get<uint64_t>());
    RETURN_IF_ERROR(shim::ReadBindings(r, reinterpret_cast<uint64_t>(hGraphExec)));
    code = r.Get<uint32_t>();
    return r.Finish();
  });
  if (st.ok() && code != 0) return Status(Domain::kCuda, code, "cuGraphExecUpdate: the graph cannot update this executable graph");
  return st;
}

Status cuGraphDebugDotPrint(const shim::CallCtx& cc, CUgraph hGraph, const char* path, unsigned int flags) {
  RemoteCall c = Call(cc, k_cuGraphDebugDotPrint);
  if (path == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "path is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, hGraph, false));
  c.PutString(path);
  c.Put(flags);
  std::vector<char> text;
  RETURN_IF_ERROR(c.Invoke([&](api::ArgReader& r) -> Status { return r.GetArray(&text); }));
  // The file is the application's, on this machine.
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return Status(Domain::kCuda, CUDA_ERROR_OPERATING_SYSTEM, std::string("cannot write ") + path);
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok &= std::fclose(f) == 0;
  if (!ok) return Status(Domain::kCuda, CUDA_ERROR_OPERATING_SYSTEM, std::string("cannot write ") + path);
  return Status::Ok();
}

namespace {

// The topology queries (ops_graph.cc Topology): `a`/`b` node arrays and `e` edge data, each
// may be NULL; *n is the capacity in, the count out.
Status Topology(const shim::CallCtx& cc, uint32_t fn, HandleKind kind, const void* subject, CUgraphNode* a,
                CUgraphNode* b, CUgraphEdgeData* e, size_t* n) {
  RemoteCall c = Call(cc, fn);
  if (n == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "the count is NULL");
  RETURN_IF_ERROR(c.Handle(kind, subject, false));
  uint8_t mask = (a ? 1 : 0) | (b ? 2 : 0) | (e ? 4 : 0);
  uint64_t capacity = mask ? *n : 0;
  c.Put<uint8_t>(mask);
  c.Put<uint64_t>(capacity);
  return c.Invoke([&](api::ArgReader& r) -> Status {
    *n = static_cast<size_t>(r.Get<uint64_t>());
    for (uint64_t i = 0; a && i < capacity; i++) a[i] = reinterpret_cast<CUgraphNode>(r.Get<uint64_t>());
    for (uint64_t i = 0; b && i < capacity; i++) b[i] = reinterpret_cast<CUgraphNode>(r.Get<uint64_t>());
    for (uint64_t i = 0; e && i < capacity; i++) e[i] = r.Get<CUgraphEdgeData>();
    return r.Finish();
  });
}

}  // namespace

Status cuGraphGetNodes(const shim::CallCtx& cc, CUgraph g, CUgraphNode* nodes, size_t* n) {
  return Topology(cc, k_cuGraphGetNodes, HandleKind::kGraph, g, nodes, nullptr, nullptr, n);
}
Status cuGraphGetRootNodes(const shim::CallCtx& cc, CUgraph g, CUgraphNode* nodes, size_t* n) {
  return Topology(cc, k_cuGraphGetRootNodes, HandleKind::kGraph, g, nodes, nullptr, nullptr, n);
}
Status cuGraphGetEdges_v2(const shim::CallCtx& cc, CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges,
                          size_t* n) {
  if ((from == nullptr) != (to == nullptr))
    return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "cuGraphGetEdges: from and to are both NULL or both not");
  return Topology(cc, k_cuGraphGetEdges_v2, HandleKind::kGraph, g, from, to, edges, n);
}
Status cuGraphNodeGetDependencies_v2(const shim::CallCtx& cc, CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges,
                                     size_t* n) {
  return Topology(cc, k_cuGraphNodeGetDependencies_v2, HandleKind::kGraphNode, node, deps, nullptr, edges, n);
}
Status cuGraphNodeGetDependentNodes_v2(const shim::CallCtx& cc, CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges,
                                       size_t* n) {
  return Topology(cc, k_cuGraphNodeGetDependentNodes_v2, HandleKind::kGraphNode, node, deps, nullptr, edges, n);
}

Status cuGraphDestroyNode(const shim::CallCtx& cc, CUgraphNode hNode) {
  RemoteCall c = Call(cc, k_cuGraphDestroyNode);
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphNode, hNode, false));
  return c.Invoke();
}

Status cuGraphAddNode_v2(const shim::CallCtx& cc, CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* deps,
                         const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* p) {
  RemoteCall c = Call(cc, k_cuGraphAddNode_v2);
  if (phGraphNode == nullptr || p == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "a NULL argument");
  if (n > 0 && deps == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "dependencies is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, hGraph, false));
  c.PutArray(deps, n, sizeof(CUgraphNode));
  c.Put<uint8_t>(edges != nullptr);
  if (edges != nullptr) c.PutArray(edges, n, sizeof(CUgraphEdgeData));
  uint64_t host_id = 0;
  Status enc = shim::EncodeNodeParams(c, *p, &host_id);
  if (!enc.ok()) {
    if (host_id) shim::HostCallbacks::Get().Cancel(host_id);
    return enc;
  }
  shim::Runtime& rt = shim::Runtime::Get();
  Status st = c.Invoke([&](api::ArgReader& r) -> Status {
    uint64_t node = r.Get<uint64_t>();
    *phGraphNode = reinterpret_cast<CUgraphNode>(node);
    if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      // The bodies stay readable as long as the process (CUDA: as long as the node).
      uint64_t count = r.Get<uint64_t>();
      if (count != p->conditional.size) return Error(Err::kUnknown, "malformed conditional node reply");
      static std::mutex mu;
      static auto* keep = new std::vector<std::unique_ptr<CUgraph[]>>();
      auto bodies = std::make_unique<CUgraph[]>(count);
      for (uint64_t i = 0; i < count; i++) bodies[i] = reinterpret_cast<CUgraph>(r.Get<uint64_t>());
      p->conditional.phGraph_out = bodies.get();
      std::lock_guard<std::mutex> lock(mu);
      keep->push_back(std::move(bodies));
    }
    if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      p->alloc.dptr = r.Get<uint64_t>();
      auto dev = rt.CurrentDevice();
      rt.AddDeviceAllocation(p->alloc.dptr, p->alloc.bytesize, dev.ok() ? *dev : 0, AllocKind::kGraphMemory);
    }
    if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) rt.graphs().SetCopy(node, p->memcpy.copyParams);
    return r.Finish();
  });
  if (!st.ok() && host_id) shim::HostCallbacks::Get().Cancel(host_id);
  return st;
}

Status cuGraphNodeSetParams(const shim::CallCtx& cc, CUgraphNode hNode, CUgraphNodeParams* p) {
  RemoteCall c = Call(cc, k_cuGraphNodeSetParams);
  if (p == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "nodeParams is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphNode, hNode, false));
  RETURN_IF_ERROR(shim::EncodeNodeParams(c, *p, nullptr));
  Status st = c.Invoke();
  if (st.ok() && p->type == CU_GRAPH_NODE_TYPE_MEMCPY)
    shim::Runtime::Get().graphs().SetCopy(reinterpret_cast<uint64_t>(hNode), p->memcpy.copyParams);
  return st;
}

Status cuGraphExecNodeSetParams(const shim::CallCtx& cc, CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams* p) {
  RemoteCall c = Call(cc, k_cuGraphExecNodeSetParams);
  if (p == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "nodeParams is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphExec, hGraphExec, false));
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphNode, hNode, false));
  RETURN_IF_ERROR(shim::EncodeNodeParams(c, *p, nullptr));
  return c.Invoke([&](api::ArgReader& r) -> Status {
    RETURN_IF_ERROR(shim::ReadBindings(r, reinterpret_cast<uint64_t>(hGraphExec)));
    return r.Finish();
  });
}

Status cuGraphKernelNodeGetParams_v2(const shim::CallCtx& cc, CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS* p) {
  RemoteCall c = Call(cc, k_cuGraphKernelNodeGetParams_v2);
  if (p == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "nodeParams is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphNode, hNode, false));
  return c.Invoke([&](api::ArgReader& r) -> Status {
    auto w = r.Get<WireKernel>();
    std::vector<std::byte> bytes;
    RETURN_IF_ERROR(r.GetArray(&bytes));
    *p = CUDA_KERNEL_NODE_PARAMS{};
    p->func = reinterpret_cast<CUfunction>(w.function);
    p->gridDimX = w.grid[0];
    p->gridDimY = w.grid[1];
    p->gridDimZ = w.grid[2];
    p->blockDimX = w.block[0];
    p->blockDimY = w.block[1];
    p->blockDimZ = w.block[2];
    p->sharedMemBytes = w.shared_mem;
    // The parameters, in storage of the client's that lasts until they are asked for again.
    auto& args = shim::Runtime::Get().graphs().ArgsFor(reinterpret_cast<uint64_t>(hNode));
    args.bytes = std::move(bytes);
    args.pointers.clear();
    const shim::KernelInfo* info = shim::LayoutOf(w.function);
    if (info != nullptr)
      for (const auto& [offset, size] : info->params)
        if (offset + size <= args.bytes.size()) args.pointers.push_back(args.bytes.data() + offset);
    p->kernelParams = args.pointers.empty() ? nullptr : args.pointers.data();
    return r.Finish();
  });
}

Status cuGraphMemcpyNodeGetParams(const shim::CallCtx& cc, CUgraphNode hNode, CUDA_MEMCPY3D* p) {
  RemoteCall c = Call(cc, k_cuGraphMemcpyNodeGetParams);
  if (p == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "nodeParams is NULL");
  // What the application set, with its own host addresses.
  if (auto set = shim::Runtime::Get().graphs().Copy(reinterpret_cast<uint64_t>(hNode))) {
    *p = *set;
    return Status::Ok();
  }
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphNode, hNode, false));
  return c.Invoke([&](api::ArgReader& r) -> Status {
    *p = r.Get<CUDA_MEMCPY3D>();
    return r.Finish();
  });
}

Status cuGraphHostNodeGetParams(const shim::CallCtx& cc, CUgraphNode hNode, CUDA_HOST_NODE_PARAMS* p) {
  RemoteCall c = Call(cc, k_cuGraphHostNodeGetParams);
  if (p == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "nodeParams is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphNode, hNode, false));
  return c.Invoke([&](api::ArgReader& r) -> Status {
    uint64_t id = r.Get<uint64_t>();
    auto [fn, data] = shim::HostCallbacks::Get().Raw(id);
    p->fn = fn;
    p->userData = data;
    return r.Finish();
  });
}

Status cuGraphMemAllocNodeGetParams(const shim::CallCtx& cc, CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  RemoteCall c = Call(cc, k_cuGraphMemAllocNodeGetParams);
  if (p == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "params_out is NULL");
  RETURN_IF_ERROR(c.Handle(HandleKind::kGraphNode, hNode, false));
  auto& t_access = shim::ThreadSlot<std::vector<CUmemAccessDesc>>();  // valid until this thread asks again
  return c.Invoke([&](api::ArgReader& r) -> Status {
    p->poolProps = r.Get<CUmemPoolProps>();
    RETURN_IF_ERROR(r.GetArray(&t_access));
    p->accessDescs = t_access.empty() ? nullptr : t_access.data();
    p->accessDescCount = t_access.size();
    p->bytesize = r.Get<uint64_t>();
    p->dptr = r.Get<uint64_t>();
    return r.Finish();
  });
}

Status cuUserObjectCreate(const shim::CallCtx& cc, CUuserObject* object_out, void* ptr, CUhostFn destroy,
                          unsigned int initialRefcount, unsigned int flags) {
  RemoteCall c = Call(cc, k_cuUserObjectCreate);
  if (object_out == nullptr || destroy == nullptr) return c.Fail(CUDA_ERROR_INVALID_VALUE, "a NULL argument");
  // The destructor runs here, when the server's driver drops the last reference.
  uint64_t id = shim::HostCallbacks::Get().AddDetached([destroy, ptr] { destroy(ptr); });
  c.Put<uint64_t>(id);
  c.Put(initialRefcount);
  c.Put(flags);
  Status st = c.Invoke([&](api::ArgReader& r) -> Status {
    *object_out = reinterpret_cast<CUuserObject>(r.Get<uint64_t>());
    return r.Finish();
  });
  if (!st.ok()) shim::HostCallbacks::Get().Cancel(id);
  return st;
}

}  // namespace remora::gen::cuda

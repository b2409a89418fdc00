// Graph node parameters (the `hand` node entries of protocol/api/cuda.api, encoded as
// protocol/api/cuda_graph_wire.h says): decoded against the session's own tables - kernels,
// events, graphs, device memory, shared host regions - into the driver's CUgraphNodeParams,
// with the storage its pointers point into. Host memory the worker cannot reach becomes a
// device staging buffer bound to the graph (graph_state.h).
#include <cstring>

#include "remora/base/log.h"
#include "cuda_api.h"
#include "cuda_graph_wire.h"
#include "worker/hooks/fixups.h"
#include "worker/calls/generated_call.h"
#include "worker/session/array_state.h"

namespace remora::worker::gen::cuda {
namespace {

using api::cuda::WireCopy3D;
using api::cuda::WireCopySide;
using api::cuda::WireKernel;
using api::cuda::WireSideKind;

Status Failed(OpContext& x, CUresult r, const char* call) {
  return x.LibraryError(Domain::kCuda, static_cast<uint32_t>(r), Api::StatusName(static_cast<int>(r)), call);
}

GraphTables& Tables(OpContext& x) { return x.executor().session().graphs(); }

// Decoded node parameters and the storage their pointers point into.
struct NodeParams {
  CUgraphNodeParams p{};
  std::vector<std::byte> kernel_args;
  std::vector<void*> kernel_ptrs;
  std::vector<CUmemAccessDesc> access;
  std::vector<CUgraph> bodies;
  std::vector<HostBinding> bindings;  // staging made for host sides (bound once the node exists)
  std::vector<DevPtr> staging;        // the same buffers, freed if the driver refuses the node
  uint64_t child_nodes = 0;           // a child graph node: the nodes its graph brings along
};

// The bytes of a strided region [x, y, z] .. + [width, height, depth].
uint64_t Extent(uint64_t x, uint64_t y, uint64_t z, uint64_t pitch, uint64_t rows, uint64_t width, uint64_t height,
                uint64_t depth) {
  if (width == 0 || height == 0 || depth == 0) return 0;
  return ((z + depth - 1) * rows + (y + height - 1)) * pitch + x + width;
}

Status DecodeSide(OpContext& x, const WireCopySide& w, const WireCopy3D& c, bool is_src, NodeParams* np,
                  CUDA_MEMCPY3D* m) {
  Executor& ex = x.executor();
  CUmemorytype type = CU_MEMORYTYPE_DEVICE;
  const void* host = nullptr;
  CUdeviceptr dev = 0;
  CUarray array = nullptr;
  uint64_t pitch = w.pitch, height = w.height, x0 = w.x_bytes, y0 = w.y, z0 = w.z;
  switch (w.kind) {
    case WireSideKind::kDevice: {
      uint64_t rows = c.depth > 1 ? height : c.height;
      uint64_t extent = Extent(x0, y0, z0, pitch == 0 ? c.width_bytes : pitch, rows, c.width_bytes, c.height, c.depth);
      ASSIGN_OR_RETURN(Allocation a, ex.session().allocations().CheckRange(w.address, extent == 0 ? 1 : extent));
      RETURN_IF_ERROR(x.ChooseGpu(a.device));
      dev = w.address;
      break;
    }
    case WireSideKind::kRegion: {
      ASSIGN_OR_RETURN(std::byte * p, ex.RegionRange(w.region, w.address, w.span));
      type = CU_MEMORYTYPE_HOST;
      host = p;
      x0 = y0 = z0 = 0;  // the span starts at the copy's first byte
      break;
    }
    case WireSideKind::kHost: {
      // A device mirror of the host span; the client moves the bytes around each launch.
      RETURN_IF_ERROR(x.Ready());
      if (w.span == 0) return Error(Err::kInvalidValue, "an empty host side of a copy node");
      ASSIGN_OR_RETURN(DevPtr staging, ex.AllocateStaging(x.gpu(), w.span));
      np->staging.push_back(staging);
      np->bindings.push_back(HostBinding{w.address, w.span, is_src, staging});
      dev = staging;
      x0 = y0 = z0 = 0;
      break;
    }
    case WireSideKind::kArray: {
      // The session's array; the copy's box must lie inside it (bytes across, rows, slices).
      ArrayInfo* a = ex.session().array_objects().arrays().Find(w.array);
      if (a == nullptr) return Error(Err::kInvalidResourceHandle, "not an array of this session");
      RETURN_IF_ERROR(x.ChooseGpu(a->gpu));
      if (x0 + c.width_bytes > a->row_bytes() || y0 + c.height > a->rows() || z0 + c.depth > a->slices())
        return Error(Err::kInvalidValue, "the copy's box does not fit the array");
      type = CU_MEMORYTYPE_ARRAY;
      array = static_cast<CUarray>(a->array);
      pitch = height = 0;
      break;
    }
    default:
      return x.Malformed("an unknown kind of copy side");
  }
  if (is_src) {
    m->srcMemoryType = type;
    m->srcHost = host;
    m->srcDevice = dev;
    m->srcArray = array;
    m->srcXInBytes = x0;
    m->srcY = y0;
    m->srcZ = z0;
    m->srcPitch = pitch;
    m->srcHeight = height;
  } else {
    m->dstMemoryType = type;
    m->dstHost = const_cast<void*>(host);
    m->dstDevice = dev;
    m->dstArray = array;
    m->dstXInBytes = x0;
    m->dstY = y0;
    m->dstZ = z0;
    m->dstPitch = pitch;
    m->dstHeight = height;
  }
  return Status::Ok();
}

Status DecodeNodeParams(OpContext& x, NodeParams* np) {
  Executor& ex = x.executor();
  CUgraphNodeParams& p = np->p;
  p.type = static_cast<CUgraphNodeType>(x.in().Get<uint32_t>());
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      auto k = x.in().Get<WireKernel>();
      RETURN_IF_ERROR(x.in().GetArray(&np->kernel_args));
      ASSIGN_OR_RETURN(Executor::Function * f, ex.session().functions().Get(k.function));
      RETURN_IF_ERROR(x.ChooseGpu(f->gpu));
      for (const ParamInfo& pi : f->params) {
        if (uint64_t{pi.offset} + pi.size > np->kernel_args.size())
          return Error(Err::kInvalidValue, "kernel parameters are {} bytes, a parameter needs {}", np->kernel_args.size(),
                       pi.offset + pi.size);
        np->kernel_ptrs.push_back(np->kernel_args.data() + pi.offset);
      }
      p.kernel.func = static_cast<CUfunction>(f->function);
      p.kernel.gridDimX = k.grid[0];
      p.kernel.gridDimY = k.grid[1];
      p.kernel.gridDimZ = k.grid[2];
      p.kernel.blockDimX = k.block[0];
      p.kernel.blockDimY = k.block[1];
      p.kernel.blockDimZ = k.block[2];
      p.kernel.sharedMemBytes = k.shared_mem;
      p.kernel.kernelParams = np->kernel_ptrs.empty() ? nullptr : np->kernel_ptrs.data();
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      auto c = x.in().Get<WireCopy3D>();
      if (!x.in().ok()) return x.in().Finish();
      CUDA_MEMCPY3D& m = p.memcpy.copyParams;
      m.WidthInBytes = c.width_bytes;
      m.Height = c.height;
      m.Depth = c.depth;
      RETURN_IF_ERROR(DecodeSide(x, c.src, c, true, np, &m));
      RETURN_IF_ERROR(DecodeSide(x, c.dst, c, false, np, &m));
      RETURN_IF_ERROR(x.Ready());
      p.memcpy.copyCtx = static_cast<CUcontext>(ex.driver().CurrentContext());
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      auto m = x.in().Get<CUDA_MEMSET_NODE_PARAMS_v2>();
      if (!x.in().ok()) return x.in().Finish();
      if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4)
        return Error(Err::kInvalidValue, "a memset element is 1, 2 or 4 bytes, not {}", m.elementSize);
      uint64_t row = uint64_t{m.width} * m.elementSize;
      uint64_t extent = m.height == 0 || m.width == 0 ? 0 : (m.height - 1) * m.pitch + row;
      ASSIGN_OR_RETURN(Allocation a, ex.session().allocations().CheckRange(m.dst, extent == 0 ? 1 : extent));
      RETURN_IF_ERROR(x.ChooseGpu(a.device));
      m.ctx = static_cast<CUcontext>(ex.driver().CurrentContext());
      p.memset = m;
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      auto id = x.in().Get<uint64_t>();
      if (id == 0) return Error(Err::kInvalidValue, "a host node needs a function");
      p.host.fn = RepeatCallbackTrampoline;
      p.host.userData = Tables(x).Repeat(id);
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      void* child = nullptr;
      uint64_t parent = x.graph();
      RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &child));
      p.graph.graph = static_cast<CUgraph>(child);
      p.graph.ownership = static_cast<CUgraphChildGraphNodeOwnership>(x.in().Get<uint32_t>());
      // The parent graph copies the child's host memory (clone) or takes it over (move), and
      // holds its nodes.
      if (const Graph* c = Tables(x).graphs().Find(x.graph())) np->bindings = c->bindings;
      np->child_nodes = Tables(x).NodesOf(x.graph());
      x.SetGraph(parent);
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
      void* event = nullptr;
      RETURN_IF_ERROR(x.Handle(HandleKind::kEvent, false, &event));
      if (p.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) p.eventRecord.event = static_cast<CUevent>(event);
      else p.eventWait.event = static_cast<CUevent>(event);
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      p.alloc.poolProps = x.in().Get<CUmemPoolProps>();
      RETURN_IF_ERROR(x.in().GetArray(&np->access));
      p.alloc.bytesize = x.in().Get<uint64_t>();
      if (!x.in().ok()) return x.in().Finish();
      RETURN_IF_ERROR(FixMemLocation(x, &p.alloc.poolProps.location));
      for (auto& d : np->access) RETURN_IF_ERROR(FixAccessDesc(x, &d));
      p.alloc.accessDescs = np->access.empty() ? nullptr : np->access.data();
      p.alloc.accessDescCount = np->access.size();
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: {
      p.free.dptr = x.in().Get<CUdeviceptr>();
      ASSIGN_OR_RETURN(Allocation a, ex.session().allocations().CheckRange(p.free.dptr, 1));
      if (a.kind != AllocKind::kGraphMemory && a.kind != AllocKind::kDeviceAsync)
        return Error(Err::kInvalidValue, "0x{:x} was not allocated by a graph or from a pool", p.free.dptr);
      RETURN_IF_ERROR(x.ChooseGpu(a.device));
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      p.conditional.handle = x.in().Get<CUgraphConditionalHandle>();
      p.conditional.type = static_cast<CUgraphConditionalNodeType>(x.in().Get<uint32_t>());
      p.conditional.size = x.in().Get<uint32_t>();
      if (p.conditional.size == 0 || p.conditional.size > 1024) return Error(Err::kInvalidValue, "a conditional node of {} bodies", p.conditional.size);
      // The driver answers with an array of its own (phGraph_out is CUDA-owned and set by
      // cuGraphAddNode; the bodies are read from where it points afterwards, Adopted). This
      // array only serves a driver that fills the caller's.
      np->bodies.assign(p.conditional.size, nullptr);
      p.conditional.phGraph_out = np->bodies.data();
      RETURN_IF_ERROR(x.Ready());
      p.conditional.ctx = static_cast<CUcontext>(ex.driver().CurrentContext());
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return Status::Ok();
    default:
      return Error(Err::kNotSupported, "graph nodes of type {} are not supported by Remora", static_cast<int>(p.type));
  }
}

// The host memory `node` binds (its copy's, or its child graph's as the node's own).
void BindTo(GraphTables& g, uint64_t graph_id, void* node, std::vector<HostBinding>& bindings) {
  for (HostBinding& b : bindings) {
    b.node = node;
    g.Bind(graph_id, b);
  }
}

// What a new node's parameters produced: body graphs, graph memory, bound host memory.
Status Adopted(OpContext& x, uint64_t graph_id, void* node, NodeParams& np) {
  GraphTables& g = Tables(x);
  Executor& ex = x.executor();
  BindTo(g, graph_id, node, np.bindings);
  if (np.p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    const CUgraph* bodies = np.p.conditional.phGraph_out;
    if (bodies == nullptr) return Error(Err::kUnknown, "cuGraphAddNode made a conditional node but returned no body graphs");
    for (size_t i = 0; i < np.bodies.size(); i++)
      if (bodies[i] == nullptr) return Error(Err::kUnknown, "cuGraphAddNode returned no body graph {} of a conditional node", i);
    x.out().Put<uint64_t>(np.bodies.size());
    for (size_t i = 0; i < np.bodies.size(); i++) x.out().Put<uint64_t>(g.AdoptGraph(bodies[i], x.gpu(), graph_id, false));
  }
  if (np.p.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    // The graph's memory: usable by the session's calls while the graph lives, charged to
    // the tenant from now on (the driver reserves it for the graph).
    uint64_t bytes = np.p.alloc.bytesize;
    Allocation a;
    a.base = np.p.alloc.dptr;
    a.size = bytes;
    a.device = x.gpu();
    a.kind = AllocKind::kGraphMemory;
    a.reserved = bytes;
    RETURN_IF_ERROR(ex.Charge(x.gpu(), bytes));
    Graph* graph = g.graphs().Find(graph_id);
    Status st = graph != nullptr ? AdoptGraphMemory(ex.session().allocations(), *graph, a).status()
                                 : ex.session().allocations().Insert(a);
    if (!st.ok()) {
      ex.ReleaseCharge(x.gpu(), bytes);
      return st;
    }
    x.out().Put<uint64_t>(a.base);
  }
  return Status::Ok();
}

}  // namespace

Status Op_cuGraphAddNode_v2(OpContext& x) {
  void* graph = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &graph));
  uint64_t graph_id = x.graph();
  std::vector<CUgraphNode> deps;
  RETURN_IF_ERROR(x.in().GetArray(&deps));
  std::vector<CUgraphEdgeData> edges;
  bool has_edges = x.in().Get<uint8_t>() != 0;
  if (has_edges) RETURN_IF_ERROR(x.in().GetArray(&edges));
  RETURN_IF_ERROR(x.Handles(HandleKind::kGraphNode, reinterpret_cast<void**>(deps.data()), deps.size()));
  x.SetGraph(graph_id);
  NodeParams np;
  Status decoded = DecodeNodeParams(x, &np);
  if (decoded.ok()) decoded = x.EndArgs();
  if (decoded.ok() && has_edges && edges.size() != deps.size()) decoded = x.Malformed("edge data for a different number of dependencies");
  if (decoded.ok()) decoded = x.Ready();
  // A graph's nodes are memory of the worker (and of the driver): bounded (graph-nodes).
  GraphTables& tables = Tables(x);
  if (decoded.ok())
    decoded = x.executor().resources().Room(Resource::kGraphNodes, tables.node_count(),
                                            1 + np.child_nodes);
  if (!decoded.ok()) {
    x.executor().FreeStaging(np.staging);
    return decoded;
  }
  CUgraphNode node = nullptr;
  CUresult r = x.Library<Api>().cuGraphAddNode_v2(&node, static_cast<CUgraph>(graph), deps.data(),
                                                 has_edges ? edges.data() : nullptr, deps.size(), &np.p);
  if (r != CUDA_SUCCESS) {
    x.executor().FreeStaging(np.staging);
    return Failed(x, r, "cuGraphAddNode");
  }
  x.out().Put<uint64_t>(tables.AdoptNode(node, graph_id));
  tables.AddNodes(graph_id, 1 + np.child_nodes);
  return Adopted(x, graph_id, node, np);
}

Status Op_cuGraphNodeSetParams(OpContext& x) {
  void* node = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphNode, false, &node));
  uint64_t graph_id = x.graph();
  NodeParams np;
  Status decoded = DecodeNodeParams(x, &np);
  if (decoded.ok()) decoded = x.EndArgs();
  if (decoded.ok()) decoded = x.Ready();
  if (decoded.ok() && (np.p.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || np.p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL))
    decoded = Error(Err::kInvalidValue, "the parameters of this node cannot be changed");
  if (!decoded.ok()) {
    x.executor().FreeStaging(np.staging);
    return decoded;
  }
  CUresult r = x.Library<Api>().cuGraphNodeSetParams(static_cast<CUgraphNode>(node), &np.p);
  if (r != CUDA_SUCCESS) {
    x.executor().FreeStaging(np.staging);
    return Failed(x, r, "cuGraphNodeSetParams");
  }
  BindTo(Tables(x), graph_id, node, np.bindings);
  return Status::Ok();
}

// Out: the executable graph's bindings after the change.
Status Op_cuGraphExecNodeSetParams(OpContext& x) {
  uint64_t exec_id = 0;
  {
    api::ArgReader peek = x.in();
    exec_id = peek.Get<uint64_t>();
  }
  void* exec = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphExec, false, &exec));
  void* node = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphNode, false, &node));
  NodeParams np;
  Status decoded = DecodeNodeParams(x, &np);
  if (decoded.ok()) decoded = x.EndArgs();
  if (decoded.ok()) decoded = x.Ready();
  if (!decoded.ok()) {
    x.executor().FreeStaging(np.staging);
    return decoded;
  }
  CUresult r = x.Library<Api>().cuGraphExecNodeSetParams(static_cast<CUgraphExec>(exec), static_cast<CUgraphNode>(node), &np.p);
  if (r != CUDA_SUCCESS) {
    x.executor().FreeStaging(np.staging);
    return Failed(x, r, "cuGraphExecNodeSetParams");
  }
  GraphExec* e = Tables(x).execs().Find(exec_id);
  for (HostBinding& b : np.bindings) b.node = node;
  if (e != nullptr) e->bindings.insert(e->bindings.end(), np.bindings.begin(), np.bindings.end());
  x.out().Put<uint64_t>(e ? e->bindings.size() : 0);
  if (e != nullptr)
    for (const HostBinding& b : e->bindings) {
      api::cuda::WireBinding w{};
      w.client_addr = b.client_addr;
      w.size = b.size;
      w.staging = b.staging;
      w.to_device = b.to_device;
      x.out().Put(w);
    }
  return Status::Ok();
}

// ---- parameters back --------------------------------------------------------------------

// Out: WireKernel, the packed parameter bytes.
Status Op_cuGraphKernelNodeGetParams_v2(OpContext& x) {
  void* node = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphNode, false, &node));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  CUDA_KERNEL_NODE_PARAMS k{};
  CUresult r = x.Library<Api>().cuGraphKernelNodeGetParams_v2(static_cast<CUgraphNode>(node), &k);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphKernelNodeGetParams");
  WireKernel w{};
  const Executor::Function* fn = nullptr;
  x.executor().session().functions().ForEach([&](uint64_t id, Executor::Function& f) {
    if (f.function == k.func) {
      w.function = id;
      fn = &f;
    }
  });
  w.grid[0] = k.gridDimX;
  w.grid[1] = k.gridDimY;
  w.grid[2] = k.gridDimZ;
  w.block[0] = k.blockDimX;
  w.block[1] = k.blockDimY;
  w.block[2] = k.blockDimZ;
  w.shared_mem = k.sharedMemBytes;
  std::vector<std::byte> packed;
  if (fn != nullptr && k.kernelParams != nullptr) {
    for (size_t i = 0; i < fn->params.size(); i++) {
      const ParamInfo& pi = fn->params[i];
      if (packed.size() < pi.offset + pi.size) packed.resize(pi.offset + pi.size);
      std::memcpy(packed.data() + pi.offset, k.kernelParams[i], pi.size);
    }
  }
  x.out().Put(w);
  x.out().PutArray(packed.data(), packed.size(), 1);
  return Status::Ok();
}

// Out: the driver's CUDA_MEMCPY3D (device addresses as the session knows them; host sides
// the worker's own, which the client replaces with what it set).
Status Op_cuGraphMemcpyNodeGetParams(OpContext& x) {
  void* node = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphNode, false, &node));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  CUDA_MEMCPY3D m{};
  CUresult r = x.Library<Api>().cuGraphMemcpyNodeGetParams(static_cast<CUgraphNode>(node), &m);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphMemcpyNodeGetParams");
  x.out().Put(m);
  return Status::Ok();
}

// Out: u64 id of the client's function (0 if the node calls none of the client's).
Status Op_cuGraphHostNodeGetParams(OpContext& x) {
  void* node = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphNode, false, &node));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  CUDA_HOST_NODE_PARAMS h{};
  CUresult r = x.Library<Api>().cuGraphHostNodeGetParams(static_cast<CUgraphNode>(node), &h);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphHostNodeGetParams");
  uint64_t id = 0;
  if (h.fn == RepeatCallbackTrampoline && h.userData != nullptr) id = static_cast<RepeatCallback*>(h.userData)->id;
  x.out().Put<uint64_t>(id);
  return Status::Ok();
}

// Out: CUmemPoolProps (location: the application's ordinal), array of CUmemAccessDesc,
// u64 bytesize, u64 dptr.
Status Op_cuGraphMemAllocNodeGetParams(OpContext& x) {
  void* node = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphNode, false, &node));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  CUDA_MEM_ALLOC_NODE_PARAMS m{};
  CUresult r = x.Library<Api>().cuGraphMemAllocNodeGetParams(static_cast<CUgraphNode>(node), &m);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphMemAllocNodeGetParams");
  const std::vector<int>& gpus = x.executor().config().gpus;
  auto ordinal = [&](int gpu) {
    for (size_t i = 0; i < gpus.size(); i++)
      if (gpus[i] == gpu) return static_cast<int>(i);
    return -1;
  };
  if (m.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE) m.poolProps.location.id = ordinal(m.poolProps.location.id);
  std::vector<CUmemAccessDesc> access(m.accessDescs, m.accessDescs + (m.accessDescs ? m.accessDescCount : 0));
  for (auto& d : access)
    if (d.location.type == CU_MEM_LOCATION_TYPE_DEVICE) d.location.id = ordinal(d.location.id);
  x.out().Put(m.poolProps);
  x.out().PutArray(access.data(), access.size(), sizeof(CUmemAccessDesc));
  x.out().Put<uint64_t>(m.bytesize);
  x.out().Put<uint64_t>(m.dptr);
  return Status::Ok();
}

}  // namespace remora::worker::gen::cuda

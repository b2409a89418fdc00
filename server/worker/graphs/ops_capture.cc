// Stream capture: begun and ended on the worker's real streams, so every call the client
// makes on a capturing stream (kernels, copies, memsets, host functions, event records and
// waits, stream-ordered allocations, library calls) lands in the driver's graph. The
// session tracks its captures: the capture mode of each client thread is applied from
// them (Executor::ApplyCaptureMode), and every reply tells the client whether any is active.
#include "remora/base/log.h"
#include "cuda_api.h"
#include "worker/calls/generated_call.h"
#include "worker/ops/handlers.h"

namespace remora::worker {

Status Handlers::CaptureHostCopy(Executor& ex, const Executor::Stream& s, uint64_t client_addr, DevPtr device,
                                 uint64_t n, bool to_device) {
  if (client_addr == 0) return Error(Err::kNotSupported, "this client does not name host memory in captured copies");
  gen::cuda::Api& api = ex.driver().cuda();
  RETURN_IF_ERROR(ex.SetDevice(s.gpu));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  CUresult r = api.cuStreamGetCaptureInfo_v3(static_cast<CUstream>(s.stream), &status, &id, &graph, nullptr, nullptr, nullptr);
  if (r != CUDA_SUCCESS) return Status(Domain::kCuda, static_cast<uint32_t>(r), "cuStreamGetCaptureInfo");
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
    return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the capture was invalidated");
  ASSIGN_OR_RETURN(DevPtr staging, ex.AllocateStaging(s.gpu, n));
  Status st = to_device ? ex.driver().MemcpyDtoD(device, staging, n, s.stream) : ex.driver().MemcpyDtoD(staging, device, n, s.stream);
  if (!st.ok()) {
    ex.FreeStaging({staging});
    return st;
  }
  // The copy just captured is now the stream's only dependency: the binding's node.
  const CUgraphNode* deps = nullptr;
  size_t count = 0;
  void* node = nullptr;
  if (api.cuStreamGetCaptureInfo_v3(static_cast<CUstream>(s.stream), &status, nullptr, nullptr, &deps, nullptr, &count) ==
          CUDA_SUCCESS && count == 1 && deps != nullptr)
    node = deps[0];
  GraphTables& g = ex.session().graphs();
  g.Bind(g.AdoptGraph(graph, s.gpu, 0, false), HostBinding{client_addr, n, to_device, staging, node});
  return Status::Ok();
}

namespace {

// The graph capturing stream `s` (registered in the session), or why there is none.
Result<uint64_t> CaptureGraph(Executor& ex, const Executor::Stream& s) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  CUresult r = ex.driver().cuda().cuStreamGetCaptureInfo_v3(static_cast<CUstream>(s.stream), &status, nullptr, &graph,
                                                            nullptr, nullptr, nullptr);
  if (r != CUDA_SUCCESS) return Status(Domain::kCuda, static_cast<uint32_t>(r), "cuStreamGetCaptureInfo");
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || graph == nullptr)
    return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the capture was invalidated");
  return ex.session().graphs().AdoptGraph(graph, s.gpu, 0, false);
}

}  // namespace

Status Handlers::CapturedMallocAsync(Executor& ex, uint64_t tag, const Executor::Stream& s, int gpu, DPool pool,
                                     uint64_t size) {
  // No pool bookkeeping here (ReconcilePools queries and trims pools, which a capture does
  // not allow): the graph's memory is charged whole, as long as the graph lives.
  if (Status st = ex.SetDevice(s.gpu); !st.ok()) return ex.PostReply(tag, st);
  auto graph_id = CaptureGraph(ex, s);
  if (!graph_id.ok()) return ex.PostReply(tag, graph_id.status());
  if (Status st = ex.Charge(gpu, size); !st.ok()) return ex.PostReply(tag, st);
  auto p = ex.driver().MemAllocAsync(size, pool, s.stream);
  if (!p.ok()) {
    ex.ReleaseCharge(gpu, size);
    return ex.PostReply(tag, p.status());
  }
  Allocation al;
  al.base = *p;
  al.size = size;
  al.device = gpu;
  al.kind = AllocKind::kGraphMemory;
  al.reserved = size;
  Graph* g = ex.session().graphs().graphs().Find(*graph_id);
  Status st = g == nullptr ? Error(Err::kUnknown, "the capture's graph {} is not known", *graph_id)
                           : AdoptGraphMemory(ex.session().allocations(), *g, al).status();
  if (!st.ok()) {
    ex.ReleaseCharge(gpu, size);
    return ex.PostReply(tag, st);
  }
  DevPtr ptr = *p;
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.setGraphPointer(ptr); });
}

Status Handlers::CapturedFreeAsync(Executor& ex, uint64_t tag, const Executor::Stream& s, const Allocation& a) {
  if (a.placed)
    return ReplyOrDefer(ex, tag, Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED,
                                        "memory a migration moved cannot be freed in a stream capture"));
  if (Status st = ex.SetDevice(s.gpu); !st.ok()) return ReplyOrDefer(ex, tag, st);
  auto graph_id = CaptureGraph(ex, s);
  if (!graph_id.ok()) return ReplyOrDefer(ex, tag, graph_id.status());
  Status st = ex.driver().MemFreeAsync(a.base, s.stream);  // the driver's free node
  if (!st.ok()) return ReplyOrDefer(ex, tag, st);
  if (a.kind != AllocKind::kGraphMemory) {
    // Memory allocated outside the graph, freed when the graph runs: from now on it is the
    // graph's (its charge is given back when the graph goes, its address stays usable in
    // the graph until then). Pool bookkeeping does not see it any more.
    Allocation moved = a;
    moved.kind = AllocKind::kGraphMemory;
    (void)ex.session().allocations().Erase(a.base);
    (void)ex.session().allocations().Insert(moved);
    if (Graph* g = ex.session().graphs().graphs().Find(*graph_id)) g->memory.push_back(a.base);
  }
  return ReplyOrDefer(ex, tag, Status::Ok());
}

namespace gen::cuda {
namespace {

Status Failed(OpContext& x, CUresult r, const char* call) {
  return x.LibraryError(Domain::kCuda, static_cast<uint32_t>(r), Api::StatusName(static_cast<int>(r)), call);
}

Status Begin(OpContext& x, void* stream, CUstreamCaptureMode mode) {
  x.executor().session().graphs().captures()[stream] = Capture{x.thread(), static_cast<int>(mode)};
  return Status::Ok();
}

}  // namespace

Status Op_cuStreamBeginCapture_v2(OpContext& x) {
  void* stream = nullptr;
  RETURN_IF_ERROR(x.Stream(&stream));
  auto mode = x.in().Get<CUstreamCaptureMode>();
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  CUresult r = x.Library<Api>().cuStreamBeginCapture_v2(static_cast<CUstream>(stream), mode);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuStreamBeginCapture");
  return Begin(x, stream, mode);
}

Status Op_cuStreamBeginCaptureToGraph(OpContext& x) {
  void* stream = nullptr;
  RETURN_IF_ERROR(x.Stream(&stream));
  void* graph = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &graph));
  std::vector<CUgraphNode> deps;
  RETURN_IF_ERROR(x.in().GetArray(&deps));
  std::vector<CUgraphEdgeData> edges;
  bool has_edges = x.in().Get<uint8_t>() != 0;
  if (has_edges) RETURN_IF_ERROR(x.in().GetArray(&edges));
  auto num = x.in().Get<size_t>();
  auto mode = x.in().Get<CUstreamCaptureMode>();
  RETURN_IF_ERROR(x.EndArgs());
  if (deps.size() < num || (has_edges && edges.size() < num)) return x.Malformed("fewer dependencies than numDependencies");
  RETURN_IF_ERROR(x.Handles(HandleKind::kGraphNode, reinterpret_cast<void**>(deps.data()), deps.size()));
  RETURN_IF_ERROR(x.Ready());
  CUresult r = x.Library<Api>().cuStreamBeginCaptureToGraph(static_cast<CUstream>(stream), static_cast<CUgraph>(graph),
                                                            deps.data(), has_edges ? edges.data() : nullptr, num, mode);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuStreamBeginCaptureToGraph");
  return Begin(x, stream, mode);
}

// In: stream, u8 whether the caller wants the graph (phGraph non-NULL; absent from older
// clients, which always want it). Out: u64 graph handle (0 when not wanted).
Status Op_cuStreamEndCapture(OpContext& x) {
  void* stream = nullptr;
  RETURN_IF_ERROR(x.Stream(&stream));
  bool want_graph = x.in().remaining() == 0 || x.in().Get<uint8_t>() != 0;
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  Executor& ex = x.executor();
  GraphTables& g = ex.session().graphs();
  Api& api = x.Library<Api>();
  // The capture's graph, to forget (with its staging) if the capture ends in failure.
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph capturing = nullptr;
  (void)api.cuStreamGetCaptureInfo_v3(static_cast<CUstream>(stream), &status, nullptr, &capturing, nullptr, nullptr, nullptr);
  CUgraph graph = nullptr;
  CUresult r = api.cuStreamEndCapture(static_cast<CUstream>(stream), want_graph ? &graph : nullptr);
  CUstreamCaptureStatus after = CU_STREAM_CAPTURE_STATUS_NONE;
  if (r != CUDA_SUCCESS && api.cuStreamIsCapturing(static_cast<CUstream>(stream), &after) == CUDA_SUCCESS &&
      after != CU_STREAM_CAPTURE_STATUS_NONE)
    return Failed(x, r, "cuStreamEndCapture");  // refused, the capture goes on
  g.captures().erase(stream);
  if (r != CUDA_SUCCESS) {
    if (uint64_t known = capturing ? g.GraphOf(capturing) : 0) {
      const Graph* kg = g.graphs().Find(known);
      if (kg != nullptr && !kg->owned) ex.FreeStaging(g.ForgetGraph(known));
    }
    return Failed(x, r, "cuStreamEndCapture");
  }
  // Without phGraph the capture went into a graph the session already knows (or the driver
  // refused above); its staging stays bound to it.
  uint64_t id = graph == nullptr ? 0 : g.AdoptGraph(graph, x.gpu(), 0, true);
  if (id != 0) {
    // Its nodes count from now on (graph-nodes, worker/session/limits.h); past the limit the graph
    // is not kept.
    size_t nodes = 0;
    (void)api.cuGraphGetNodes(graph, nullptr, &nodes);
    Status room = ex.resources().Room(Resource::kGraphNodes, g.node_count(), nodes);
    if (!room.ok()) {
      (void)api.cuGraphDestroy(graph);
      ex.FreeStaging(g.ForgetGraph(id));
      return room;
    }
    g.AddNodes(id, nodes);
  }
  x.out().Put<uint64_t>(id);
  return Status::Ok();
}

// In: stream, u8 mask of the outputs wanted (1 id, 2 graph, 4 dependencies, 8 edge data,
// 16 count). Out: u32 status, u64 id, u64 graph handle, u64 count, count node handles,
// u8 edge data present, count CUgraphEdgeData.
Status Op_cuStreamGetCaptureInfo_v3(OpContext& x) {
  void* stream = nullptr;
  RETURN_IF_ERROR(x.Stream(&stream));
  auto want = x.in().Get<uint8_t>();
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  (void)want;  // everything is asked for: the client copies out what the application wanted
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t count = 0;
  CUresult r = x.Library<Api>().cuStreamGetCaptureInfo_v3(static_cast<CUstream>(stream), &status, &id, &graph, &deps,
                                                          &edges, &count);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuStreamGetCaptureInfo");
  GraphTables& g = x.executor().session().graphs();
  uint64_t graph_id = graph != nullptr ? g.AdoptGraph(graph, x.gpu(), 0, false) : 0;
  x.out().Put<uint32_t>(static_cast<uint32_t>(status));
  x.out().Put<uint64_t>(id);
  x.out().Put<uint64_t>(graph_id);
  x.out().Put<uint64_t>(count);
  for (size_t i = 0; i < count; i++) x.out().Put<uint64_t>(deps ? g.AdoptNode(deps[i], graph_id) : 0);
  x.out().Put<uint8_t>(edges != nullptr);
  if (edges != nullptr)
    for (size_t i = 0; i < count; i++) x.out().Put(edges[i]);
  return Status::Ok();
}

}  // namespace gen::cuda
}  // namespace remora::worker

// The graph objects of a session (hand-written `hand` entries of protocol/api/cuda.api):
// lifetime (destroy, clone, instantiate, update), topology queries and user objects. Node
// parameters are in ops_graph_nodes.cc. Every handle is the session's (GraphTables).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/api_args.h"
#include "cuda_api.h"
#include "cuda_graph_wire.h"
#include "worker/calls/generated_call.h"
#include "worker/ops/handlers.h"

namespace remora::worker::gen::cuda {
namespace {

using api::cuda::WireBinding;

Status Failed(OpContext& x, CUresult r, const char* call) {
  return x.LibraryError(Domain::kCuda, static_cast<uint32_t>(r), Api::StatusName(static_cast<int>(r)), call);
}

GraphTables& Tables(OpContext& x) { return x.executor().session().graphs(); }

void PutBindings(OpContext& x, const std::vector<HostBinding>& bindings) {
  x.out().Put<uint64_t>(bindings.size());
  for (const HostBinding& b : bindings) {
    WireBinding w{};
    w.client_addr = b.client_addr;
    w.size = b.size;
    w.staging = b.staging;
    w.to_device = b.to_device ? 1 : 0;
    x.out().Put(w);
  }
}

// Host nodes of an executable graph with staging move its host memory (graph_host_sync.cc).
// The graph is made already: a failure here leaves those nodes as they were, and says so.
void SetUpHostNodes(OpContext& x, uint64_t exec_id, uint64_t graph) {
  const Graph* src = Tables(x).graphs().Find(graph);
  if (src == nullptr) return;
  Status st = Handlers::SetUpHostNodeSync(x.executor(), exec_id, src->graph);
  if (!st.ok())
    LOG_WARN("the host nodes of an executable graph will see its host memory only after each launch: {}", st.ToString());
}

// Room for `adding` more graph nodes in the session (graph-nodes, worker/session/limits.h).
Status NodeRoom(OpContext& x, uint64_t adding) {
  GraphTables& g = Tables(x);
  return x.executor().resources().Room(Resource::kGraphNodes, g.node_count(), adding);
}

// Before an instantiation of `graph`: room for one more graph and for its nodes.
Status ExecRoom(OpContext& x, uint64_t graph) {
  RETURN_IF_ERROR(x.HandleRoom(HandleKind::kGraphExec));
  return NodeRoom(x, Tables(x).NodesOf(graph));
}

// An executable graph's result: its handle and the host memory its launches move.
Status PutExec(OpContext& x, CUgraphExec exec, uint64_t graph) {
  GraphTables& g = Tables(x);
  uint64_t id = g.AdoptExec(exec, x.gpu());
  g.SetExecNodes(id, g.NodesOf(graph));
  GraphExec* e = g.execs().Find(id);
  if (const Graph* src = g.graphs().Find(graph)) {
    e->bindings = src->bindings;
    e->memory = src->memory;
  }
  SetUpHostNodes(x, id, graph);
  x.out().Put<uint64_t>(id);
  PutBindings(x, e->bindings);
  return Status::Ok();
}

}  // namespace

Status Op_cuGraphDestroy(OpContext& x) {
  void* graph = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &graph));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  GraphTables& g = Tables(x);
  const Graph* entry = g.graphs().Find(x.graph());
  if (entry == nullptr || entry->parent != 0)
    return Error(Err::kInvalidValue, "this graph belongs to a node of another graph and goes with it");
  CUresult r = x.Library<Api>().cuGraphDestroy(static_cast<CUgraph>(graph));
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphDestroy");
  x.executor().FreeStaging(g.ForgetGraph(x.graph()));
  return Status::Ok();
}

Status Op_cuGraphClone(OpContext& x) {
  void* original = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &original));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  RETURN_IF_ERROR(x.HandleRoom(HandleKind::kGraph));
  const uint64_t nodes = Tables(x).NodesOf(x.graph());
  RETURN_IF_ERROR(NodeRoom(x, nodes));
  CUgraph clone = nullptr;
  CUresult r = x.Library<Api>().cuGraphClone(&clone, static_cast<CUgraph>(original));
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphClone");
  GraphTables& g = Tables(x);
  uint64_t id = g.AdoptGraph(clone, x.gpu(), 0, true);
  g.AddNodes(id, nodes);
  if (const Graph* src = g.graphs().Find(x.graph())) {
    std::vector<HostBinding> copy = src->bindings;
    // The clone's copies are its own nodes.
    for (HostBinding& b : copy) {
      CUgraphNode in_clone = nullptr;
      if (b.node != nullptr && x.Library<Api>().cuGraphNodeFindInClone(&in_clone, static_cast<CUgraphNode>(b.node), clone) != CUDA_SUCCESS)
        in_clone = nullptr;
      b.node = in_clone;
    }
    g.graphs().Find(id)->bindings = std::move(copy);
  }
  x.out().Put<uint64_t>(id);
  return Status::Ok();
}

Status Op_cuGraphInstantiateWithFlags(OpContext& x) {
  void* graph = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &graph));
  auto flags = x.in().Get<unsigned long long>();
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  RETURN_IF_ERROR(ExecRoom(x, x.graph()));
  CUgraphExec exec = nullptr;
  CUresult r = x.Library<Api>().cuGraphInstantiateWithFlags(&exec, static_cast<CUgraph>(graph), flags);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphInstantiate");
  return PutExec(x, exec, x.graph());
}

// In: graph, u64 flags, upload stream. Out: exec, bindings, u32 result, u64 error node.
Status Op_cuGraphInstantiateWithParams(OpContext& x) {
  void* graph = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &graph));
  uint64_t graph_id = x.graph();
  CUDA_GRAPH_INSTANTIATE_PARAMS p{};
  p.flags = x.in().Get<cuuint64_t>();
  void* stream = nullptr;
  RETURN_IF_ERROR(x.Stream(&stream));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  RETURN_IF_ERROR(ExecRoom(x, graph_id));
  p.hUploadStream = static_cast<CUstream>(stream);
  CUgraphExec exec = nullptr;
  CUresult r = x.Library<Api>().cuGraphInstantiateWithParams(&exec, static_cast<CUgraph>(graph), &p);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphInstantiateWithParams");
  RETURN_IF_ERROR(PutExec(x, exec, graph_id));
  x.out().Put<uint32_t>(static_cast<uint32_t>(p.result_out));
  x.out().Put<uint64_t>(p.hErrNode_out ? Tables(x).AdoptNode(p.hErrNode_out, graph_id) : 0);
  return Status::Ok();
}

Status Op_cuGraphExecDestroy(OpContext& x) {
  void* exec = nullptr;
  uint64_t h = 0;
  {
    api::ArgReader peek = x.in();
    h = peek.Get<uint64_t>();
  }
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphExec, false, &exec));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  CUresult r = x.Library<Api>().cuGraphExecDestroy(static_cast<CUgraphExec>(exec));
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphExecDestroy");
  x.executor().FreeStaging(Tables(x).ForgetExec(h));
  return Status::Ok();
}

// Out: u32 result, u64 error node, u64 error-from node, then (on success) the bindings.
Status Op_cuGraphExecUpdate_v2(OpContext& x) {
  uint64_t exec_id = 0;
  {
    api::ArgReader peek = x.in();
    exec_id = peek.Get<uint64_t>();
  }
  void* exec = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphExec, false, &exec));
  void* graph = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &graph));
  uint64_t graph_id = x.graph();
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  CUgraphExecUpdateResultInfo info{};
  CUresult r = x.Library<Api>().cuGraphExecUpdate_v2(static_cast<CUgraphExec>(exec), static_cast<CUgraph>(graph), &info);
  GraphTables& g = Tables(x);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) return Failed(x, r, "cuGraphExecUpdate");
  x.out().Put<uint32_t>(static_cast<uint32_t>(info.result));
  x.out().Put<uint64_t>(info.errorNode ? g.AdoptNode(info.errorNode, graph_id) : 0);
  x.out().Put<uint64_t>(info.errorFromNode ? g.AdoptNode(info.errorFromNode, graph_id) : 0);
  GraphExec* e = g.execs().Find(exec_id);
  const Graph* src = g.graphs().Find(graph_id);
  if (r == CUDA_SUCCESS && e != nullptr && src != nullptr) {
    // The executable graph now runs the new graph's copies (the old bindings may go).
    std::vector<HostBinding> old = std::move(e->bindings);
    e->bindings = src->bindings;
    x.executor().FreeStaging(g.Unbound(old));
    SetUpHostNodes(x, exec_id, graph_id);  // its host nodes are the new graph's
  }
  PutBindings(x, e != nullptr ? e->bindings : std::vector<HostBinding>{});
  // A failed update is a result the caller reads (resultInfo), with its own status.
  if (r != CUDA_SUCCESS) x.out().Put<uint32_t>(static_cast<uint32_t>(r));
  else x.out().Put<uint32_t>(0);
  return Status::Ok();
}

Status Op_cuGraphDebugDotPrint(OpContext& x) {
  void* graph = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraph, false, &graph));
  std::string path;
  RETURN_IF_ERROR(x.in().GetString(&path));  // the client's path: only echoed in messages
  auto flags = x.in().Get<unsigned int>();
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  char tmp[] = "/tmp/remora-graph-XXXXXX";
  int fd = ::mkstemp(tmp);
  if (fd < 0) return ErrnoStatus(Err::kUnknown, "create a file for the graph's description", errno);
  ::close(fd);
  CUresult r = x.Library<Api>().cuGraphDebugDotPrint(static_cast<CUgraph>(graph), tmp, flags);
  std::string text;
  if (r == CUDA_SUCCESS) {
    if (FILE* f = std::fopen(tmp, "r")) {
      char buf[65536];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < api::kMaxArgBytes / 2) text.append(buf, n);
      std::fclose(f);
    }
  }
  ::unlink(tmp);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphDebugDotPrint");
  x.out().PutArray(text.data(), text.size(), 1);
  return Status::Ok();
}

namespace {

// The topology queries share one shape. In: graph or node, u8 mask (1 nodes wanted, 2 second
// node array wanted, 4 edge data wanted), u64 capacity. Out: u64 count, then (if wanted)
// capacity node handles, capacity second node handles, capacity edge data.
enum class Query { kNodes, kRoots, kEdges, kDeps, kDependents };

Status Topology(OpContext& x, Query q) {
  void* subject = nullptr;
  RETURN_IF_ERROR(x.Handle(q == Query::kDeps || q == Query::kDependents ? HandleKind::kGraphNode : HandleKind::kGraph,
                           false, &subject));
  auto mask = x.in().Get<uint8_t>();
  auto capacity = x.in().Get<uint64_t>();
  RETURN_IF_ERROR(x.EndArgs());
  if (capacity > api::kMaxArgBytes / 32) return x.Malformed("a topology query for too many nodes");
  RETURN_IF_ERROR(x.Ready());
  size_t n = static_cast<size_t>(capacity);
  std::vector<CUgraphNode> a((mask & 1) ? n : 0), b((mask & 2) ? n : 0);
  std::vector<CUgraphEdgeData> e((mask & 4) ? n : 0);
  CUgraphNode* pa = (mask & 1) ? a.data() : nullptr;
  CUgraphNode* pb = (mask & 2) ? b.data() : nullptr;
  CUgraphEdgeData* pe = (mask & 4) ? e.data() : nullptr;
  Api& api = x.Library<Api>();
  CUresult r = CUDA_SUCCESS;
  switch (q) {
    case Query::kNodes: r = api.cuGraphGetNodes(static_cast<CUgraph>(subject), pa, &n); break;
    case Query::kRoots: r = api.cuGraphGetRootNodes(static_cast<CUgraph>(subject), pa, &n); break;
    case Query::kEdges: r = api.cuGraphGetEdges_v2(static_cast<CUgraph>(subject), pa, pb, pe, &n); break;
    case Query::kDeps: r = api.cuGraphNodeGetDependencies_v2(static_cast<CUgraphNode>(subject), pa, pe, &n); break;
    case Query::kDependents: r = api.cuGraphNodeGetDependentNodes_v2(static_cast<CUgraphNode>(subject), pa, pe, &n); break;
  }
  if (r != CUDA_SUCCESS) return Failed(x, r, "a graph topology query");
  GraphTables& g = Tables(x);
  x.out().Put<uint64_t>(n);
  auto put_nodes = [&](const std::vector<CUgraphNode>& v) {
    for (CUgraphNode node : v) x.out().Put<uint64_t>(node ? g.AdoptNode(node, x.graph()) : 0);
  };
  if (mask & 1) put_nodes(a);
  if (mask & 2) put_nodes(b);
  if (mask & 4)
    for (const CUgraphEdgeData& d : e) x.out().Put(d);
  return Status::Ok();
}

}  // namespace

Status Op_cuGraphGetNodes(OpContext& x) { return Topology(x, Query::kNodes); }
Status Op_cuGraphGetRootNodes(OpContext& x) { return Topology(x, Query::kRoots); }
Status Op_cuGraphGetEdges_v2(OpContext& x) { return Topology(x, Query::kEdges); }
Status Op_cuGraphNodeGetDependencies_v2(OpContext& x) { return Topology(x, Query::kDeps); }
Status Op_cuGraphNodeGetDependentNodes_v2(OpContext& x) { return Topology(x, Query::kDependents); }

Status Op_cuGraphDestroyNode(OpContext& x) {
  uint64_t h = 0;
  {
    api::ArgReader peek = x.in();
    h = peek.Get<uint64_t>();
  }
  void* node = nullptr;
  RETURN_IF_ERROR(x.Handle(HandleKind::kGraphNode, false, &node));
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  CUresult r = x.Library<Api>().cuGraphDestroyNode(static_cast<CUgraphNode>(node));
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuGraphDestroyNode");
  Tables(x).NodeDestroyed(h);
  Tables(x).ForgetNode(h);
  return Status::Ok();
}

// In: u64 id of the destructor the client registered, u32 initial count, u32 flags.
Status Op_cuUserObjectCreate(OpContext& x) {
  auto id = x.in().Get<uint64_t>();
  auto count = x.in().Get<unsigned int>();
  auto flags = x.in().Get<unsigned int>();
  RETURN_IF_ERROR(x.EndArgs());
  RETURN_IF_ERROR(x.Ready());
  if (id == 0) return Error(Err::kInvalidValue, "a user object needs a destructor");
  GraphTables& g = Tables(x);
  CUuserObject obj = nullptr;
  RETURN_IF_ERROR(x.HandleRoom(HandleKind::kUserObject));
  CUresult r = x.Library<Api>().cuUserObjectCreate(&obj, g.Repeat(id), UserObjectTrampoline, count, flags);
  if (r != CUDA_SUCCESS) return Failed(x, r, "cuUserObjectCreate");
  x.out().Put<uint64_t>(g.AdoptUserObject(obj));
  return Status::Ok();
}

}  // namespace remora::worker::gen::cuda

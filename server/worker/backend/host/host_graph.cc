#include "worker/backend/host/host_graph.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>

#include "remora/base/log.h"
#include "worker/backend/host/host_array.h"
#include "worker/backend/host/host_graph_internal.h"

namespace remora::worker {

using namespace host_graph;  // NOLINT: the casts of host_graph_internal.h

HostGraphs::~HostGraphs() {
  for (Capture* c : captures_) {
    if (!c->into_user_graph) delete c->graph;
    delete c;
  }
  for (EmuExec* e : execs_) delete e;
  for (EmuGraph* g : graphs_) delete g;
}

void HostGraphs::Register(EmuGraph* g) {
  live_graphs_.insert(g);
  for (auto& n : g->nodes) {
    live_nodes_.insert(n.get());
    if (n->child) Register(n->child.get());
    for (auto& b : n->bodies) Register(b.get());
  }
}

void HostGraphs::Unregister(EmuGraph* g) {
  live_graphs_.erase(g);
  for (auto& n : g->nodes) {
    live_nodes_.erase(n.get());
    if (n->child) Unregister(n->child.get());
    for (auto& b : n->bodies) Unregister(b.get());
  }
}

bool HostGraphs::Known(CUgraph g) const { return live_graphs_.count(G(g)) > 0; }
bool HostGraphs::Known(CUgraphNode n) const { return live_nodes_.count(N(n)) > 0; }

EmuNode* HostGraphs::Append(EmuGraph* g, std::vector<EmuNode*> deps, CUgraphNodeType type) {
  auto node = std::make_unique<EmuNode>();
  node->type = type;
  node->graph = g;
  node->deps = std::move(deps);
  EmuNode* raw = node.get();
  g->nodes.push_back(std::move(node));
  live_nodes_.insert(raw);
  return raw;
}

// ---- graphs ---------------------------------------------------------------------------------

CUresult HostGraphs::Create(CUgraph* out) {
  auto* g = new EmuGraph;
  graphs_.insert(g);
  live_graphs_.insert(g);
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult HostGraphs::Destroy(CUgraph g) {
  if (!graphs_.count(G(g))) return CUDA_ERROR_INVALID_VALUE;
  for (Capture* c : captures_)
    if (c->graph == G(g)) return CUDA_ERROR_ILLEGAL_STATE;  // being captured into
  graphs_.erase(G(g));
  Unregister(G(g));
  delete G(g);
  return CUDA_SUCCESS;
}

std::unique_ptr<EmuGraph> HostGraphs::CopyGraph(const EmuGraph& g, EmuNode* owner) {
  auto copy = std::make_unique<EmuGraph>();
  copy->owner = owner;
  std::map<const EmuNode*, EmuNode*> map;
  for (const auto& n : g.nodes) {
    auto c = std::make_unique<EmuNode>();
    c->type = n->type;
    c->graph = copy.get();
    c->work = n->work;
    c->kernel_args = n->kernel_args;
    c->access = n->access;
    std::memcpy(c->attrs, n->attrs, sizeof(c->attrs));
    c->enabled = n->enabled;
    c->origin = n.get();
    (void)Fill(c.get(), n->params);
    if (n->child) c->child = CopyGraph(*n->child, c.get());
    for (const auto& b : n->bodies) {
      c->bodies.push_back(CopyGraph(*b, c.get()));
      c->body_handles.push_back(reinterpret_cast<CUgraph>(c->bodies.back().get()));
    }
    map[n.get()] = c.get();
    copy->nodes.push_back(std::move(c));
  }
  for (size_t i = 0; i < g.nodes.size(); i++) {
    copy->nodes[i]->deps.clear();
    for (EmuNode* d : g.nodes[i]->deps) copy->nodes[i]->deps.push_back(map[d]);
  }
  return copy;
}

CUresult HostGraphs::Clone(CUgraph* out, CUgraph g) {
  if (!Known(g)) return CUDA_ERROR_INVALID_VALUE;
  EmuGraph* copy = CopyGraph(*G(g), nullptr).release();
  graphs_.insert(copy);
  Register(copy);
  *out = reinterpret_cast<CUgraph>(copy);
  return CUDA_SUCCESS;
}

CUresult HostGraphs::Fill(EmuNode* node, const CUgraphNodeParams& p) {
  node->params = p;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      // The caller's parameter pointers are copied (no layout is known here: kept as given).
      node->kernel_ptrs.clear();
      node->params.kernel.kernelParams = nullptr;
      node->params.kernel.extra = nullptr;
      uint64_t threads = uint64_t{p.kernel.blockDimX} * p.kernel.blockDimY * p.kernel.blockDimZ;
      if (threads == 0 || threads > 1024 || p.kernel.gridDimX == 0 || p.kernel.gridDimY == 0 || p.kernel.gridDimZ == 0)
        return CUDA_ERROR_INVALID_VALUE;
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      node->access.assign(p.alloc.accessDescs, p.alloc.accessDescs + (p.alloc.accessDescs ? p.alloc.accessDescCount : 0));
      node->params.alloc.accessDescs = node->access.empty() ? nullptr : node->access.data();
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
    case CU_GRAPH_NODE_TYPE_GRAPH:
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult HostGraphs::AddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUgraphNodeParams* p) {
  if (!Known(g) || p == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<EmuNode*> d;
  for (size_t i = 0; i < n; i++) {
    if (!Known(deps[i]) || N(deps[i])->graph != G(g)) return CUDA_ERROR_INVALID_VALUE;
    d.push_back(N(deps[i]));
  }
  auto node = std::make_unique<EmuNode>();
  node->type = p->type;
  node->graph = G(g);
  node->deps = std::move(d);
  CUresult r = Fill(node.get(), *p);
  if (r != CUDA_SUCCESS) return r;
  if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) {
    if (!Known(p->graph.graph)) return CUDA_ERROR_INVALID_VALUE;
    node->child = CopyGraph(*G(p->graph.graph), node.get());
  } else if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    // As the driver: phGraph_out comes back pointing at an array the node owns (whatever the
    // caller put there is not written through).
    if (!cond_handles_.count(p->conditional.handle) || p->conditional.size == 0) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < p->conditional.size; i++) {
      node->bodies.push_back(std::make_unique<EmuGraph>());
      node->bodies.back()->owner = node.get();
      node->body_handles.push_back(reinterpret_cast<CUgraph>(node->bodies.back().get()));
    }
    p->conditional.phGraph_out = node->body_handles.data();
  } else if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    auto dptr = host_.Allocate(p->alloc.bytesize);
    if (!dptr.ok()) return R(dptr.status());
    p->alloc.dptr = *dptr;
    node->params.alloc.dptr = *dptr;
  }
  EmuNode* raw = node.get();
  G(g)->nodes.push_back(std::move(node));
  live_nodes_.insert(raw);
  if (raw->child) Register(raw->child.get());
  for (auto& b : raw->bodies) Register(b.get());
  *out = H(raw);
  return CUDA_SUCCESS;
}

CUresult HostGraphs::SetParams(CUgraphNode n, CUgraphNodeParams* p) {
  if (!Known(n) || p == nullptr || p->type != N(n)->type) return CUDA_ERROR_INVALID_VALUE;
  if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) {
    if (!Known(p->graph.graph)) return CUDA_ERROR_INVALID_VALUE;
    if (N(n)->child) Unregister(N(n)->child.get());
    N(n)->child = CopyGraph(*G(p->graph.graph), N(n));
    Register(N(n)->child.get());
  }
  N(n)->work = nullptr;
  return Fill(N(n), *p);
}

CUresult HostGraphs::ExecSetParams(CUgraphExec e, CUgraphNode n, CUgraphNodeParams* p) {
  if (!Known(e) || !Known(n) || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (EmuNode* node : reinterpret_cast<EmuExec*>(e)->order) {
    if (node->origin != N(n)) continue;
    if (p->type != node->type) return CUDA_ERROR_INVALID_VALUE;
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) {
      if (!Known(p->graph.graph)) return CUDA_ERROR_INVALID_VALUE;
      node->child = CopyGraph(*G(p->graph.graph), node);
    }
    node->work = nullptr;
    return Fill(node, *p);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult HostGraphs::DestroyNode(CUgraphNode n) {
  if (!Known(n)) return CUDA_ERROR_INVALID_VALUE;
  EmuGraph* g = N(n)->graph;
  for (auto& other : g->nodes) std::erase(other->deps, N(n));
  if (N(n)->child) Unregister(N(n)->child.get());
  for (auto& b : N(n)->bodies) Unregister(b.get());
  live_nodes_.erase(N(n));
  std::erase_if(g->nodes, [&](const std::unique_ptr<EmuNode>& p) { return p.get() == N(n); });
  return CUDA_SUCCESS;
}

std::vector<EmuNode*> HostGraphs::Order(EmuGraph* g) {
  std::map<EmuNode*, size_t> pending;
  std::map<EmuNode*, std::vector<EmuNode*>> users;
  for (auto& n : g->nodes) {
    pending[n.get()] = n->deps.size();
    for (EmuNode* d : n->deps) users[d].push_back(n.get());
  }
  std::deque<EmuNode*> ready;
  for (auto& n : g->nodes)
    if (n->deps.empty()) ready.push_back(n.get());
  std::vector<EmuNode*> order;
  while (!ready.empty()) {
    EmuNode* n = ready.front();
    ready.pop_front();
    order.push_back(n);
    for (EmuNode* u : users[n])
      if (--pending[u] == 0) ready.push_back(u);
  }
  return order;  // shorter than the graph if it has a cycle
}

CUresult HostGraphs::Instantiate(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  if (!Known(g) || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new EmuExec;
  e->graph = CopyGraph(*G(g), nullptr);
  e->order = Order(e->graph.get());
  e->flags = flags;
  if (e->order.size() != e->graph->nodes.size()) {
    delete e;
    return CUDA_ERROR_INVALID_VALUE;  // a cycle
  }
  execs_.insert(e);
  *out = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

CUresult HostGraphs::ExecDestroy(CUgraphExec e) {
  if (!Known(e)) return CUDA_ERROR_INVALID_VALUE;
  execs_.erase(reinterpret_cast<EmuExec*>(e));
  // A launch still queued keeps running on the objects it prepared (closures own what they use).
  delete reinterpret_cast<EmuExec*>(e);
  return CUDA_SUCCESS;
}

Result<std::function<void()>> HostGraphs::PrepareNode(EmuNode* node, std::vector<DEvent>* waits,
                                                      std::vector<DEvent>* records) {
  if (!node->enabled) return std::function<void()>([] {});
  if (node->work) return node->work;
  const CUgraphNodeParams& p = node->params;
  switch (node->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      // An array side is the emulated memory holding its elements (host_array.h); the worker
      // checked that the box fits the array.
      CUDA_MEMCPY3D m = p.memcpy.copyParams;
      if (m.srcMemoryType == CU_MEMORYTYPE_ARRAY) {
        const auto* a = static_cast<const host::EmuArray*>(static_cast<const void*>(m.srcArray));
        m.srcMemoryType = CU_MEMORYTYPE_DEVICE, m.srcDevice = a->base, m.srcPitch = a->row_bytes, m.srcHeight = a->rows;
      }
      if (m.dstMemoryType == CU_MEMORYTYPE_ARRAY) {
        const auto* a = static_cast<const host::EmuArray*>(static_cast<const void*>(m.dstArray));
        m.dstMemoryType = CU_MEMORYTYPE_DEVICE, m.dstDevice = a->base, m.dstPitch = a->row_bytes, m.dstHeight = a->rows;
      }
      std::vector<std::pair<std::byte*, const std::byte*>> rows;
      uint64_t sh = m.srcHeight ? m.srcHeight : m.Height, dh = m.dstHeight ? m.dstHeight : m.Height;
      uint64_t sp = m.srcPitch ? m.srcPitch : m.WidthInBytes, dp = m.dstPitch ? m.dstPitch : m.WidthInBytes;
      for (uint64_t z = 0; z < m.Depth; z++) {
        for (uint64_t y = 0; y < m.Height; y++) {
          uint64_t so = ((z + m.srcZ) * sh + (y + m.srcY)) * sp + m.srcXInBytes;
          uint64_t d_o = ((z + m.dstZ) * dh + (y + m.dstY)) * dp + m.dstXInBytes;
          const std::byte* s = nullptr;
          std::byte* d = nullptr;
          if (m.srcMemoryType == CU_MEMORYTYPE_HOST) {
            s = static_cast<const std::byte*>(m.srcHost) + so;
          } else {
            ASSIGN_OR_RETURN(std::byte * t, host_.Translate(m.srcDevice + so, m.WidthInBytes));
            s = t;
          }
          if (m.dstMemoryType == CU_MEMORYTYPE_HOST) {
            d = static_cast<std::byte*>(m.dstHost) + d_o;
          } else {
            ASSIGN_OR_RETURN(d, host_.Translate(m.dstDevice + d_o, m.WidthInBytes));
          }
          rows.emplace_back(d, s);
        }
      }
      uint64_t w = m.WidthInBytes;
      return std::function<void()>([rows = std::move(rows), w] {
        for (auto [d, s] : rows) std::memmove(d, s, w);
      });
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const auto& m = p.memset;
      std::vector<std::byte*> rows;
      for (size_t y = 0; y < m.height; y++) {
        ASSIGN_OR_RETURN(std::byte * d, host_.Translate(m.dst + y * m.pitch, m.width * m.elementSize));
        rows.push_back(d);
      }
      unsigned value = m.value, size = m.elementSize;
      size_t width = m.width;
      return std::function<void()>([rows = std::move(rows), value, size, width] {
        for (std::byte* d : rows)
          for (size_t i = 0; i < width; i++) std::memcpy(d + i * size, &value, size);  // little-endian
      });
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      CUhostFn fn = p.host.fn;
      void* arg = p.host.userData;
      return std::function<void()>([fn, arg] { fn(arg); });
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      records->push_back(p.eventRecord.event);
      return std::function<void()>([] {});
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      waits->push_back(p.eventWait.event);
      return std::function<void()>([] {});
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return Prepare(Order(node->child.get()), waits, records);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      // No kernel runs here to set the handle: its default value decides.
      unsigned value = cond_handles_[p.conditional.handle].default_value;
      size_t body = SIZE_MAX;
      if (p.conditional.type == CU_GRAPH_COND_TYPE_IF) body = value != 0 ? 0 : (node->bodies.size() > 1 ? 1 : SIZE_MAX);
      else if (p.conditional.type == CU_GRAPH_COND_TYPE_WHILE) body = value != 0 ? 0 : SIZE_MAX;
      else if (value < node->bodies.size()) body = value;
      if (body == SIZE_MAX) return std::function<void()>([] {});
      return Prepare(Order(node->bodies[body].get()), waits, records);
    }
    default:  // kernels are not executed; allocations exist since the node was added
      return std::function<void()>([] {});
  }
}

Result<std::function<void()>> HostGraphs::Prepare(const std::vector<EmuNode*>& order, std::vector<DEvent>* waits,
                                                  std::vector<DEvent>* records) {
  std::vector<std::function<void()>> steps;
  for (EmuNode* n : order) {
    ASSIGN_OR_RETURN(std::function<void()> step, PrepareNode(n, waits, records));
    steps.push_back(std::move(step));
  }
  return std::function<void()>([steps = std::move(steps)] {
    for (const auto& s : steps) s();
  });
}

CUresult HostGraphs::Launch(CUgraphExec e, DStream s) {
  if (!Known(e)) return CUDA_ERROR_INVALID_VALUE;
  if (s == nullptr && !LegacyAllowed().ok()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  std::vector<DEvent> waits, records;
  auto work = Prepare(reinterpret_cast<EmuExec*>(e)->order, &waits, &records);
  if (!work.ok()) return R(work.status());
  if (Capturing(s)) return R(CaptureWork(s, CU_GRAPH_NODE_TYPE_GRAPH, std::move(*work)));
  for (DEvent ev : waits)
    if (Status st = host_.WaitEvent(s, ev); !st.ok()) return R(st);
  Status st = host_.Submit(s, std::move(*work));
  if (!st.ok()) return R(st);
  for (DEvent ev : records) (void)host_.RecordEvent(ev, s);
  return CUDA_SUCCESS;
}

CUresult HostGraphs::Update(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  if (!Known(e) || !Known(g) || info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* exec = reinterpret_cast<EmuExec*>(e);
  *info = CUgraphExecUpdateResultInfo{};
  // The topology must match node for node (same order of creation, same types and edges).
  EmuGraph* from = G(g);
  if (from->nodes.size() != exec->graph->nodes.size()) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (size_t i = 0; i < from->nodes.size(); i++) {
    if (from->nodes[i]->type != exec->graph->nodes[i]->type ||
        from->nodes[i]->deps.size() != exec->graph->nodes[i]->deps.size()) {
      info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
      info->errorNode = H(from->nodes[i].get());
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
  }
  auto fresh = CopyGraph(*from, nullptr);
  for (size_t i = 0; i < fresh->nodes.size(); i++) fresh->nodes[i]->origin = exec->graph->nodes[i]->origin;
  exec->graph = std::move(fresh);
  exec->order = Order(exec->graph.get());
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::ExecFlags(CUgraphExec e, cuuint64_t* flags) {
  if (!Known(e)) return CUDA_ERROR_INVALID_VALUE;
  *flags = reinterpret_cast<EmuExec*>(e)->flags;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::DotPrint(CUgraph g, const char* path) {
  if (!Known(g)) return CUDA_ERROR_INVALID_VALUE;
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  std::fprintf(f, "digraph remora_host_emulated_graph {\n");
  for (auto& n : G(g)->nodes) {
    std::fprintf(f, "  n%p [label=\"type %d\"];\n", static_cast<void*>(n.get()), static_cast<int>(n->type));
    for (EmuNode* d : n->deps) std::fprintf(f, "  n%p -> n%p;\n", static_cast<void*>(d), static_cast<void*>(n.get()));
  }
  std::fprintf(f, "}\n");
  std::fclose(f);
  return CUDA_SUCCESS;
}

}  // namespace remora::worker

#include "worker/host_graph.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>

#include "remora/base/log.h"
#include "worker/host_array.h"

namespace remora::worker {

struct HostGraphs::Capture {
  uint64_t id = 0;
  DStream origin = nullptr;
  EmuGraph* graph = nullptr;
  bool into_user_graph = false;  // cuStreamBeginCaptureToGraph: the application owns it
  bool invalidated = false;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::map<DStream, std::vector<EmuNode*>> deps;  // every stream in the capture: its tail
};

namespace {

EmuGraph* G(CUgraph g) { return reinterpret_cast<EmuGraph*>(g); }
EmuNode* N(CUgraphNode n) { return reinterpret_cast<EmuNode*>(n); }
CUgraphNode H(EmuNode* n) { return reinterpret_cast<CUgraphNode>(n); }
CUresult R(const Status& st) { return st.ok() ? CUDA_SUCCESS : static_cast<CUresult>(st.raw()); }

// Everything `from` depends on, itself included.
std::set<EmuNode*> Ancestors(const std::vector<EmuNode*>& from) {
  std::set<EmuNode*> seen;
  std::vector<EmuNode*> todo(from.begin(), from.end());
  while (!todo.empty()) {
    EmuNode* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    todo.insert(todo.end(), n->deps.begin(), n->deps.end());
  }
  return seen;
}

}  // namespace

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

// ---- capture --------------------------------------------------------------------------------

HostGraphs::Capture* HostGraphs::CaptureOf(DStream s) const {
  auto it = streams_.find(s);
  return it == streams_.end() ? nullptr : it->second;
}

Status HostGraphs::LegacyAllowed() const {
  for (const auto& [s, c] : streams_)
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && host_.BlockingStream(s))
      return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                    "the legacy stream synchronises with a stream being captured");
  return Status::Ok();
}

Status HostGraphs::CaptureWork(DStream s, CUgraphNodeType type, std::function<void()> work) {
  Capture* c = CaptureOf(s);
  if (c == nullptr) return Error(Err::kUnknown, "internal: capture work on a stream that does not capture");
  if (c->invalidated) return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the capture was invalidated");
  EmuNode* n = Append(c->graph, c->deps[s], type);
  n->work = std::move(work);
  c->deps[s] = {n};
  return Status::Ok();
}

Status HostGraphs::CaptureEventRecord(DEvent e, DStream s) {
  Capture* c = CaptureOf(s);
  if (c == nullptr) return Error(Err::kUnknown, "internal: capture event on a stream that does not capture");
  event_deps_[e] = {c, c->deps[s]};
  return Status::Ok();
}

Result<bool> HostGraphs::CaptureWait(DStream s, DEvent e) {
  auto it = event_deps_.find(e);
  if (it == event_deps_.end() || captures_.count(it->second.first) == 0) return false;
  Capture* c = it->second.first;
  Capture* mine = CaptureOf(s);
  if (mine != nullptr && mine != c)
    return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "the wait would merge two captures");
  // The stream joins the capture (or adds the event's work to what it depends on).
  std::vector<EmuNode*>& tail = c->deps[s];
  for (EmuNode* n : it->second.second)
    if (std::find(tail.begin(), tail.end(), n) == tail.end()) tail.push_back(n);
  streams_[s] = c;
  return true;
}

CUresult HostGraphs::Violation(DStream s) {
  if (Capture* c = CaptureOf(s)) c->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

void HostGraphs::ForgetStream(DStream s) {
  if (Capture* c = CaptureOf(s)) {
    c->invalidated = true;
    c->deps.erase(s);
    streams_.erase(s);
  }
}

CUresult HostGraphs::BeginCapture(DStream s, CUstreamCaptureMode mode, EmuGraph* into, const CUgraphNode* deps, size_t n) {
  if (s == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream cannot capture
  if (CaptureOf(s) != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  if (into != nullptr && !Known(reinterpret_cast<CUgraph>(into))) return CUDA_ERROR_INVALID_VALUE;
  auto* c = new Capture;
  c->id = next_capture_id_++;
  c->origin = s;
  c->mode = mode;
  c->into_user_graph = into != nullptr;
  c->graph = into != nullptr ? into : new EmuGraph;
  if (into == nullptr) live_graphs_.insert(c->graph);
  std::vector<EmuNode*> tail;
  for (size_t i = 0; i < n; i++) {
    if (!Known(deps[i]) || N(deps[i])->graph != c->graph) {
      if (into == nullptr) delete c->graph;
      delete c;
      return CUDA_ERROR_INVALID_VALUE;
    }
    tail.push_back(N(deps[i]));
  }
  c->deps[s] = tail;
  captures_.insert(c);
  streams_[s] = c;
  return CUDA_SUCCESS;
}

void HostGraphs::EndCaptureOf(Capture* c) {
  for (auto it = streams_.begin(); it != streams_.end();) it = it->second == c ? streams_.erase(it) : std::next(it);
  for (auto it = event_deps_.begin(); it != event_deps_.end();)
    it = it->second.first == c ? event_deps_.erase(it) : std::next(it);
  captures_.erase(c);
  delete c;
}

CUresult HostGraphs::EndCapture(DStream s, CUgraph* out) {
  Capture* c = CaptureOf(s);
  if (c == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (c->origin != s) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (out) *out = nullptr;
  CUresult result = CUDA_SUCCESS;
  if (c->invalidated) {
    result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    // Every stream that joined must have been joined back into the origin.
    std::set<EmuNode*> joined = Ancestors(c->deps[s]);
    for (const auto& [other, tail] : c->deps)
      for (EmuNode* n : tail)
        if (!joined.count(n)) result = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  EmuGraph* g = c->graph;
  bool into = c->into_user_graph;
  EndCaptureOf(c);
  if (result != CUDA_SUCCESS) {
    if (!into) {
      Unregister(g);
      delete g;
    }
    return result;
  }
  if (!into) graphs_.insert(g);
  if (out) *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult HostGraphs::IsCapturing(DStream s, CUstreamCaptureStatus* status) {
  if (s == nullptr && !LegacyAllowed().ok()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  Capture* c = CaptureOf(s);
  *status = c == nullptr ? CU_STREAM_CAPTURE_STATUS_NONE
                         : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::CaptureInfo(DStream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                 const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count) {
  CUresult r = IsCapturing(s, status);
  if (r != CUDA_SUCCESS) return r;
  Capture* c = CaptureOf(s);
  if (c == nullptr) return CUDA_SUCCESS;
  if (id) *id = c->id;
  if (graph) *graph = reinterpret_cast<CUgraph>(c->graph);
  std::vector<CUgraphNode>& keep = c->graph->capture_deps;
  keep.clear();
  for (EmuNode* n : c->deps[s]) keep.push_back(H(n));
  if (deps) *deps = keep.data();
  if (edges) *edges = nullptr;
  if (count) *count = keep.size();
  return CUDA_SUCCESS;
}

CUresult HostGraphs::UpdateCaptureDependencies(DStream s, CUgraphNode* deps, size_t n, unsigned flags) {
  Capture* c = CaptureOf(s);
  if (c == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  std::vector<EmuNode*>& tail = c->deps[s];
  if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) tail.clear();
  else if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) {
    if (!Known(deps[i]) || N(deps[i])->graph != c->graph) return CUDA_ERROR_INVALID_VALUE;
    tail.push_back(N(deps[i]));
  }
  return CUDA_SUCCESS;
}

CUresult HostGraphs::ExchangeMode(CUstreamCaptureMode* mode) {
  if (*mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, mode_);
  return CUDA_SUCCESS;
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

// ---- topology -----------------------------------------------------------------------------

namespace {
// CUDA's convention for the queries: a NULL array asks for the count; otherwise up to *n
// entries are written, the rest set to NULL, and *n becomes the number written.
CUresult Answer(const std::vector<CUgraphNode>& all, CUgraphNode* out, size_t* n) {
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (out == nullptr) {
    *n = all.size();
    return CUDA_SUCCESS;
  }
  size_t k = std::min(*n, all.size());
  for (size_t i = 0; i < *n; i++) out[i] = i < k ? all[i] : nullptr;
  *n = k;
  return CUDA_SUCCESS;
}
}  // namespace

CUresult HostGraphs::Nodes(CUgraph g, bool roots, CUgraphNode* out, size_t* n) {
  if (!Known(g)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> all;
  for (auto& node : G(g)->nodes)
    if (!roots || node->deps.empty()) all.push_back(H(node.get()));
  return Answer(all, out, n);
}

CUresult HostGraphs::Edges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* n) {
  if (!Known(g) || n == nullptr || ((from == nullptr) != (to == nullptr))) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> f, t;
  for (auto& node : G(g)->nodes)
    for (EmuNode* d : node->deps) {
      f.push_back(H(d));
      t.push_back(H(node.get()));
    }
  if (from == nullptr) {
    *n = f.size();
    return CUDA_SUCCESS;
  }
  size_t cap = *n;
  CUresult r = Answer(f, from, n);
  size_t cap2 = cap;
  (void)Answer(t, to, &cap2);
  return r;
}

CUresult HostGraphs::Neighbours(CUgraphNode node, bool dependents, CUgraphNode* out, size_t* n) {
  if (!Known(node)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> all;
  if (!dependents) {
    for (EmuNode* d : N(node)->deps) all.push_back(H(d));
  } else {
    for (auto& other : N(node)->graph->nodes)
      if (std::find(other->deps.begin(), other->deps.end(), N(node)) != other->deps.end()) all.push_back(H(other.get()));
  }
  return Answer(all, out, n);
}

CUresult HostGraphs::Connect(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n, bool add) {
  if (!Known(g)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) {
    if (!Known(from[i]) || !Known(to[i]) || N(from[i])->graph != G(g) || N(to[i])->graph != G(g))
      return CUDA_ERROR_INVALID_VALUE;
    auto& deps = N(to[i])->deps;
    auto it = std::find(deps.begin(), deps.end(), N(from[i]));
    if (add && it == deps.end()) deps.push_back(N(from[i]));
    else if (!add && it != deps.end()) deps.erase(it);
    else if (!add) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult HostGraphs::NodeType(CUgraphNode node, CUgraphNodeType* type) {
  if (!Known(node)) return CUDA_ERROR_INVALID_VALUE;
  *type = N(node)->type;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::FindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone) {
  if (!Known(clone)) return CUDA_ERROR_INVALID_VALUE;
  for (auto& n : G(clone)->nodes)
    if (n->origin == N(original)) {
      *out = H(n.get());
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult HostGraphs::SetEnabled(CUgraphExec e, CUgraphNode node, unsigned enabled) {
  if (!Known(e)) return CUDA_ERROR_INVALID_VALUE;
  for (EmuNode* n : reinterpret_cast<EmuExec*>(e)->order)
    if (n->origin == N(node)) {
      n->enabled = enabled != 0;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult HostGraphs::GetEnabled(CUgraphExec e, CUgraphNode node, unsigned* enabled) {
  if (!Known(e)) return CUDA_ERROR_INVALID_VALUE;
  for (EmuNode* n : reinterpret_cast<EmuExec*>(e)->order)
    if (n->origin == N(node)) {
      *enabled = n->enabled ? 1 : 0;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult HostGraphs::Params(CUgraphNode node, CUgraphNodeType type, CUgraphNodeParams* out) {
  if (!Known(node) || N(node)->type != type) return CUDA_ERROR_INVALID_VALUE;
  *out = N(node)->params;
  out->type = type;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::ChildGraph(CUgraphNode node, CUgraph* out) {
  if (!Known(node) || !N(node)->child) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUgraph>(N(node)->child.get());
  return CUDA_SUCCESS;
}

CUresult HostGraphs::KernelAttribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue* get,
                                     const CUkernelNodeAttrValue* set) {
  if (!Known(node) || N(node)->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<unsigned>(id) >= 32) return CUDA_ERROR_INVALID_VALUE;
  if (get) *get = N(node)->attrs[id];
  if (set) N(node)->attrs[id] = *set;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::CopyAttributes(CUgraphNode dst, CUgraphNode src) {
  if (!Known(dst) || !Known(src)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(N(dst)->attrs, N(src)->attrs, sizeof(N(dst)->attrs));
  return CUDA_SUCCESS;
}

CUresult HostGraphs::ConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph g, unsigned value, unsigned flags) {
  if (!Known(g)) return CUDA_ERROR_INVALID_VALUE;
  CUgraphConditionalHandle h = next_cond_++;
  cond_handles_[h] = CondHandle{(flags & CU_GRAPH_COND_ASSIGN_DEFAULT) ? value : 0, flags};
  *out = h;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::UserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned count) {
  if (destroy == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* key = reinterpret_cast<CUuserObject>(new char);
  user_objects_[key] = UserObj{ptr, destroy, static_cast<int>(count)};
  *out = key;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::UserObjectRef(CUuserObject o, int delta) {
  auto it = user_objects_.find(o);
  if (it == user_objects_.end() || delta == 0) return CUDA_ERROR_INVALID_VALUE;
  it->second.refs += delta;
  if (it->second.refs > 0) return CUDA_SUCCESS;
  UserObj u = it->second;
  user_objects_.erase(it);
  delete reinterpret_cast<char*>(o);
  u.destroy(u.ptr);  // the driver calls it on a thread of its own; here it only queues a notice
  return CUDA_SUCCESS;
}

}  // namespace remora::worker

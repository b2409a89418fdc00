// The graph topology queries and edits of the host backend (host_graph.h): nodes, edges,
// neighbours, dependencies, enabled nodes of an instantiated graph.
#include <algorithm>

#include "worker/backend/host/host_graph_internal.h"

namespace remora::worker {

using namespace host_graph;  // NOLINT: the casts of host_graph_internal.h

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

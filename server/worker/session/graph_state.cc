#include "worker/session/graph_state.h"

#include <algorithm>

namespace remora::worker {

void RepeatCallbackTrampoline(void* arg) {
  auto* cb = static_cast<RepeatCallback*>(arg);
  std::unique_lock<std::mutex> lock(cb->mu);
  if (cb->released) return;
  uint64_t n = ++cb->reached;
  cb->notices->Push({cb->id, true});
  cb->cv.wait(lock, [&] { return cb->released || cb->done >= n; });
}

void HostNodeSyncTrampoline(void* arg) {
  auto* sync = static_cast<HostNodeSync*>(arg);
  RepeatCallback* cb = sync->cb;
  std::unique_lock<std::mutex> lock(cb->mu);
  if (cb->released) return;
  uint64_t n = ++cb->reached;
  cb->notices->Push({cb->id, true, sync});
  cb->cv.wait(lock, [&] { return cb->released || cb->done >= n; });
}

void UserObjectTrampoline(void* arg) {
  auto* cb = static_cast<RepeatCallback*>(arg);
  std::lock_guard<std::mutex> lock(cb->mu);
  if (!cb->released) cb->notices->Push({cb->id, false});
}

uint64_t GraphTables::AdoptGraph(void* g, int gpu, uint64_t parent, bool owned) {
  auto it = graph_index_.find(g);
  if (it != graph_index_.end()) {
    if (Graph* known = graphs_.Find(it->second)) {
      known->owned |= owned;  // a capture's graph becomes the application's at its end
      return it->second;
    }
  }
  uint64_t id = graphs_.Insert(Graph{g, gpu, parent, owned, {}, {}});
  graph_index_[g] = id;
  return id;
}

uint64_t GraphTables::AdoptNode(void* n, uint64_t graph) {
  auto it = node_index_.find(n);
  if (it != node_index_.end() && nodes_.Find(it->second) != nullptr) return it->second;
  uint64_t id = nodes_.Insert(GraphNode{n, graph});
  node_index_[n] = id;
  return id;
}

uint64_t GraphTables::AdoptExec(void* e, int gpu) {
  auto it = exec_index_.find(e);
  if (it != exec_index_.end() && execs_.Find(it->second) != nullptr) return it->second;
  GraphExec exec;
  exec.exec = e;
  exec.gpu = gpu;
  uint64_t id = execs_.Insert(std::move(exec));
  exec_index_[e] = id;
  return id;
}

uint64_t GraphTables::AdoptUserObject(void* o) {
  auto it = user_object_index_.find(o);
  if (it != user_object_index_.end() && user_objects_.Find(it->second) != nullptr) return it->second;
  uint64_t id = user_objects_.Insert(UserObject{o});
  user_object_index_[o] = id;
  return id;
}

uint64_t GraphTables::GraphOf(void* g) const {
  auto it = graph_index_.find(g);
  return it == graph_index_.end() ? 0 : it->second;
}

uint64_t GraphTables::NodeOf(void* n) const {
  auto it = node_index_.find(n);
  return it == node_index_.end() ? 0 : it->second;
}

void GraphTables::Bind(uint64_t graph, const HostBinding& b) {
  for (uint64_t id = graph; id != 0;) {
    Graph* g = graphs_.Find(id);
    if (g == nullptr) break;
    g->bindings.push_back(b);
    id = g->parent;
  }
}

std::vector<DevPtr> GraphTables::Unbound(const std::vector<HostBinding>& candidates) const {
  std::set<DevPtr> still;
  auto note = [&](const std::vector<HostBinding>& bs) {
    for (const HostBinding& b : bs) still.insert(b.staging);
  };
  const_cast<HandleTable<Graph>&>(graphs_).ForEach([&](uint64_t, Graph& g) { note(g.bindings); });
  const_cast<HandleTable<GraphExec>&>(execs_).ForEach([&](uint64_t, GraphExec& e) { note(e.bindings); });
  std::vector<DevPtr> out;
  for (const HostBinding& b : candidates)
    if (!still.count(b.staging) && std::find(out.begin(), out.end(), b.staging) == out.end()) out.push_back(b.staging);
  return out;
}

std::vector<DevPtr> GraphTables::ForgetGraph(uint64_t id) {
  std::vector<HostBinding> dropped;
  std::vector<DevPtr> memory;
  std::vector<uint64_t> todo{id};
  while (!todo.empty()) {
    uint64_t g = todo.back();
    todo.pop_back();
    Graph* graph = graphs_.Find(g);
    if (graph == nullptr) continue;
    dropped.insert(dropped.end(), graph->bindings.begin(), graph->bindings.end());
    memory.insert(memory.end(), graph->memory.begin(), graph->memory.end());
    node_count_ -= std::min(node_count_, graph->nodes);
    graph_index_.erase(graph->graph);
    graphs_.Erase(g);
    for (uint64_t n : nodes_.Ids()) {
      GraphNode* node = nodes_.Find(n);
      if (node->graph == g) ForgetNode(n);
    }
    for (uint64_t c : graphs_.Ids())
      if (graphs_.Find(c)->parent == g) todo.push_back(c);
  }
  std::vector<DevPtr> out = Unbound(dropped);
  for (DevPtr p : memory)
    if (!MemoryHeld(p)) out.push_back(p);  // else an executable graph of it still allocates it
  return out;
}

bool GraphTables::MemoryHeld(DevPtr p) {
  for (uint64_t id : graphs_.Ids())
    if (const Graph* g = graphs_.Find(id); std::find(g->memory.begin(), g->memory.end(), p) != g->memory.end()) return true;
  for (uint64_t id : execs_.Ids())
    if (const GraphExec* e = execs_.Find(id); std::find(e->memory.begin(), e->memory.end(), p) != e->memory.end()) return true;
  return false;
}

void GraphTables::ForgetNode(uint64_t id) {
  GraphNode* node = nodes_.Find(id);
  if (node == nullptr) return;
  node_index_.erase(node->node);
  nodes_.Erase(id);
}

std::vector<DevPtr> GraphTables::ForgetExec(uint64_t id) {
  GraphExec* e = execs_.Find(id);
  if (e == nullptr) return {};
  std::vector<HostBinding> dropped = std::move(e->bindings);
  std::vector<DevPtr> memory = std::move(e->memory);
  node_count_ -= std::min(node_count_, e->nodes);
  exec_index_.erase(e->exec);
  execs_.Erase(id);
  std::vector<DevPtr> out = Unbound(dropped);
  for (DevPtr p : memory)
    if (!MemoryHeld(p)) out.push_back(p);  // its graph is gone and no other executable graph holds it
  return out;
}

RepeatCallback* GraphTables::Repeat(uint64_t id) {
  auto& cb = repeat_[id];
  if (!cb) {
    cb = std::make_shared<RepeatCallback>();
    cb->id = id;
    cb->notices = notices_;
  }
  return cb.get();
}

GraphExec* GraphTables::ExecOf(void* e) {
  auto it = exec_index_.find(e);
  return it == exec_index_.end() ? nullptr : execs_.Find(it->second);
}

bool GraphTables::HostNodesOutstanding() {
  for (auto& [id, cb] : repeat_) {
    std::lock_guard<std::mutex> lock(cb->mu);
    if (cb->launched > cb->done && !cb->released) return true;
  }
  return false;
}

HostNodeSync* GraphTables::NewSync(HostNodeSync s) {
  syncs_.push_back(std::make_unique<HostNodeSync>(std::move(s)));
  return syncs_.back().get();
}

void GraphTables::ReleaseCallbacks() {
  for (auto& [id, cb] : repeat_) {
    std::lock_guard<std::mutex> lock(cb->mu);
    cb->released = true;
    cb->cv.notify_all();
  }
  // Deliberately kept: a driver thread may still enter the trampoline (it returns at once).
  static auto* leaked = new std::vector<std::shared_ptr<RepeatCallback>>();
  for (auto& [id, cb] : repeat_) leaked->push_back(std::move(cb));
  repeat_.clear();
  static auto* leaked_syncs = new std::vector<std::unique_ptr<HostNodeSync>>();
  for (auto& sync : syncs_) leaked_syncs->push_back(std::move(sync));
  syncs_.clear();
}

void GraphTables::AddNodes(uint64_t graph, uint64_t n) {
  Graph* g = graphs_.Find(graph);
  if (g == nullptr) return;
  g->nodes += n;
  node_count_ += n;
}

void GraphTables::SetExecNodes(uint64_t exec, uint64_t n) {
  GraphExec* e = execs_.Find(exec);
  if (e == nullptr) return;
  node_count_ = node_count_ - std::min(node_count_, e->nodes) + n;
  e->nodes = n;
}

uint64_t GraphTables::NodesOf(uint64_t graph) const {
  const Graph* g = const_cast<HandleTable<Graph>&>(graphs_).Find(graph);
  return g == nullptr ? 0 : g->nodes;
}

void GraphTables::NodeDestroyed(uint64_t id) {
  GraphNode* node = nodes_.Find(id);
  if (node == nullptr) return;
  Graph* g = graphs_.Find(node->graph);
  if (g != nullptr && g->nodes > 0) {
    g->nodes--;
    node_count_--;
  }
}

void GraphTables::Clear() {
  node_count_ = 0;
  graphs_.Clear();
  execs_.Clear();
  nodes_.Clear();
  user_objects_.Clear();
  graph_index_.clear();
  node_index_.clear();
  exec_index_.clear();
  user_object_index_.clear();
  captures_.clear();
}

Result<uint64_t> AdoptGraphMemory(AllocationTable& table, Graph& graph, Allocation a) {
  // Only this graph's memory on this device may be merged: anyone else's range overlapping
  // is refused (the driver never does that).
  ASSIGN_OR_RETURN(uint64_t base, table.InsertMerging(a, [&](const Allocation& e) {
    return e.kind == AllocKind::kGraphMemory && e.device == a.device &&
           std::find(graph.memory.begin(), graph.memory.end(), e.base) != graph.memory.end();
  }));
  // The union's base is one of the nodes' addresses, all of which stay listed.
  if (std::find(graph.memory.begin(), graph.memory.end(), a.base) == graph.memory.end()) graph.memory.push_back(a.base);
  return base;
}

}  // namespace remora::worker

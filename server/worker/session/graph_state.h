// GraphTables: the graphs, executable graphs, graph nodes and user objects of one session,
// the stream captures in progress, and what a graph needs beyond the driver's object: the
// staging of its host memory and the host functions its nodes call in the client.
//
// Handles. A graph or node the driver returns more than once (cuGraphGetNodes, a capture's
// graph, a child graph) keeps one session handle: each table has an index by driver object.
// A node belongs to a graph; child and conditional-body graphs belong to the node that owns
// them (parent != 0) and are destroyed with it, never by the application.
//
// Host memory in graphs. A copy node whose host side the worker can reach (a pinned region
// the client shares over shm) names that memory directly: every launch reads and writes the
// application's buffer. Any other host side is bound to a device staging buffer (charged to
// the tenant like any allocation): the node copies from or to the staging, and the client
// refreshes the staging before each launch and drains it after, with ordinary copies in the
// launch's stream order. The bindings travel with clones and instantiations.
//
// Owned by SessionState; used by the executor's single thread only (the callback state is
// shared with driver threads, see RepeatCallback).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "remora/memmgr/allocation_table.h"
#include "remora/memmgr/handle_table.h"
#include "worker/backend/driver.h"

namespace remora::worker {

// A host side of a graph copy, bound to a device staging buffer.
struct HostBinding {
  uint64_t client_addr = 0;  // the application's host address
  uint64_t size = 0;
  bool to_device = false;    // the graph reads the host memory (the client refreshes staging)
  DevPtr staging = 0;        // a session allocation of `size` bytes
  void* node = nullptr;      // CUgraphNode: the copy node using the staging (null: unknown)
  bool operator<(const HostBinding& o) const { return staging < o.staging; }
};

struct HostNodeSync;

// Host functions reached by driver threads (graph host nodes, user-object destructors) for
// the executor to announce to the client. Thread-safe.
class CallbackNotices {
 public:
  struct Item {
    uint64_t id;
    bool repeat;  // a graph host node (the client answers callbackDone), else a destructor
    const HostNodeSync* sync = nullptr;  // a host node that moves the graph's host memory
  };
  void Push(Item item) {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(item);
    pending_.store(true, std::memory_order_release);
  }
  // Everything pushed so far (cheap when empty).
  std::deque<Item> Take() {
    if (!pending_.load(std::memory_order_acquire)) return {};
    std::lock_guard<std::mutex> lock(mu_);
    pending_.store(false, std::memory_order_relaxed);
    return std::exchange(items_, {});
  }

 private:
  std::mutex mu_;
  std::deque<Item> items_;
  std::atomic<bool> pending_{false};
};

// A client host function called from a graph, possibly many times (one per launch): the
// driver thread announces each call and waits until the client has run it. Shared between
// the executor and driver threads; lives as long as the session (a graph may run it after
// its handle is gone).
struct RepeatCallback {
  uint64_t id = 0;
  std::shared_ptr<CallbackNotices> notices;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t launched = 0; // calls the launches of executable graphs made so far will make (under mu)
  uint64_t reached = 0;  // calls started (under mu)
  uint64_t done = 0;     // calls the client finished (under mu)
  bool released = false; // the session ended: never wait again
};
// The driver's host function for a RepeatCallback (arg).
void RepeatCallbackTrampoline(void* arg);

// A host node of an executable graph whose copies go through staging (HostBinding): before
// the client runs the function, what the copies before the node wrote into staging goes
// into the application's memory; after it, the staging of the graph's host-to-device copies
// is refreshed from the application's memory (a host function may write what a later copy
// reads). So a host node sees its graph's host memory as it would on a GPU reaching the
// application's memory (graph_host_sync.cc). Set on the executable graph's node in place of
// the plain RepeatCallback; lives as long as the session (a launch may still reach it).
struct HostNodeSync {
  RepeatCallback* cb = nullptr;
  uint64_t exec = 0;                  // handle of the executable graph
  int gpu = 0;
  std::vector<HostBinding> before;    // device-to-host bindings whose copies precede the node
};
// The driver's host function for a HostNodeSync (arg): as RepeatCallbackTrampoline.
void HostNodeSyncTrampoline(void* arg);
// The driver's destructor for a user object whose client destructor is callback `arg`
// (a RepeatCallback used once, without waiting).
void UserObjectTrampoline(void* arg);

struct Graph {
  void* graph = nullptr;      // CUgraph
  int gpu = 0;
  uint64_t parent = 0;        // the graph owning the node that owns this one (0: none)
  bool owned = false;         // the application's to destroy (else a capture's or a node's)
  std::vector<HostBinding> bindings;
  std::vector<DevPtr> memory;  // allocated by its memory nodes (session allocations)
  uint64_t nodes = 0;          // nodes counted for it (node_count(), below)
};
struct GraphExec {
  void* exec = nullptr;       // CUgraphExec
  int gpu = 0;
  std::vector<HostBinding> bindings;
  uint64_t nodes = 0;          // its graph's count when it was instantiated
  // Its top-level host nodes that call a client function (a function in two nodes comes
  // twice): each launch makes these calls, less those of nodes disabled in it
  // (hooks/graph_hooks.cc). Host nodes of child graphs and conditional bodies are not counted.
  struct HostNode {
    void* node = nullptr;      // CUgraphNode of its graph
    RepeatCallback* cb = nullptr;
  };
  std::vector<HostNode> host_nodes;
  // Its graph's memory nodes' addresses: the ledger keeps them while the graph or one of its
  // executable graphs lives (an application may destroy the graph once instantiated).
  std::vector<DevPtr> memory;
};
struct GraphNode {
  void* node = nullptr;       // CUgraphNode
  uint64_t graph = 0;         // handle of its graph
};
struct UserObject {
  void* object = nullptr;     // CUuserObject
};
// A stream capture in progress, begun by client thread `thread`.
struct Capture {
  uint64_t thread = 0;
  int mode = 0;               // CUstreamCaptureMode it was begun with
};

class GraphTables {
 public:
  GraphTables() : notices_(std::make_shared<CallbackNotices>()) {}

  HandleTable<Graph>& graphs() { return graphs_; }
  HandleTable<GraphExec>& execs() { return execs_; }
  HandleTable<GraphNode>& nodes() { return nodes_; }
  HandleTable<UserObject>& user_objects() { return user_objects_; }
  // Mints later handles in the session's window (handle_table.h).
  void SetWindow(uint8_t window) {
    graphs_.SetWindow(window);
    execs_.SetWindow(window);
    nodes_.SetWindow(window);
    user_objects_.SetWindow(window);
  }

  // The handle of driver graph `g`, registered if new (parent: the owning graph, 0 for a
  // graph the application owns).
  uint64_t AdoptGraph(void* g, int gpu, uint64_t parent, bool owned);
  uint64_t AdoptNode(void* n, uint64_t graph);
  uint64_t AdoptExec(void* e, int gpu);
  uint64_t AdoptUserObject(void* o);
  // Handle of a driver object already registered, or 0.
  uint64_t GraphOf(void* g) const;
  uint64_t NodeOf(void* n) const;
  // Forgets graph `id`, its nodes and the graphs its nodes own (recursively); returns the
  // session allocations that go with it: staging buffers no graph or executable graph binds
  // any more, and the memory of its memory nodes no executable graph of it holds.
  std::vector<DevPtr> ForgetGraph(uint64_t id);
  void ForgetNode(uint64_t id);
  // Forgets executable graph `id`; returns the staging buffers nothing binds any more and its
  // graph's memory no graph or other executable graph holds.
  std::vector<DevPtr> ForgetExec(uint64_t id);
  // Whether a graph or executable graph still lists memory node address `p` (the address an
  // allocation node returned, which cudaFree may name).
  bool MemoryHeld(DevPtr p);

  // Adds a binding to graph `id` and every graph that owns it (an instantiation of the
  // outermost graph refreshes it).
  void Bind(uint64_t graph, const HostBinding& b);

  // ---- node accounting (the session limit graph-nodes, worker/session/limits.h; issue 40, N4) ----
  // Nodes the session's graphs and executable graphs hold, as the worker counts them: one
  // per node added (a child graph node: one plus its child's), a clone's and an
  // instantiation's source count, a capture's graph's count from the driver at its end (a
  // capture in progress is bounded by the worker's memory wall only); less a node destroyed,
  // and a graph's or exec's count when it goes.
  uint64_t node_count() const { return node_count_; }
  void AddNodes(uint64_t graph, uint64_t n);
  void SetExecNodes(uint64_t exec, uint64_t n);
  uint64_t NodesOf(uint64_t graph) const;
  // cuGraphDestroyNode of node `id`: one node less in its graph (then ForgetNode).
  void NodeDestroyed(uint64_t id);

  // ---- captures ------------------------------------------------------------------------
  std::map<void*, Capture>& captures() { return captures_; }  // by driver stream
  int active_captures() const { return static_cast<int>(captures_.size()); }
  int worker_mode = 0;  // the capture mode the worker thread has in the driver now

  // ---- host functions of graphs --------------------------------------------------------
  const std::shared_ptr<CallbackNotices>& notices() { return notices_; }
  std::map<uint64_t, std::shared_ptr<RepeatCallback>>& repeat_callbacks() { return repeat_; }
  // The callback state for client callback `id` (created on first use).
  RepeatCallback* Repeat(uint64_t id);
  // The executable graph of driver executable graph `e`, or nullptr.
  GraphExec* ExecOf(void* e);
  // Whether a launched graph's host node has not yet been answered by the client: it runs, or
  // will, and its stream waits for the client meanwhile (Executor::HostCallbacksOutstanding).
  bool HostNodesOutstanding();
  // A new host-node synchronisation, kept for the session (HostNodeSync).
  HostNodeSync* NewSync(HostNodeSync s);
  // Per GPU, a non-blocking stream of the worker's own for the host nodes' staging copies
  // (the graph's stream waits in the node); destroyed with the session's graphs.
  std::map<int, DStream>& sync_streams() { return sync_streams_; }

  // Staging buffers bound by no graph or exec any more, among `candidates`.
  std::vector<DevPtr> Unbound(const std::vector<HostBinding>& candidates) const;

  // Lets every driver thread waiting on the client go (the session ends). The callback
  // states are left allocated: a graph still running may call its host function once more.
  void ReleaseCallbacks();
  // Forgets every handle (their objects were destroyed or left to the driver).
  void Clear();

 private:
  HandleTable<Graph> graphs_{HandleKind::kGraph};
  HandleTable<GraphExec> execs_{HandleKind::kGraphExec};
  HandleTable<GraphNode> nodes_{HandleKind::kGraphNode};
  HandleTable<UserObject> user_objects_{HandleKind::kUserObject};
  std::map<void*, uint64_t> graph_index_, node_index_, exec_index_, user_object_index_;
  std::map<void*, Capture> captures_;
  std::shared_ptr<CallbackNotices> notices_;
  std::map<uint64_t, std::shared_ptr<RepeatCallback>> repeat_;
  std::vector<std::unique_ptr<HostNodeSync>> syncs_;
  std::map<int, DStream> sync_streams_;
  uint64_t node_count_ = 0;
};

// Records `a` (AllocKind::kGraphMemory, `a.reserved` already charged) as memory of `graph`.
// The driver may give an allocation node of a graph the address of another of the same graph
// whose memory the graph frees before it (virtual address reuse within a graph, as
// graphMemoryFootprint shows): the overlapping ranges of `graph` become one entry, their union,
// charged with the sum of the nodes' sizes and released with the graph; `graph.memory` lists
// every node's own address (a free names one), the entries' bases among them. Overlapping any
// other allocation fails as AllocationTable::Insert does, changing nothing. Returns the
// entry's base.
Result<uint64_t> AdoptGraphMemory(AllocationTable& table, Graph& graph, Allocation a);

}  // namespace remora::worker

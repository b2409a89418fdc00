// Stream capture and CUDA graphs on the host-emulated backend. Work issued on a capturing
// emulated stream becomes a node (its closure) instead of running; the explicit graph API
// builds nodes from parameters; an instantiated graph is a snapshot run in topological order
// as one task of the stream it is launched on. Kernels are not executed (as everywhere on
// this backend), copies, memsets and host functions are. Conditional bodies run with the
// handle's default value (no kernel can set it), a WHILE body at most once.
//
// The driver's handles are these objects' addresses (CUgraph = EmuGraph*, ...), as the host
// backend does for streams and events. Used by the executor's single thread; node closures
// run on emulated stream threads.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "remora/base/status.h"
#include "worker/backend/driver.h"

namespace remora::worker {

// What emulated graphs need from the host driver that owns them.
class EmuGraphHost {
 public:
  virtual ~EmuGraphHost() = default;
  // Host address of emulated device memory [p, p + n).
  virtual Result<std::byte*> Translate(DevPtr p, uint64_t n) = 0;
  // Runs `task` in the stream's order (never captured).
  virtual Status Submit(DStream s, std::function<void()> task) = 0;
  virtual Status RecordEvent(DEvent e, DStream s) = 0;
  virtual Status WaitEvent(DStream s, DEvent e) = 0;
  virtual Result<DevPtr> Allocate(size_t bytes) = 0;
  virtual bool BlockingStream(DStream s) = 0;  // synchronises with the legacy stream
};

struct EmuGraph;

struct EmuNode {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  EmuGraph* graph = nullptr;
  std::vector<EmuNode*> deps;
  std::function<void()> work;               // captured work (its pointers resolved at capture)
  CUgraphNodeParams params{};               // explicit parameters (pointers below)
  std::vector<std::byte> kernel_args;       // kernel parameters, packed by the caller's layout
  std::vector<void*> kernel_ptrs;
  std::vector<CUmemAccessDesc> access;
  std::unique_ptr<EmuGraph> child;          // a child graph node's own graph
  std::vector<std::unique_ptr<EmuGraph>> bodies;  // a conditional node's
  std::vector<CUgraph> body_handles;              // the same, as the array cuGraphAddNode returns
  CUkernelNodeAttrValue attrs[32] = {};
  bool enabled = true;
  EmuNode* origin = nullptr;                // in a clone or an instantiation: the node copied
};

struct EmuGraph {
  std::vector<std::unique_ptr<EmuNode>> nodes;
  EmuNode* owner = nullptr;                 // a child or body graph's node
  std::vector<CUgraphNode> capture_deps;    // GetCaptureInfo's answer, kept valid
};

struct EmuExec {
  std::unique_ptr<EmuGraph> graph;
  std::vector<EmuNode*> order;              // topological
  unsigned long long flags = 0;
};

class HostGraphs {
 public:
  explicit HostGraphs(EmuGraphHost& host) : host_(host) {}
  ~HostGraphs();

  // ---- the host driver's stream operations consult these --------------------------------
  // Whether work on `s` is captured (the legacy stream while a blocking stream captures is
  // an error: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
  bool Capturing(DStream s) const { return streams_.count(s) > 0; }
  Status LegacyAllowed() const;
  // Captures `work` (a copy, memset, kernel or host function) on capturing stream `s`.
  // `params` (optional): the node's parameters as cuGraph*NodeGetParams reads them back (a
  // captured host function's fn and userData, which the worker's host-node sync looks for).
  Status CaptureWork(DStream s, CUgraphNodeType type, std::function<void()> work, const CUgraphNodeParams* params = nullptr);
  Status CaptureEventRecord(DEvent e, DStream s);
  // `s` waits for `e`: joins e's capture if e was recorded in one. False if `e` belongs to no
  // capture (an ordinary wait).
  Result<bool> CaptureWait(DStream s, DEvent e);
  // A synchronising call on a capturing stream: invalidates the capture.
  CUresult Violation(DStream s);
  // A "potentially unsafe" call (cuMemAlloc, cuMemHostRegister) made by the worker thread:
  // while its capture mode is not relaxed and a capture begun in another mode than relaxed is
  // going on, CUDA refuses it and invalidates those captures. CUDA_SUCCESS when allowed.
  CUresult Unsafe();
  void ForgetEvent(DEvent e) { event_deps_.erase(e); }
  void ForgetStream(DStream s);

  // ---- the driver API ---------------------------------------------------------------------
  CUresult BeginCapture(DStream s, CUstreamCaptureMode mode, EmuGraph* into, const CUgraphNode* deps, size_t n);
  CUresult EndCapture(DStream s, CUgraph* out);
  CUresult IsCapturing(DStream s, CUstreamCaptureStatus* status);
  CUresult CaptureInfo(DStream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                       const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count);
  CUresult UpdateCaptureDependencies(DStream s, CUgraphNode* deps, size_t n, unsigned flags);
  CUresult ExchangeMode(CUstreamCaptureMode* mode);

  CUresult Create(CUgraph* out);
  CUresult Destroy(CUgraph g);
  CUresult Clone(CUgraph* out, CUgraph g);
  CUresult AddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUgraphNodeParams* p);
  CUresult SetParams(CUgraphNode node, CUgraphNodeParams* p);
  CUresult ExecSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p);
  CUresult DestroyNode(CUgraphNode node);
  CUresult Instantiate(CUgraphExec* out, CUgraph g, unsigned long long flags);
  CUresult ExecDestroy(CUgraphExec e);
  CUresult Launch(CUgraphExec e, DStream s);
  CUresult Update(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo* info);
  CUresult ExecFlags(CUgraphExec e, cuuint64_t* flags);
  CUresult DotPrint(CUgraph g, const char* path);
  // Topology: nodes (or roots), edges, a node's dependencies or dependents.
  CUresult Nodes(CUgraph g, bool roots, CUgraphNode* out, size_t* n);
  CUresult Edges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* n);
  CUresult Neighbours(CUgraphNode node, bool dependents, CUgraphNode* out, size_t* n);
  CUresult Connect(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n, bool add);
  CUresult NodeType(CUgraphNode node, CUgraphNodeType* type);
  CUresult FindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone);
  CUresult SetEnabled(CUgraphExec e, CUgraphNode node, unsigned enabled);
  CUresult GetEnabled(CUgraphExec e, CUgraphNode node, unsigned* enabled);
  // The node's parameters as set (kernel, memcpy, memset, host, mem alloc/free, events, child).
  CUresult Params(CUgraphNode node, CUgraphNodeType type, CUgraphNodeParams* out);
  CUresult ChildGraph(CUgraphNode node, CUgraph* out);
  CUresult KernelAttribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue* get,
                           const CUkernelNodeAttrValue* set);
  CUresult CopyAttributes(CUgraphNode dst, CUgraphNode src);
  CUresult ConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph g, unsigned value, unsigned flags);
  CUresult UserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned count);
  CUresult UserObjectRef(CUuserObject o, int delta);

 private:
  struct Capture;
  struct CondHandle {
    unsigned default_value = 0;
    unsigned flags = 0;
  };
  struct UserObj {
    void* ptr;
    CUhostFn destroy;
    int refs;
  };

  // The capture `s` belongs to, or nullptr.
  Capture* CaptureOf(DStream s) const;
  void EndCaptureOf(Capture* c);
  EmuNode* Append(EmuGraph* g, std::vector<EmuNode*> deps, CUgraphNodeType type);
  CUresult Validate(const EmuNode& node) const;
  // Stores an explicit node's parameters (and the storage they point into).
  CUresult Fill(EmuNode* node, const CUgraphNodeParams& p);
  // The work of `order` for one launch, its memory resolved now (on the executor thread);
  // event nodes are collected for the launch to record and wait around the task.
  Result<std::function<void()>> Prepare(const std::vector<EmuNode*>& order, std::vector<DEvent>* waits,
                                        std::vector<DEvent>* records);
  Result<std::function<void()>> PrepareNode(EmuNode* node, std::vector<DEvent>* waits, std::vector<DEvent>* records);
  void Register(EmuGraph* g);    // g and everything under it become known
  void Unregister(EmuGraph* g);
  static std::vector<EmuNode*> Order(EmuGraph* g);
  std::unique_ptr<EmuGraph> CopyGraph(const EmuGraph& g, EmuNode* owner);
  bool Known(CUgraph g) const;
  bool Known(CUgraphNode n) const;
  bool Known(CUgraphExec e) const { return execs_.count(reinterpret_cast<EmuExec*>(e)) > 0; }

  EmuGraphHost& host_;
  std::set<EmuGraph*> graphs_;  // the application's (owned here)
  std::set<EmuGraph*> live_graphs_;  // every graph that exists, children and captures included
  std::set<EmuNode*> live_nodes_;
  std::set<EmuExec*> execs_;
  std::map<DStream, Capture*> streams_;            // capturing streams
  std::map<DEvent, std::pair<Capture*, std::vector<EmuNode*>>> event_deps_;
  std::set<Capture*> captures_;
  uint64_t next_capture_id_ = 1;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::map<CUgraphConditionalHandle, CondHandle> cond_handles_;
  uint64_t next_cond_ = 1;
  std::map<CUuserObject, UserObj> user_objects_;
};

}  // namespace remora::worker

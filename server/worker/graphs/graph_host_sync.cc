// Host nodes of graphs whose copies go through staging (graph_state.h, HostNodeSync).
//
// A graph copy between device memory and host memory the worker cannot reach copies to or
// from a device staging buffer; the client refreshes the staging before each launch and
// drains it after. A host node in between would see the application's memory as it was
// before the launch: NVIDIA's simpleCudaGraphs prints, from a host node, a sum its graph
// copied into a stack variable - 0 at the first launch through Remora, the previous
// launch's sum after that. So an executable graph with staging gets, on each of its host
// nodes, a trampoline of its own (SetUpHostNodeSync): when a launch reaches the node, the
// executor reads the staging of the device-to-host copies that precede the node (on a
// stream of its own: the graph's stream waits in the node) and sends the bytes with the
// notice (graphHostNode); the client writes them into the application's memory, runs the
// function and answers with the bytes of every host-to-device binding of the graph
// (graphHostNodeDone, a control request like callbackDone), which the executor copies
// into their staging before it lets the node return. Copies concurrent with the node race
// with it as they would on a GPU.
#include <cstring>
#include <set>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "cuda_api.h"
#include "worker/ops/handlers.h"

namespace remora::worker {
namespace {

// At most this many bytes travel with one host node in each direction (a notice or a
// request body of at most 8 MiB); a graph with more staged before one node keeps the
// drain after the launch alone, and says so once.
constexpr uint64_t kMaxSyncBytes = 4ull << 20;

Result<DStream> SyncStream(Executor& ex, int gpu) {
  auto& streams = ex.session().graphs().sync_streams();
  auto it = streams.find(gpu);
  if (it != streams.end()) return it->second;
  RETURN_IF_ERROR(ex.SetDevice(gpu));
  ASSIGN_OR_RETURN(DStream s, ex.driver().StreamCreate(CU_STREAM_NON_BLOCKING, 0));
  streams[gpu] = s;
  return s;
}

// Copies between pinned memory of its own and staging on the sync stream, then finishes:
// a read posts the node's notice with the bytes, a write lets the node return.
class StagingCopyOp final : public PendingOp {
 public:
  struct Piece {
    uint64_t client_addr;
    DevPtr staging;
    uint64_t size;
  };
  // `read`: staging to the client (the node's notice); else the client's bytes (`bytes`,
  // in piece order) to staging, then the node's callback is done.
  StagingCopyOp(bool read, RepeatCallback* cb, uint64_t exec, int gpu, std::vector<Piece> pieces,
                std::vector<std::byte> bytes = {})
      : read_(read), cb_(cb), exec_(exec), gpu_(gpu), pieces_(std::move(pieces)), bytes_(std::move(bytes)) {}

  Result<bool> Poll(Executor& ex) override {
    if (!started_) {
      started_ = true;
      Status st = Start(ex);
      if (!st.ok()) {
        LOG_WARN("a graph host node's host memory could not be {} ({}): the node runs without it",
                 read_ ? "read from its staging" : "written to its staging", st.ToString());
        Release(ex);
        return Finish(ex, false);
      }
    }
    if (event_ != nullptr) {
      Status st = ex.driver().EventQuery(event_);
      if (st.code() == Err::kNotReady) return false;
      bool ok = st.ok();
      if (!ok) LOG_WARN("a graph host node's staging copy failed: {}", st.ToString());
      return Finish(ex, ok);
    }
    return Finish(ex, true);
  }
  void Abandon(Executor& ex) override {
    if (event_ != nullptr && ex.SetDevice(gpu_).ok()) {
      if (auto s = SyncStream(ex, gpu_); s.ok()) (void)ex.driver().StreamSynchronize(*s);
    }
    Release(ex);
  }

 private:
  Status Start(Executor& ex) {
    uint64_t total = 0;
    for (const Piece& p : pieces_) total += p.size;
    if (total == 0) return Status::Ok();
    ASSIGN_OR_RETURN(DStream s, SyncStream(ex, gpu_));
    if (total <= BouncePool::kBytes) {
      // The executor's pooled pinned buffers: no allocation per node and launch.
      ASSIGN_OR_RETURN(pinned_, ex.AcquireBounce());
      bounce_ = true;
    } else {
      ASSIGN_OR_RETURN(void* host, ex.driver().HostAlloc(total));
      pinned_ = static_cast<std::byte*>(host);
    }
    if (!read_) std::memcpy(pinned_, bytes_.data(), std::min<uint64_t>(total, bytes_.size()));
    uint64_t at = 0;
    for (const Piece& p : pieces_) {
      RETURN_IF_ERROR(read_ ? ex.driver().MemcpyDtoH(pinned_ + at, p.staging, p.size, s)
                            : ex.driver().MemcpyHtoD(p.staging, pinned_ + at, p.size, s));
      at += p.size;
    }
    ASSIGN_OR_RETURN(event_, ex.AcquirePoolEvent(gpu_));
    return ex.driver().EventRecord(event_, s);
  }

  Result<bool> Finish(Executor& ex, bool ok) {
    Status st;
    if (read_) {
      st = ex.PostNotice([&](wire::Notice::Builder& n) {
        auto g = n.initGraphHostNode();
        g.setId(cb_->id);
        g.setExec(exec_);
        auto writes = g.initWrites(ok && pinned_ != nullptr ? static_cast<unsigned>(pieces_.size()) : 0);
        uint64_t at = 0;
        for (unsigned i = 0; i < writes.size(); i++) {
          writes[i].setAddr(pieces_[i].client_addr);
          writes[i].setData(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(pinned_ + at), pieces_[i].size));
          at += pieces_[i].size;
        }
      });
    } else {
      std::lock_guard<std::mutex> lock(cb_->mu);
      cb_->done++;
      cb_->cv.notify_all();
    }
    Release(ex);
    RETURN_IF_ERROR(st);
    return true;
  }

  void Release(Executor& ex) {
    if (event_ != nullptr) ex.ReleasePoolEvent(gpu_, event_);
    event_ = nullptr;
    if (pinned_ != nullptr) {
      if (bounce_) ex.ReleaseBounce(pinned_);
      else ex.FreeHostWhenIdle(pinned_);  // cuMemFreeHost waits for the whole device
    }
    pinned_ = nullptr;
    bounce_ = false;
  }

  bool read_;
  RepeatCallback* cb_;
  uint64_t exec_;
  int gpu_;
  std::vector<Piece> pieces_;
  std::vector<std::byte> bytes_;
  bool started_ = false;
  std::byte* pinned_ = nullptr;
  bool bounce_ = false;  // pinned_ is one of the executor's bounce buffers
  DEvent event_ = nullptr;
};

// Every node `from` depends on, directly or not.
Result<std::set<void*>> Ancestors(gen::cuda::Api& api, CUgraphNode from) {
  std::set<void*> seen;
  std::vector<CUgraphNode> todo{from};
  while (!todo.empty()) {
    CUgraphNode n = todo.back();
    todo.pop_back();
    size_t count = 0;
    CUresult r = api.cuGraphNodeGetDependencies_v2(n, nullptr, nullptr, &count);
    if (r != CUDA_SUCCESS) return Status(Domain::kCuda, static_cast<uint32_t>(r), "cuGraphNodeGetDependencies");
    std::vector<CUgraphNode> deps(count);
    if (count > 0) {
      r = api.cuGraphNodeGetDependencies_v2(n, deps.data(), nullptr, &count);
      if (r != CUDA_SUCCESS) return Status(Domain::kCuda, static_cast<uint32_t>(r), "cuGraphNodeGetDependencies");
    }
    for (CUgraphNode d : deps)
      if (seen.insert(d).second) todo.push_back(d);
  }
  return seen;
}

}  // namespace

Status Handlers::SetUpHostNodeSync(Executor& ex, uint64_t exec_id, void* graph) {
  GraphTables& g = ex.session().graphs();
  GraphExec* e = g.execs().Find(exec_id);
  if (e == nullptr) return Status::Ok();
  e->host_nodes.clear();
  gen::cuda::Api& api = ex.driver().cuda();
  auto cg = static_cast<CUgraph>(graph);
  size_t count = 0;
  CUresult r = api.cuGraphGetNodes(cg, nullptr, &count);
  std::vector<CUgraphNode> nodes(count);
  if (r == CUDA_SUCCESS && count > 0) r = api.cuGraphGetNodes(cg, nodes.data(), &count);
  if (r != CUDA_SUCCESS) return Status(Domain::kCuda, static_cast<uint32_t>(r), "cuGraphGetNodes");
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    if (api.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_HOST) continue;
    CUDA_HOST_NODE_PARAMS h{};
    if (api.cuGraphHostNodeGetParams(node, &h) != CUDA_SUCCESS || h.fn != RepeatCallbackTrampoline || h.userData == nullptr)
      continue;
    e->host_nodes.push_back({node, static_cast<RepeatCallback*>(h.userData)});
    if (e->bindings.empty()) continue;
    ASSIGN_OR_RETURN(std::set<void*> ancestors, Ancestors(api, node));
    HostNodeSync sync;
    sync.cb = static_cast<RepeatCallback*>(h.userData);
    sync.exec = exec_id;
    sync.gpu = e->gpu;
    uint64_t bytes = 0;
    for (const HostBinding& b : e->bindings)
      if (!b.to_device && b.node != nullptr && ancestors.count(b.node)) {
        sync.before.push_back(b);
        bytes += b.size;
      }
    if (bytes > kMaxSyncBytes) {
      LOG_WARN("a graph host node follows {} of copies into host memory the server cannot reach (more than {}): it "
               "sees them only after the launch (use pinned memory over shm)", FormatSize(bytes), FormatSize(kMaxSyncBytes));
      sync.before.clear();
    }
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_HOST;
    p.host.fn = HostNodeSyncTrampoline;
    p.host.userData = g.NewSync(std::move(sync));
    r = api.cuGraphExecNodeSetParams(static_cast<CUgraphExec>(e->exec), node, &p);
    if (r != CUDA_SUCCESS) return Status(Domain::kCuda, static_cast<uint32_t>(r), "cuGraphExecNodeSetParams (a host node)");
  }
  return Status::Ok();
}

Status Handlers::AnnounceHostNode(Executor& ex, const HostNodeSync& sync) {
  std::vector<StagingCopyOp::Piece> pieces;
  for (const HostBinding& b : sync.before) pieces.push_back({b.client_addr, b.staging, b.size});
  ex.AddPending(std::make_unique<StagingCopyOp>(true, sync.cb, sync.exec, sync.gpu, std::move(pieces)));
  return Status::Ok();
}

Status Handlers::GraphHostNodeDone(Executor& ex, Req req) {
  auto d = req.getGraphHostNodeDone();
  GraphTables& g = ex.session().graphs();
  auto it = g.repeat_callbacks().find(d.getId());
  if (it == g.repeat_callbacks().end()) return Status::Ok();  // not a host function of this session
  RepeatCallback* cb = it->second.get();
  std::vector<StagingCopyOp::Piece> pieces;
  std::vector<std::byte> bytes;
  int gpu = 0;
  if (const GraphExec* e = g.execs().Find(d.getExec())) {
    gpu = e->gpu;
    std::vector<bool> used(e->bindings.size());  // a host range bound twice comes twice
    for (auto read : d.getReads()) {
      auto data = read.getData();
      for (size_t i = 0; i < e->bindings.size(); i++) {
        const HostBinding& b = e->bindings[i];
        if (used[i] || !b.to_device || b.client_addr != read.getAddr() || b.size != data.size()) continue;
        if (bytes.size() + data.size() > kMaxSyncBytes) break;
        used[i] = true;
        pieces.push_back({b.client_addr, b.staging, b.size});
        bytes.insert(bytes.end(), reinterpret_cast<const std::byte*>(data.begin()),
                     reinterpret_cast<const std::byte*>(data.end()));
        break;
      }
    }
  }
  // Nothing to refresh (or the graph is gone): the node returns now.
  ex.AddPending(std::make_unique<StagingCopyOp>(false, cb, d.getExec(), gpu, std::move(pieces), std::move(bytes)));
  return Status::Ok();
}

}  // namespace remora::worker

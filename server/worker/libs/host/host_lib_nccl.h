// HostNccl: the host backend's NCCL: communicators of emulated GPUs, in one worker or in the workers of
// several sessions and servers, connected by the mesh of nccl_emu_net.h; collectives and
// point-to-point calls run in their stream's order on the emulated streams' threads, on the
// emulated device memory, with the reductions of nccl_emu_reduce.h. For tests only (CI's
// multi-rank NCCL logic without a GPU); it is not offered as a product transport.
//
// As NCCL: a non-blocking init or split answers ncclInProgress and completes on a thread of its
// own; the calls between ncclGroupStart and ncclGroupEnd run together, one task per stream
// that first sends everything and then receives, so grouped sends and receives never wait for
// each other. Each communicator holds emulated device memory for its "buffers" (1 MiB and 2 MiB
// per other rank), which the session's NCCL charges to the tenant (NcclEmulation).
#pragma once

#include <algorithm>
#include <array>
#include <functional>
#include <tuple>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <set>
#include <vector>

#include "nccl_api.h"
#include "remora/base/log.h"
#include "worker/backend/host/host_device.h"
#include "worker/libs/host/host_libraries.h"
#include "worker/libs/host/nccl_emu_net.h"
#include "worker/libs/host/nccl_emu_reduce.h"
#include "worker/backend/nccl_emulation.h"

namespace remora::worker::emu_nccl {

inline constexpr uint64_t kBufferBase = 1ull << 20, kBufferPerPeer = 2ull << 20;
inline constexpr int kMaxGpus = 16;

struct EmuComm {
  std::shared_ptr<Mesh> mesh;
  std::vector<int> world;  // rank -> mesh rank
  int rank = 0, nranks = 0, gpu = 0;
  uint64_t channel = 1;
  std::atomic<int> state{ncclInProgress};
  std::mutex mu;
  std::string why;
  std::atomic<bool> stop{false};
  std::atomic<int> pending{0};  // tasks queued on streams and not done
  std::thread worker;           // its init or split
  // Sequence numbers, assigned on the executor's thread in call order (every rank's).
  uint64_t coll_seq = 0, ctrl_seq = 0;
  std::vector<uint64_t> send_seq, recv_seq;
  DevPtr buffer = 0;
  uint64_t buffer_bytes = 0;
  std::map<int, Reduction> ops;
  std::map<int, const std::byte*> device_scalars;
  int next_op = ncclNumOps;

  void SetFailed(ncclResult_t r, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    int expected = state.load();
    if (expected != ncclSuccess && expected != ncclInProgress) return;
    state.store(r);
    why = what;
  }
  ~EmuComm() {
    stop.store(true);
    if (mesh) mesh->Wake();
    if (worker.joinable()) worker.join();
  }
};

// What a collective sends to whom, and what each receiver makes of it (host_lib_nccl_ops.cc).
struct CollectivePattern;

// One collective or point-to-point call: what it sends first, then what it waits for.
struct EmuOp {
  std::shared_ptr<EmuComm> comm;
  std::function<Status()> post, complete;
};

inline uint64_t Mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : {a, b, c}) h = (h ^ v) * 1099511628211ull;
  return h | 1;
}

class HostNccl final : public gen::nccl::Api, public NcclEmulation {
 public:
  explicit HostNccl(EmulatedDevice& d) : d_(d) {}
  ~HostNccl() override { AbortAll(); }

  // ---- NcclEmulation ----
  uint64_t InternalBytes(int gpu) override { return gpu >= 0 && gpu < kMaxGpus ? internal_[static_cast<size_t>(gpu)].load() : 0; }
  void AbortAll() override {
    std::lock_guard<std::mutex> lock(all_mu_);
    for (auto& w : all_)
      if (auto c = w.lock()) {
        c->stop.store(true);
        c->SetFailed(ncclRemoteError, "aborted");
        if (c->mesh) c->mesh->Abort("the session ended");
      }
  }

  // ---- unique ids and communicators ----
  ncclResult_t ncclGetUniqueId(ncclUniqueId* id) override {
    if (roots_.size() >= 1024) roots_.erase(roots_.begin());  // the oldest rendezvous gives up
    auto root = Root::Start(id);
    if (!root.ok()) {
      LOG_WARN("emulated NCCL: {}", root.status().message());
      return ncclSystemError;
    }
    roots_.push_back(std::move(*root));
    return ncclSuccess;
  }
  ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) override {
    return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
  }
  ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nid, ncclUniqueId* ids,
                                        ncclConfig_t* config) override {
    if (nid < 1 || ids == nullptr) return ncclInvalidArgument;
    return ncclCommInitRankConfig(comm, nranks, ids[0], rank, config);  // the emulation needs one
  }
  ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) override {
    if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    auto c = Make(nranks, nranks);
    if (!c) return ncclSystemError;
    c->rank = rank;
    c->nranks = nranks;
    for (int i = 0; i < nranks; i++) c->world.push_back(i);
    EmuComm* raw = c.get();
    c->worker = std::thread([raw, id, nranks, rank] {
      auto mesh = Mesh::Join(id, nranks, rank, raw->stop);
      if (!mesh.ok()) {
        const Status& st = mesh.status();
        raw->SetFailed(st.domain() == Domain::kNccl ? static_cast<ncclResult_t>(st.raw()) : ncclSystemError, st.message());
        return;
      }
      raw->mesh = std::move(*mesh);
      raw->state.store(ncclSuccess);
    });
    return Adopt(std::move(c), comm, config);
  }
  ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) override {
    auto p = Find(parent);
    if (!p || newcomm == nullptr) return ncclInvalidArgument;
    if (p->state.load() != ncclSuccess) return ncclInvalidUsage;
    uint64_t seq = p->ctrl_seq++;
    auto c = Make(p->nranks, 0);
    if (!c) return ncclSystemError;
    c->mesh = p->mesh;
    EmuComm* raw = c.get();
    // Every rank of the parent sends its (color, key) to all, then each group orders itself.
    c->worker = std::thread([raw, p, seq, color, key] {
      int32_t mine[2] = {color, key};
      Key k{p->channel, kControl, seq};
      for (int j = 0; j < p->nranks; j++) {
        Status st = p->mesh->Send(p->world[static_cast<size_t>(j)], k, mine, sizeof(mine));
        if (!st.ok()) return raw->SetFailed(ncclRemoteError, st.message());
      }
      std::vector<std::tuple<int, int, int>> members;  // key, parent rank, mesh rank
      for (int j = 0; j < p->nranks; j++) {
        auto got = p->mesh->Receive(p->world[static_cast<size_t>(j)], k, &raw->stop);
        if (!got.ok() || got->size() != sizeof(mine)) return raw->SetFailed(ncclRemoteError, got.ok() ? "a malformed split" : got.status().message());
        int32_t theirs[2];
        std::memcpy(theirs, got->data(), sizeof(theirs));
        if (theirs[0] == color && color != NCCL_SPLIT_NOCOLOR) members.emplace_back(theirs[1], j, p->world[static_cast<size_t>(j)]);
      }
      std::sort(members.begin(), members.end());
      for (size_t i = 0; i < members.size(); i++) {
        raw->world.push_back(std::get<2>(members[i]));
        if (std::get<1>(members[i]) == p->rank) raw->rank = static_cast<int>(i);
      }
      raw->nranks = static_cast<int>(members.size());
      raw->channel = Mix(p->channel, seq, static_cast<uint64_t>(static_cast<uint32_t>(color)));
      raw->send_seq.assign(members.size(), 0);
      raw->recv_seq.assign(members.size(), 0);
      raw->state.store(ncclSuccess);
    });
    if (color == NCCL_SPLIT_NOCOLOR) {
      // This rank only takes part: its exchange finishes with the others'.
      *newcomm = nullptr;
      std::lock_guard<std::mutex> lock(all_mu_);
      leavers_.push_back(std::move(c));
      return config != nullptr && config->blocking == 0 ? ncclInProgress : ncclSuccess;
    }
    return Adopt(std::move(c), newcomm, config ? config : &nonblocking_);
  }
  ncclResult_t ncclCommShrink(ncclComm_t parent, int* exclude, int n, ncclComm_t* newcomm, ncclConfig_t* config, int) override {
    auto p = Find(parent);
    if (!p || newcomm == nullptr || n < 0 || (n > 0 && exclude == nullptr)) return ncclInvalidArgument;
    if (p->state.load() != ncclSuccess) return ncclInvalidUsage;
    std::vector<bool> out(static_cast<size_t>(p->nranks), false);
    for (int i = 0; i < n; i++) {
      if (exclude[i] < 0 || exclude[i] >= p->nranks) return ncclInvalidArgument;
      out[static_cast<size_t>(exclude[i])] = true;
    }
    if (out[static_cast<size_t>(p->rank)]) return ncclInvalidArgument;
    auto c = Make(p->nranks - n, p->nranks - n);
    if (!c) return ncclSystemError;
    c->mesh = p->mesh;
    for (int j = 0; j < p->nranks; j++) {
      if (out[static_cast<size_t>(j)]) continue;
      if (j == p->rank) c->rank = static_cast<int>(c->world.size());
      c->world.push_back(p->world[static_cast<size_t>(j)]);
    }
    c->nranks = static_cast<int>(c->world.size());
    c->channel = Mix(p->channel, p->ctrl_seq++, 0xffffffffull);
    c->state.store(ncclSuccess);
    return Adopt(std::move(c), newcomm, config);
  }
  ncclResult_t ncclCommFinalize(ncclComm_t comm) override {
    auto c = Find(comm);
    if (!c) return ncclInvalidArgument;
    finalizing_.insert(comm);
    return c->pending.load() > 0 ? ncclInProgress : ncclSuccess;
  }
  ncclResult_t ncclCommDestroy(ncclComm_t comm) override { return End(comm, false); }
  ncclResult_t ncclCommAbort(ncclComm_t comm) override { return End(comm, true); }
  ncclResult_t ncclCommRevoke(ncclComm_t comm, int) override {
    auto c = Find(comm);
    if (!c) return ncclInvalidArgument;
    c->stop.store(true);  // operations in flight fail
    if (c->mesh) c->mesh->Wake();
    return ncclSuccess;
  }
  ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) override {
    auto c = Find(comm);
    if (!c || state == nullptr) return ncclInvalidArgument;
    int s = c->state.load();
    if (s == ncclSuccess && c->mesh) {
      Status health = c->mesh->Health();
      if (!health.ok()) {
        c->SetFailed(ncclRemoteError, health.message());
        s = c->state.load();
      }
    }
    if (s == ncclSuccess && finalizing_.count(comm) && c->pending.load() > 0) s = ncclInProgress;
    *state = static_cast<ncclResult_t>(s);
    return ncclSuccess;
  }
  ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) override {
    auto c = Find(comm);
    if (!c || count == nullptr) return ncclInvalidArgument;
    *count = c->nranks;
    return ncclSuccess;
  }
  ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) override {
    auto c = Find(comm);
    if (!c || rank == nullptr) return ncclInvalidArgument;
    *rank = c->rank;
    return ncclSuccess;
  }

  // ---- registrations (nothing to do for host memory) ----
  ncclResult_t ncclCommRegister(const ncclComm_t comm, void*, size_t, void** handle) override {
    if (!Find(comm) || handle == nullptr) return ncclInvalidArgument;
    *handle = reinterpret_cast<void*>(++registrations_ << 4);
    return ncclSuccess;
  }
  ncclResult_t ncclCommDeregister(const ncclComm_t comm, void*) override { return Find(comm) ? ncclSuccess : ncclInvalidArgument; }
  ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void*, size_t, ncclWindow_t* win, int) override {
    if (!Find(comm) || win == nullptr) return ncclInvalidArgument;
    *win = reinterpret_cast<ncclWindow_t>(++registrations_ << 4);
    return ncclSuccess;
  }
  ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t) override { return Find(comm) ? ncclSuccess : ncclInvalidArgument; }

  // ---- reduction operators ----
  ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type, ncclScalarResidence_t residence,
                                        ncclComm_t comm) override {
    auto c = Find(comm);
    if (!c || op == nullptr || scalar == nullptr || TypeSize(type) == 0) return ncclInvalidArgument;
    Reduction r;
    r.premul = true;
    int id = c->next_op++;
    if (residence == ncclScalarHostImmediate) {
      const auto* b = static_cast<const std::byte*>(scalar);
      r.scalar.assign(b, b + TypeSize(type));
    } else {
      auto host = d_.Translate(reinterpret_cast<DevPtr>(scalar), static_cast<uint64_t>(TypeSize(type)));
      if (!host.ok()) return ncclInvalidArgument;
      c->device_scalars[id] = *host;  // read by each collective, as on a GPU
    }
    c->ops[id] = std::move(r);
    *op = static_cast<ncclRedOp_t>(id);
    return ncclSuccess;
  }
  ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) override {
    auto c = Find(comm);
    if (!c || !c->ops.erase(static_cast<int>(op))) return ncclInvalidArgument;
    c->device_scalars.erase(static_cast<int>(op));
    return ncclSuccess;
  }

  // ---- groups ----
  ncclResult_t ncclGroupStart() override {
    group_depth_++;
    return ncclSuccess;
  }
  ncclResult_t ncclGroupEnd() override {
    if (group_depth_ == 0) return ncclInvalidUsage;
    if (--group_depth_ > 0) return ncclSuccess;
    ncclResult_t r = ncclSuccess;
    for (auto& [stream, ops] : grouped_) {
      ncclResult_t s = Submit(stream, std::move(ops));
      if (s != ncclSuccess) r = s;
    }
    grouped_.clear();
    return r;
  }

  // ---- collectives (host_lib_nccl_ops.cc): checked and translated now, run in stream order ----
  ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) override;
  ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) override;
  ncclResult_t ncclBcast(void* b, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) override {
    return ncclBroadcast(b, b, n, t, root, comm, st);
  }
  ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t comm,
                          cudaStream_t st) override;
  ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                 cudaStream_t st) override;
  ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) override;
  ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) override;
  ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) override;
  ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) override;
  ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) override;
  ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) override;

  // ---- NCCL 2.28's device API (host_lib_nccl_dev.cc): emulated values, not NCCL's layout ----
  ncclResult_t ncclGetVersion(int* version) override;
  ncclTeam_t ncclTeamWorld(ncclComm_t comm) override;
  ncclTeam_t ncclTeamLsa(ncclComm_t comm) override;
  ncclTeam_t ncclTeamRail(ncclComm_t comm) override;
  int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) override;
  int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) override;
  int ncclLLA2ACalcSlots(int max_elts, int max_elt_size) override;
  ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int n, ncclLsaBarrierHandle_t* h,
                                               ncclDevResourceRequirements_t* req) override;
  ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int n, ncclGinBarrierHandle_t* h,
                                               ncclDevResourceRequirements_t* req) override;
  ncclResult_t ncclLLA2ACreateRequirement(int blocks, int slots, ncclLLA2AHandle_t* h, ncclDevResourceRequirements_t* req) override;
  ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements_t* reqs, ncclDevComm_t* out) override;
  ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm_t* dev) override;

 private:
  // A communicator of `nranks` whose buffers are sized for `buffer_ranks` (a split's parent's).
  std::shared_ptr<EmuComm> Make(int nranks, int buffer_ranks) {
    auto c = std::make_shared<EmuComm>();
    c->gpu = d_.CurrentDevice();
    c->send_seq.assign(static_cast<size_t>(nranks), 0);
    c->recv_seq.assign(static_cast<size_t>(nranks), 0);
    c->buffer_bytes = kBufferBase + kBufferPerPeer * static_cast<uint64_t>(std::max(buffer_ranks - 1, 0));
    auto buf = d_.Alloc(c->buffer_bytes);
    if (!buf.ok()) {
      LOG_WARN("emulated NCCL: no memory for a communicator's buffers: {}", buf.status().message());
      return nullptr;
    }
    c->buffer = *buf;
    if (c->gpu >= 0 && c->gpu < kMaxGpus) internal_[static_cast<size_t>(c->gpu)] += c->buffer_bytes;
    std::lock_guard<std::mutex> lock(all_mu_);
    all_.push_back(c);
    return c;
  }
  ncclResult_t Adopt(std::shared_ptr<EmuComm> c, ncclComm_t* out, ncclConfig_t* config) {
    auto* raw = reinterpret_cast<ncclComm_t>(c.get());
    comms_[raw] = c;
    *out = raw;
    if (config != nullptr && config->blocking == 0) return c->state.load() == ncclInProgress ? ncclInProgress : ncclSuccess;
    if (c->worker.joinable()) c->worker.join();
    int s = c->state.load();
    return s == ncclSuccess ? ncclSuccess : static_cast<ncclResult_t>(s);
  }
  std::shared_ptr<EmuComm> Find(ncclComm_t comm) {
    auto it = comms_.find(comm);
    return it == comms_.end() ? nullptr : it->second;
  }
  ncclResult_t End(ncclComm_t comm, bool abort) {
    auto it = comms_.find(comm);
    if (it == comms_.end()) return ncclInvalidArgument;
    std::shared_ptr<EmuComm> c = it->second;
    comms_.erase(it);
    finalizing_.erase(comm);
    if (abort) {
      c->stop.store(true);
      c->SetFailed(ncclRemoteError, "aborted");
      if (c->mesh) {
        // Its own mesh ends with it; one its parent or children share is only woken.
        if (c->mesh.use_count() <= 1) c->mesh->Abort("the communicator was aborted");
        else c->mesh->Wake();
      }
    }
    if (c->buffer != 0) {
      (void)d_.Free(c->buffer);
      if (c->gpu >= 0 && c->gpu < kMaxGpus) internal_[static_cast<size_t>(c->gpu)] -= c->buffer_bytes;
      c->buffer = 0;
    }
    return ncclSuccess;  // work still queued holds the communicator until it ran
  }

  // Checks a call on `comm`: its state, the datatype, the operator. Fills `c` and `red`.
  ncclResult_t Check(ncclComm_t comm, ncclDataType_t t, const ncclRedOp_t* op, std::shared_ptr<EmuComm>* c, Reduction* red);
  // Host memory of an argument (`bytes` > 0), or nullptr when it is not the session's.
  std::byte* Host(const void* p, uint64_t bytes);
  ncclResult_t Enqueue(cudaStream_t stream, EmuOp op);
  // Checks, translates and enqueues the collective `how` (`op`: null for those without one;
  // `root`: ignored by those without one).
  ncclResult_t Collective(const CollectivePattern& how, const void* s, void* r, size_t n, ncclDataType_t t, const ncclRedOp_t* op,
                          int root, ncclComm_t comm, cudaStream_t st);
  // Checks, translates and enqueues a send (`send`) or receive of `buf` with rank `peer`.
  ncclResult_t PointToPoint(bool send, const void* buf, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st);
  ncclResult_t Submit(cudaStream_t stream, std::vector<EmuOp> ops);

  EmulatedDevice& d_;
  std::vector<std::unique_ptr<Root>> roots_;
  std::map<ncclComm_t, std::shared_ptr<EmuComm>> comms_;
  std::set<ncclComm_t> finalizing_;
  std::mutex all_mu_;
  std::vector<std::weak_ptr<EmuComm>> all_;          // every communicator made (AbortAll)
  std::vector<std::shared_ptr<EmuComm>> leavers_;    // NCCL_SPLIT_NOCOLOR exchanges
  std::array<std::atomic<uint64_t>, kMaxGpus> internal_{};
  uint64_t registrations_ = 0;
  // Device communicators' resource windows: each its emulated device buffer.
  struct ResourceWindow {
    std::unique_ptr<ncclWindow_vidmem> window;
    DevPtr buffer = 0;
    uint64_t bytes = 0;
    int gpu = 0;
  };
  std::map<ncclWindow_t, ResourceWindow> resource_windows_;
  int group_depth_ = 0;
  std::map<cudaStream_t, std::vector<EmuOp>> grouped_;
  ncclConfig_t nonblocking_ = [] {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 0;
    return c;
  }();

};

}  // namespace remora::worker::emu_nccl

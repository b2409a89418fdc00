// The emulated NCCL's collectives and point-to-point calls (host_lib_nccl.h). Each call is checked
// and its buffers translated on the executor's thread (a bad one fails the call, as NCCL's
// checks do), gets its sequence number there (so every rank numbers it alike), and runs in its
// stream's order as an EmuOp: `post` sends this rank's data, `complete` waits for the others'
// and writes the result. Every message goes to each rank that needs it directly (the emulation
// is for correctness, not bandwidth); reductions fold the contributions in rank order.
#include <cstring>

#include "worker/libs/host/host_lib_nccl.h"

namespace remora::worker::emu_nccl {
namespace {

Status Copy(std::byte* dst, const std::vector<std::byte>& got, uint64_t bytes) {
  if (got.size() != bytes)
    return Status(Domain::kNccl, ncclInvalidUsage, fmt::format("a rank sent {} bytes where {} were expected", got.size(), bytes));
  if (bytes > 0) std::memcpy(dst, got.data(), static_cast<size_t>(bytes));
  return Status::Ok();
}

}  // namespace

ncclResult_t HostNccl::Check(ncclComm_t comm, ncclDataType_t t, const ncclRedOp_t* op, std::shared_ptr<EmuComm>* c, Reduction* red) {
  *c = Find(comm);
  if (!*c) return ncclInvalidArgument;
  int s = (*c)->state.load();
  if (s == ncclInProgress) return ncclInvalidUsage;
  if (s != ncclSuccess) return static_cast<ncclResult_t>(s);
  if (TypeSize(t) == 0) return ncclInvalidArgument;
  if (op != nullptr) {
    int v = static_cast<int>(*op);
    if (v >= 0 && v < ncclNumOps) {
      red->op = *op;
    } else {
      auto it = (*c)->ops.find(v);
      if (it == (*c)->ops.end()) return ncclInvalidArgument;
      *red = it->second;
      auto dev = (*c)->device_scalars.find(v);
      if (dev != (*c)->device_scalars.end()) {
        // A device scalar is read when the collective runs, as on a GPU.
        const std::byte* p = dev->second;
        red->scalar.assign(p, p + TypeSize(t));
      }
    }
  }
  return ncclSuccess;
}

std::byte* HostNccl::Host(const void* p, uint64_t bytes) {
  if (bytes == 0) return nullptr;
  auto h = d_.Translate(reinterpret_cast<DevPtr>(p), bytes);
  return h.ok() ? *h : nullptr;
}

ncclResult_t HostNccl::Enqueue(cudaStream_t stream, EmuOp op) {
  if (group_depth_ > 0) {
    grouped_[stream].push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<EmuOp> one;
  one.push_back(std::move(op));
  return Submit(stream, std::move(one));
}

ncclResult_t HostNccl::Submit(cudaStream_t stream, std::vector<EmuOp> ops) {
  for (EmuOp& op : ops) op.comm->pending++;
  auto shared = std::make_shared<std::vector<EmuOp>>(std::move(ops));
  Status st = d_.InOrderBlocking(static_cast<DStream>(stream), [shared] {
    // Everything this rank sends first, then the waits: grouped calls never wait for each other.
    std::vector<bool> failed(shared->size(), false);
    for (size_t i = 0; i < shared->size(); i++) {
      EmuOp& op = (*shared)[i];
      Status s = op.comm->stop.load() ? Status(Domain::kNccl, ncclRemoteError, "aborted") : op.post();
      if (!s.ok()) {
        failed[i] = true;
        op.comm->SetFailed(s.domain() == Domain::kNccl ? static_cast<ncclResult_t>(s.raw()) : ncclSystemError, s.message());
      }
    }
    for (size_t i = 0; i < shared->size(); i++) {
      EmuOp& op = (*shared)[i];
      if (!failed[i]) {
        Status s = op.comm->stop.load() ? Status(Domain::kNccl, ncclRemoteError, "aborted") : op.complete();
        if (!s.ok())
          op.comm->SetFailed(s.domain() == Domain::kNccl ? static_cast<ncclResult_t>(s.raw()) : ncclSystemError, s.message());
      }
      op.comm->pending--;
    }
  });
  if (!st.ok()) {
    for (EmuOp& op : *shared) op.comm->pending--;
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// A collective as a pattern of messages: each sender sends every other receiver its block, and
// each receiver folds what the senders sent (its own block taken from its send buffer).
struct CollectivePattern {
  enum class Who : uint8_t { kAll, kRoot };
  enum class Fold : uint8_t { kReduce, kPlace };
  Who senders, receivers;
  bool send_blocks;  // the send buffer holds a block per receiver (rank j's at j * bytes), else one for all
  Fold fold;         // kReduce: the contributions, in rank order, reduce into the receive buffer
  bool recv_blocks;  // kPlace: the receive buffer holds a block per sender, else the one block
  bool rooted() const { return senders == Who::kRoot || receivers == Who::kRoot; }
};

namespace {

using Who = CollectivePattern::Who;
using Fold = CollectivePattern::Fold;
constexpr CollectivePattern kAllReduce{Who::kAll, Who::kAll, false, Fold::kReduce, false};
constexpr CollectivePattern kBroadcast{Who::kRoot, Who::kAll, false, Fold::kPlace, false};
constexpr CollectivePattern kReduce{Who::kAll, Who::kRoot, false, Fold::kReduce, false};
constexpr CollectivePattern kReduceScatter{Who::kAll, Who::kAll, true, Fold::kReduce, false};
constexpr CollectivePattern kAllGather{Who::kAll, Who::kAll, false, Fold::kPlace, true};
constexpr CollectivePattern kAlltoAll{Who::kAll, Who::kAll, true, Fold::kPlace, true};
constexpr CollectivePattern kGather{Who::kAll, Who::kRoot, false, Fold::kPlace, true};
constexpr CollectivePattern kScatter{Who::kRoot, Who::kAll, true, Fold::kPlace, false};

}  // namespace

ncclResult_t HostNccl::Collective(const CollectivePattern& how, const void* s, void* r, size_t n, ncclDataType_t t, const ncclRedOp_t* op,
                                  int root, ncclComm_t comm, cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, op, &c, &red); e != ncclSuccess) return e;
  if (how.rooted() && (root < 0 || root >= c->nranks)) return ncclInvalidArgument;
  auto is = [root](Who who, int rank) { return who == Who::kAll || rank == root; };
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  auto nr = static_cast<uint64_t>(c->nranks);
  // The buffers, translated: a NULL or foreign one where this rank needs it is an invalid argument.
  bool sends = is(how.senders, c->rank), receives = is(how.receivers, c->rank);
  std::byte* send = sends ? Host(s, how.send_blocks ? bytes * nr : bytes) : nullptr;
  if (sends && bytes > 0 && send == nullptr) return ncclInvalidArgument;
  std::byte* recv = receives ? Host(r, how.recv_blocks ? bytes * nr : bytes) : nullptr;
  if (receives && bytes > 0 && recv == nullptr) return ncclInvalidArgument;
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  // Rank j's block of `base` (a buffer with a block per rank), or `base` itself; NULL for a
  // buffer this rank does not use (a receiving-only rank's send buffer).
  auto block = [bytes](std::byte* base, bool blocks, int j) {
    return blocks && base != nullptr ? base + static_cast<uint64_t>(j) * bytes : base;
  };
  auto mesh_rank = [p](int j) { return p->world[static_cast<size_t>(j)]; };
  return Enqueue(st, EmuOp{c,
                           [=] {
                             if (!sends) return Status::Ok();
                             for (int j = 0; j < p->nranks; j++)
                               if (j != p->rank && is(how.receivers, j))
                                 RETURN_IF_ERROR(p->mesh->Send(mesh_rank(j), key, block(send, how.send_blocks, j), bytes));
                             return Status::Ok();
                           },
                           [=] {
                             if (!receives) return Status::Ok();
                             std::byte* mine = block(send, how.send_blocks, p->rank);
                             std::vector<std::vector<std::byte>> got(static_cast<size_t>(p->nranks));
                             std::vector<const void*> in(static_cast<size_t>(p->nranks));
                             for (int j = 0; j < p->nranks; j++) {
                               if (!is(how.senders, j)) continue;
                               if (how.fold == Fold::kReduce) {
                                 if (j == p->rank) {
                                   in[static_cast<size_t>(j)] = mine;
                                   continue;
                                 }
                                 auto& g = got[static_cast<size_t>(j)];
                                 ASSIGN_OR_RETURN(g, p->mesh->Receive(mesh_rank(j), key, &p->stop));
                                 if (g.size() != bytes) return Status(Domain::kNccl, ncclInvalidUsage, "ranks disagree on the count");
                                 in[static_cast<size_t>(j)] = g.data();
                                 continue;
                               }
                               std::byte* dst = block(recv, how.recv_blocks, j);
                               if (j == p->rank) {
                                 if (bytes > 0 && dst != mine) std::memmove(dst, mine, static_cast<size_t>(bytes));
                                 continue;
                               }
                               ASSIGN_OR_RETURN(auto g, p->mesh->Receive(mesh_rank(j), key, &p->stop));
                               RETURN_IF_ERROR(Copy(dst, g, bytes));
                             }
                             if (how.fold == Fold::kReduce) Reduce(recv, in, n, t, red, p->nranks);
                             return Status::Ok();
                           }});
}

ncclResult_t HostNccl::ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t st) {
  return Collective(kAllReduce, s, r, n, t, &op, -1, comm, st);
}

ncclResult_t HostNccl::ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) {
  return Collective(kBroadcast, s, r, n, t, nullptr, root, comm, st);
}

ncclResult_t HostNccl::ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t comm,
                                  cudaStream_t st) {
  return Collective(kReduce, s, r, n, t, &op, root, comm, st);
}

ncclResult_t HostNccl::ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t st) {
  return Collective(kReduceScatter, s, r, n, t, &op, -1, comm, st);
}

ncclResult_t HostNccl::ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) {
  return Collective(kAllGather, s, r, n, t, nullptr, -1, comm, st);
}

ncclResult_t HostNccl::ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) {
  return Collective(kAlltoAll, s, r, n, t, nullptr, -1, comm, st);
}

ncclResult_t HostNccl::ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) {
  return Collective(kGather, s, r, n, t, nullptr, root, comm, st);
}

ncclResult_t HostNccl::ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) {
  return Collective(kScatter, s, r, n, t, nullptr, root, comm, st);
}

ncclResult_t HostNccl::ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) {
  return PointToPoint(true, s, n, t, peer, comm, st);
}

ncclResult_t HostNccl::ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) {
  return PointToPoint(false, r, n, t, peer, comm, st);
}

ncclResult_t HostNccl::PointToPoint(bool send, const void* buf, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                                    cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, nullptr, &c, &red); e != ncclSuccess) return e;
  if (peer < 0 || peer >= c->nranks) return ncclInvalidArgument;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  std::byte* host = Host(buf, bytes);
  if (bytes > 0 && host == nullptr) return ncclInvalidArgument;
  std::vector<uint64_t>& seq = send ? c->send_seq : c->recv_seq;  // one sequence per direction and peer
  Key key{c->channel, kPointToPoint, seq[static_cast<size_t>(peer)]++};
  EmuComm* p = c.get();
  auto nothing = [] { return Status::Ok(); };
  if (send) return Enqueue(st, EmuOp{c, [=] { return p->mesh->Send(p->world[static_cast<size_t>(peer)], key, host, bytes); }, nothing});
  return Enqueue(st, EmuOp{c, nothing, [=] {
                             ASSIGN_OR_RETURN(auto got, p->mesh->Receive(p->world[static_cast<size_t>(peer)], key, &p->stop));
                             return Copy(host, got, bytes);
                           }});
}

}  // namespace remora::worker::emu_nccl

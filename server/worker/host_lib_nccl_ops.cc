// The emulated NCCL's collectives and point-to-point calls (host_lib_nccl.h). Each call is checked
// and its buffers translated on the executor's thread (a bad one fails the call, as NCCL's
// checks do), gets its sequence number there (so every rank numbers it alike), and runs in its
// stream's order as an EmuOp: `post` sends this rank's data, `complete` waits for the others'
// and writes the result. Every message goes to each rank that needs it directly (the emulation
// is for correctness, not bandwidth); reductions fold the contributions in rank order.
#include <cstring>

#include "worker/host_lib_nccl.h"

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

// The collective's buffers, translated: a NULL or foreign one where the call needs it is an
// invalid argument.
#define REMORA_EMU_BUFFER(var, ptr, bytes, needed)                   \
  std::byte* var = (needed) ? Host(ptr, bytes) : nullptr;             \
  if ((needed) && (bytes) > 0 && var == nullptr) return ncclInvalidArgument;

ncclResult_t HostNccl::ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, &op, &c, &red); e != ncclSuccess) return e;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes, true);
  REMORA_EMU_BUFFER(recv, r, bytes, true);
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c,
                           [=] {
                             for (int j = 0; j < p->nranks; j++)
                               if (j != p->rank) RETURN_IF_ERROR(p->mesh->Send(p->world[static_cast<size_t>(j)], key, send, bytes));
                             return Status::Ok();
                           },
                           [=] {
                             std::vector<std::vector<std::byte>> got(static_cast<size_t>(p->nranks));
                             std::vector<const void*> in(static_cast<size_t>(p->nranks));
                             for (int j = 0; j < p->nranks; j++) {
                               if (j == p->rank) {
                                 in[static_cast<size_t>(j)] = send;
                                 continue;
                               }
                               ASSIGN_OR_RETURN(got[static_cast<size_t>(j)], p->mesh->Receive(p->world[static_cast<size_t>(j)], key, &p->stop));
                               if (got[static_cast<size_t>(j)].size() != bytes) return Status(Domain::kNccl, ncclInvalidUsage, "ranks disagree on the count");
                               in[static_cast<size_t>(j)] = got[static_cast<size_t>(j)].data();
                             }
                             Reduce(recv, in, n, t, red, p->nranks);
                             return Status::Ok();
                           }});
}

ncclResult_t HostNccl::ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, nullptr, &c, &red); e != ncclSuccess) return e;
  if (root < 0 || root >= c->nranks) return ncclInvalidArgument;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes, c->rank == root);
  REMORA_EMU_BUFFER(recv, r, bytes, true);
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c,
                           [=] {
                             if (p->rank != root) return Status::Ok();
                             for (int j = 0; j < p->nranks; j++)
                               if (j != root) RETURN_IF_ERROR(p->mesh->Send(p->world[static_cast<size_t>(j)], key, send, bytes));
                             return Status::Ok();
                           },
                           [=] {
                             if (p->rank == root) {
                               if (bytes > 0 && recv != send) std::memmove(recv, send, static_cast<size_t>(bytes));
                               return Status::Ok();
                             }
                             ASSIGN_OR_RETURN(auto got, p->mesh->Receive(p->world[static_cast<size_t>(root)], key, &p->stop));
                             return Copy(recv, got, bytes);
                           }});
}

ncclResult_t HostNccl::ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t comm,
                                  cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, &op, &c, &red); e != ncclSuccess) return e;
  if (root < 0 || root >= c->nranks) return ncclInvalidArgument;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes, true);
  REMORA_EMU_BUFFER(recv, r, bytes, c->rank == root);
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c,
                           [=] {
                             if (p->rank == root) return Status::Ok();
                             return p->mesh->Send(p->world[static_cast<size_t>(root)], key, send, bytes);
                           },
                           [=] {
                             if (p->rank != root) return Status::Ok();
                             std::vector<std::vector<std::byte>> got(static_cast<size_t>(p->nranks));
                             std::vector<const void*> in(static_cast<size_t>(p->nranks));
                             for (int j = 0; j < p->nranks; j++) {
                               if (j == p->rank) {
                                 in[static_cast<size_t>(j)] = send;
                                 continue;
                               }
                               ASSIGN_OR_RETURN(got[static_cast<size_t>(j)], p->mesh->Receive(p->world[static_cast<size_t>(j)], key, &p->stop));
                               if (got[static_cast<size_t>(j)].size() != bytes) return Status(Domain::kNccl, ncclInvalidUsage, "ranks disagree on the count");
                               in[static_cast<size_t>(j)] = got[static_cast<size_t>(j)].data();
                             }
                             Reduce(recv, in, n, t, red, p->nranks);
                             return Status::Ok();
                           }});
}

ncclResult_t HostNccl::ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, &op, &c, &red); e != ncclSuccess) return e;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes * static_cast<uint64_t>(c->nranks), true);
  REMORA_EMU_BUFFER(recv, r, bytes, true);
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c,
                           [=] {
                             for (int j = 0; j < p->nranks; j++)
                               if (j != p->rank)
                                 RETURN_IF_ERROR(p->mesh->Send(p->world[static_cast<size_t>(j)], key, send + static_cast<uint64_t>(j) * bytes, bytes));
                             return Status::Ok();
                           },
                           [=] {
                             std::vector<std::vector<std::byte>> got(static_cast<size_t>(p->nranks));
                             std::vector<const void*> in(static_cast<size_t>(p->nranks));
                             for (int j = 0; j < p->nranks; j++) {
                               if (j == p->rank) {
                                 in[static_cast<size_t>(j)] = send + static_cast<uint64_t>(j) * bytes;
                                 continue;
                               }
                               ASSIGN_OR_RETURN(got[static_cast<size_t>(j)], p->mesh->Receive(p->world[static_cast<size_t>(j)], key, &p->stop));
                               if (got[static_cast<size_t>(j)].size() != bytes) return Status(Domain::kNccl, ncclInvalidUsage, "ranks disagree on the count");
                               in[static_cast<size_t>(j)] = got[static_cast<size_t>(j)].data();
                             }
                             Reduce(recv, in, n, t, red, p->nranks);
                             return Status::Ok();
                           }});
}

ncclResult_t HostNccl::ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, nullptr, &c, &red); e != ncclSuccess) return e;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes, true);
  REMORA_EMU_BUFFER(recv, r, bytes * static_cast<uint64_t>(c->nranks), true);
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c,
                           [=] {
                             for (int j = 0; j < p->nranks; j++)
                               if (j != p->rank) RETURN_IF_ERROR(p->mesh->Send(p->world[static_cast<size_t>(j)], key, send, bytes));
                             return Status::Ok();
                           },
                           [=] {
                             for (int j = 0; j < p->nranks; j++) {
                               std::byte* dst = recv + static_cast<uint64_t>(j) * bytes;
                               if (j == p->rank) {
                                 if (bytes > 0 && dst != send) std::memmove(dst, send, static_cast<size_t>(bytes));
                                 continue;
                               }
                               ASSIGN_OR_RETURN(auto got, p->mesh->Receive(p->world[static_cast<size_t>(j)], key, &p->stop));
                               RETURN_IF_ERROR(Copy(dst, got, bytes));
                             }
                             return Status::Ok();
                           }});
}

ncclResult_t HostNccl::ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, nullptr, &c, &red); e != ncclSuccess) return e;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes * static_cast<uint64_t>(c->nranks), true);
  REMORA_EMU_BUFFER(recv, r, bytes * static_cast<uint64_t>(c->nranks), true);
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c,
                           [=] {
                             for (int j = 0; j < p->nranks; j++)
                               if (j != p->rank)
                                 RETURN_IF_ERROR(p->mesh->Send(p->world[static_cast<size_t>(j)], key, send + static_cast<uint64_t>(j) * bytes, bytes));
                             return Status::Ok();
                           },
                           [=] {
                             uint64_t me = static_cast<uint64_t>(p->rank) * bytes;
                             if (bytes > 0 && recv + me != send + me) std::memmove(recv + me, send + me, static_cast<size_t>(bytes));
                             for (int j = 0; j < p->nranks; j++) {
                               if (j == p->rank) continue;
                               ASSIGN_OR_RETURN(auto got, p->mesh->Receive(p->world[static_cast<size_t>(j)], key, &p->stop));
                               RETURN_IF_ERROR(Copy(recv + static_cast<uint64_t>(j) * bytes, got, bytes));
                             }
                             return Status::Ok();
                           }});
}

ncclResult_t HostNccl::ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, nullptr, &c, &red); e != ncclSuccess) return e;
  if (root < 0 || root >= c->nranks) return ncclInvalidArgument;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes, true);
  REMORA_EMU_BUFFER(recv, r, bytes * static_cast<uint64_t>(c->nranks), c->rank == root);
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c,
                           [=] {
                             if (p->rank == root) return Status::Ok();
                             return p->mesh->Send(p->world[static_cast<size_t>(root)], key, send, bytes);
                           },
                           [=] {
                             if (p->rank != root) return Status::Ok();
                             for (int j = 0; j < p->nranks; j++) {
                               std::byte* dst = recv + static_cast<uint64_t>(j) * bytes;
                               if (j == root) {
                                 if (bytes > 0 && dst != send) std::memmove(dst, send, static_cast<size_t>(bytes));
                                 continue;
                               }
                               ASSIGN_OR_RETURN(auto got, p->mesh->Receive(p->world[static_cast<size_t>(j)], key, &p->stop));
                               RETURN_IF_ERROR(Copy(dst, got, bytes));
                             }
                             return Status::Ok();
                           }});
}

ncclResult_t HostNccl::ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, nullptr, &c, &red); e != ncclSuccess) return e;
  if (root < 0 || root >= c->nranks) return ncclInvalidArgument;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes * static_cast<uint64_t>(c->nranks), c->rank == root);
  REMORA_EMU_BUFFER(recv, r, bytes, true);
  Key key{c->channel, kCollective, c->coll_seq++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c,
                           [=] {
                             if (p->rank != root) return Status::Ok();
                             for (int j = 0; j < p->nranks; j++)
                               if (j != root)
                                 RETURN_IF_ERROR(p->mesh->Send(p->world[static_cast<size_t>(j)], key, send + static_cast<uint64_t>(j) * bytes, bytes));
                             return Status::Ok();
                           },
                           [=] {
                             if (p->rank == root) {
                               std::byte* mine = send + static_cast<uint64_t>(root) * bytes;
                               if (bytes > 0 && recv != mine) std::memmove(recv, mine, static_cast<size_t>(bytes));
                               return Status::Ok();
                             }
                             ASSIGN_OR_RETURN(auto got, p->mesh->Receive(p->world[static_cast<size_t>(root)], key, &p->stop));
                             return Copy(recv, got, bytes);
                           }});
}

ncclResult_t HostNccl::ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, nullptr, &c, &red); e != ncclSuccess) return e;
  if (peer < 0 || peer >= c->nranks) return ncclInvalidArgument;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(send, s, bytes, true);
  Key key{c->channel, kPointToPoint, c->send_seq[static_cast<size_t>(peer)]++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c, [=] { return p->mesh->Send(p->world[static_cast<size_t>(peer)], key, send, bytes); },
                           [] { return Status::Ok(); }});
}

ncclResult_t HostNccl::ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) {
  std::shared_ptr<EmuComm> c;
  Reduction red;
  if (ncclResult_t e = Check(comm, t, nullptr, &c, &red); e != ncclSuccess) return e;
  if (peer < 0 || peer >= c->nranks) return ncclInvalidArgument;
  uint64_t bytes = n * static_cast<uint64_t>(TypeSize(t));
  REMORA_EMU_BUFFER(recv, r, bytes, true);
  Key key{c->channel, kPointToPoint, c->recv_seq[static_cast<size_t>(peer)]++};
  EmuComm* p = c.get();
  return Enqueue(st, EmuOp{c, [] { return Status::Ok(); },
                           [=] {
                             ASSIGN_OR_RETURN(auto got, p->mesh->Receive(p->world[static_cast<size_t>(peer)], key, &p->stop));
                             return Copy(recv, got, bytes);
                           }});
}

#undef REMORA_EMU_BUFFER

}  // namespace remora::worker::emu_nccl

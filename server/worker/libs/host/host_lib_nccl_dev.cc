// The host backend's emulation of NCCL 2.28's device API (host_lib_nccl.h), so that CI tests
// Remora's plumbing of it: out-handles, out-pointers, device communicators and their registry.
// The values are emulated, not NCCL's layout (sizes, handles and offsets are the emulation's
// own; no kernel of the device API runs on emulated GPUs). Teams: emulated GPUs reach each
// other over TCP only, never by load/store, so each rank is an LSA team of its own (size 1) and
// the rail team is the world, which is what NCCL answers for ranks on separate nodes.
#include <cstring>

#include "worker/libs/host/host_lib_nccl.h"

namespace remora::worker::emu_nccl {
namespace {

constexpr uint64_t kResourceAlign = 128;  // a resource handle counts units of this

uint64_t AlignUp(uint64_t v, uint64_t a) { return a == 0 ? v : (v + a - 1) / a * a; }

}  // namespace

ncclResult_t HostNccl::ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;  // the release whose device structs Remora was built with
  return ncclSuccess;
}

ncclTeam_t HostNccl::ncclTeamWorld(ncclComm_t comm) {
  auto c = Find(comm);
  return c ? ncclTeam_t{c->nranks, c->rank, 1} : ncclTeam_t{};
}

ncclTeam_t HostNccl::ncclTeamLsa(ncclComm_t comm) { return Find(comm) ? ncclTeam_t{1, 0, 1} : ncclTeam_t{}; }

ncclTeam_t HostNccl::ncclTeamRail(ncclComm_t comm) {
  auto c = Find(comm);
  return c ? ncclTeam_t{c->nranks, c->rank, 1} : ncclTeam_t{};  // (world / LSA size 1)
}

int HostNccl::ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  auto c = Find(comm);
  return c ? c->rank + (rank - team.rank) * team.stride : -1;
}

int HostNccl::ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  return Find(comm) ? (rank - team.rank) * team.stride : -1;  // this rank is LSA rank 0
}

int HostNccl::ncclLLA2ACalcSlots(int max_elts, int max_elt_size) {
  if (max_elts < 0 || max_elt_size < 0) return -1;
  return max_elts * ((max_elt_size + 15) / 16);  // one 16-byte slot per started 16 bytes
}

ncclResult_t HostNccl::ncclLsaBarrierCreateRequirement(ncclTeam_t team, int n, ncclLsaBarrierHandle_t* h,
                                                       ncclDevResourceRequirements_t* req) {
  if (h == nullptr || req == nullptr || n < 0 || team.nRanks < 0) return ncclInvalidArgument;
  std::memset(req, 0, sizeof(*req));
  h->nBarriers = n;
  req->bufferSize = static_cast<size_t>(n) * static_cast<size_t>(team.nRanks + 1) * 8;
  req->bufferAlign = 8;
  req->outBufferHandle = &h->bufHandle;
  return ncclSuccess;
}

ncclResult_t HostNccl::ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t, int n, ncclGinBarrierHandle_t* h,
                                                       ncclDevResourceRequirements_t* req) {
  if (!Find(comm) || h == nullptr || req == nullptr || n < 0) return ncclInvalidArgument;
  std::memset(req, 0, sizeof(*req));
  req->bufferSize = static_cast<size_t>(n) * 8;
  req->bufferAlign = 8;
  req->outBufferHandle = &h->bufHandle;
  req->ginSignalCount = n;
  req->outGinSignalStart = &h->signal0;
  return ncclSuccess;
}

ncclResult_t HostNccl::ncclLLA2ACreateRequirement(int blocks, int slots, ncclLLA2AHandle_t* h,
                                                  ncclDevResourceRequirements_t* req) {
  if (h == nullptr || req == nullptr || blocks < 0 || slots < 0) return ncclInvalidArgument;
  std::memset(req, 0, sizeof(*req));
  h->nSlots = static_cast<uint32_t>(slots);
  req->bufferSize = static_cast<size_t>(blocks) * static_cast<size_t>(slots) * 16;
  req->bufferAlign = 16;
  req->outBufferHandle = &h->bufHandle;
  return ncclSuccess;
}

ncclResult_t HostNccl::ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements_t* reqs, ncclDevComm_t* out) {
  auto c = Find(comm);
  if (!c || reqs == nullptr || out == nullptr) return ncclInvalidArgument;
  if (c->state.load() != ncclSuccess) return ncclInvalidUsage;
  for (const ncclTeamRequirements_t* t = reqs->teamRequirementsList; t != nullptr; t = t->next)
    if (t->multimem) return ncclInvalidUsage;  // emulated GPUs have no multicast memory
  if (reqs->lsaMultimem) return ncclInvalidUsage;
  // The resources one after another, each at its alignment; signals and counters after the
  // ones the requirements ask for themselves.
  uint64_t bytes = 0;
  uint32_t signals = static_cast<uint32_t>(std::max(reqs->ginSignalCount, 0));
  uint32_t counters = static_cast<uint32_t>(std::max(reqs->ginCounterCount, 0));
  for (const ncclDevResourceRequirements_t* r = reqs->resourceRequirementsList; r != nullptr; r = r->next) {
    bytes = AlignUp(bytes, std::max<uint64_t>(kResourceAlign, r->bufferAlign));
    if (r->outBufferHandle) *r->outBufferHandle = static_cast<uint32_t>(bytes / kResourceAlign);
    if (r->outGinSignalStart) *r->outGinSignalStart = signals;
    if (r->outGinCounterStart) *r->outGinCounterStart = counters;
    bytes += r->bufferSize;
    signals += static_cast<uint32_t>(std::max(r->ginSignalCount, 0));
    counters += static_cast<uint32_t>(std::max(r->ginCounterCount, 0));
    if (bytes > (1ull << 32)) return ncclInvalidArgument;
  }
  std::memset(static_cast<void*>(out), 0, sizeof(*out));
  out->rank = c->rank;
  out->nRanks = c->nranks;
  out->lsaRank = 0;
  out->lsaSize = 1;
  out->ginSignalCount = static_cast<int>(signals);
  out->ginCounterCount = static_cast<int>(counters);
  if (bytes > 0) {
    bytes = AlignUp(bytes, kResourceAlign);
    auto buf = d_.Alloc(bytes);
    if (!buf.ok()) return ncclSystemError;
    ResourceWindow w;
    w.window = std::make_unique<ncclWindow_vidmem>();
    std::memset(static_cast<void*>(w.window.get()), 0, sizeof(ncclWindow_vidmem));
    w.window->lsaFlatBase = reinterpret_cast<char*>(static_cast<uintptr_t>(*buf));
    w.window->worldRank = c->rank;
    w.buffer = *buf;
    w.bytes = bytes;
    w.gpu = c->gpu;
    out->resourceWindow = w.window.get();
    out->resourceWindow_inlined = *w.window;
    if (c->gpu >= 0 && c->gpu < kMaxGpus) internal_[static_cast<size_t>(c->gpu)] += bytes;
    resource_windows_[out->resourceWindow] = std::move(w);
  }
  return ncclSuccess;
}

ncclResult_t HostNccl::ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm_t* dev) {
  if (!Find(comm) || dev == nullptr) return ncclInvalidArgument;
  if (dev->resourceWindow == nullptr) return ncclSuccess;
  auto it = resource_windows_.find(dev->resourceWindow);
  if (it == resource_windows_.end()) return ncclInvalidArgument;
  (void)d_.Free(it->second.buffer);
  if (it->second.gpu >= 0 && it->second.gpu < kMaxGpus) internal_[static_cast<size_t>(it->second.gpu)] -= it->second.bytes;
  resource_windows_.erase(it);
  return ncclSuccess;
}

}  // namespace remora::worker::emu_nccl

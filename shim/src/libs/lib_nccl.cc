// NCCL in the client: the answers given locally (version, error strings, a communicator's size,
// rank and device), the mirror of the process's communicators, the description's size hooks and
// checks, groups, and ncclMemAlloc (lib_nccl.h). The communicator calls are lib_nccl_comm.cc.
#include "lib_nccl.h"

#include <cuda.h>
#include <pthread.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "lib_objects.h"
#include "nccl_client.h"
#include "nccl_types.h"
#include "process.h"
#include "remora/base/log.h"
#include "runtime.h"
#include "thread_slot.h"

namespace remora::gen::nccl {
namespace {

struct Mirror {
  CommMirror comm;
  std::set<int> ops;
};

struct Comms {
  std::mutex mu;
  std::unordered_map<uint64_t, Mirror> map;
};

Comms& TheComms() {
  static Comms* c = new Comms();  // never destroyed: NCCL calls come from exit handlers
  return *c;
}

// The thread's group (ncclGroupStart..End).
struct Group {
  int depth = 0;
  shim::CallBatch batch;
  bool waits = false;        // an init or split a blocking application waits for
  bool nonblocking = false;  // work of a non-blocking communicator
  std::vector<uint64_t> created;  // communicators made in the group (forgotten if it fails)
  ncclResult_t error = ncclSuccess;
  void Reset() {
    depth = 0;
    batch.calls.clear();
    waits = nonblocking = false;
    created.clear();
    error = ncclSuccess;
    if (shim::ThreadCallBatch() == &batch) shim::ThreadCallBatch() = nullptr;
  }
};
Group& ThreadGroup() { return shim::ThreadSlot<Group>(); }

struct LastError {
  std::string text;
};

// A forked child holds none of its parent's communicators (the session is the parent's).
void AfterFork() {
  Comms& c = TheComms();
  new (&c.mu) std::mutex();
  c.map.clear();
  ThreadGroup().Reset();
}
[[maybe_unused]] const int kForkHook = pthread_atfork(nullptr, nullptr, &AfterFork);

Status Invalid(shim::RemoteCall& c, const char* what) { return c.Fail(ncclInvalidArgument, what); }

// What every collective and point-to-point call checks: the communicator and the datatype.
Status CheckCommon(shim::RemoteCall& c, ncclComm_t comm, ncclDataType_t type, CommMirror* m) {
  if (comm == nullptr) return Invalid(c, "comm is NULL");
  if (!FindComm(CommId(comm), m)) return Invalid(c, "comm is not a communicator of this process (destroyed or aborted?)");
  if (api::NcclTypeSize(type) == 0) return Invalid(c, "datatype is not an NCCL datatype");
  if (m->failed != ncclSuccess)
    return c.Fail(m->failed, "the communicator failed (ncclCommGetAsyncError said so): abort or destroy it");
  return Status::Ok();
}

Status CheckOp(shim::RemoteCall& c, ncclComm_t comm, ncclRedOp_t op) {
  int v = static_cast<int>(op);
  if (v >= 0 && v < ncclNumOps) return Status::Ok();
  if (HasRedOp(CommId(comm), v)) return Status::Ok();
  return Invalid(c, "op is not a reduction operator of this communicator");
}

Status CheckRank(shim::RemoteCall& c, const CommMirror& m, int rank, const char* what) {
  if (m.nranks > 0 && (rank < 0 || rank >= m.nranks))
    return c.Fail(ncclInvalidArgument, fmt::format("{} {} is not a rank of the communicator (size {})", what, rank, m.nranks).c_str());
  return Status::Ok();
}

}  // namespace

// ---- size hooks ------------------------------------------------------------------------------

uint64_t Bytes(ncclDataType_t type, size_t count) { return Bytes(type, count, 1); }

uint64_t Bytes(ncclDataType_t type, size_t count, int ranks) {
  uint64_t n = static_cast<uint64_t>(api::NcclTypeSize(type));
  uint64_t r = ranks < 0 ? 0 : static_cast<uint64_t>(ranks);
  uint64_t out = 0;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(count), &out) || __builtin_mul_overflow(out, r, &out)) return UINT64_MAX;
  return out;
}

int Ranks(ncclComm_t comm) {
  CommMirror m;
  return FindComm(CommId(comm), &m) ? m.nranks : 0;
}

uint64_t AtRoot(ncclComm_t comm, int root, uint64_t bytes) {
  CommMirror m;
  return FindComm(CommId(comm), &m) && m.rank == root ? bytes : 0;
}

// ---- checks ----------------------------------------------------------------------------------

Status NcclCheck(shim::RemoteCall& c, const void*, void*, size_t, ncclDataType_t datatype, ncclRedOp_t op,
                 ncclComm_t comm, cudaStream_t) {
  CommMirror m;
  RETURN_IF_ERROR(CheckCommon(c, comm, datatype, &m));
  return CheckOp(c, comm, op);
}

Status NcclCheck(shim::RemoteCall& c, const void*, void*, size_t, ncclDataType_t datatype, int root, ncclComm_t comm,
                 cudaStream_t) {
  CommMirror m;
  RETURN_IF_ERROR(CheckCommon(c, comm, datatype, &m));
  return CheckRank(c, m, root, "root");
}

Status NcclCheck(shim::RemoteCall& c, void*, size_t, ncclDataType_t datatype, int rank, ncclComm_t comm, cudaStream_t) {
  CommMirror m;
  RETURN_IF_ERROR(CheckCommon(c, comm, datatype, &m));
  return CheckRank(c, m, rank, "root or peer");
}

Status NcclCheck(shim::RemoteCall& c, const void*, size_t, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t) {
  CommMirror m;
  RETURN_IF_ERROR(CheckCommon(c, comm, datatype, &m));
  return CheckRank(c, m, peer, "peer");
}

Status NcclCheck(shim::RemoteCall& c, const void*, void*, size_t, ncclDataType_t datatype, ncclRedOp_t op, int root,
                 ncclComm_t comm, cudaStream_t) {
  CommMirror m;
  RETURN_IF_ERROR(CheckCommon(c, comm, datatype, &m));
  RETURN_IF_ERROR(CheckOp(c, comm, op));
  return CheckRank(c, m, root, "root");
}

Status NcclCheck(shim::RemoteCall& c, const void*, void*, size_t, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t) {
  CommMirror m;
  return CheckCommon(c, comm, datatype, &m);
}

// ---- the mirror ------------------------------------------------------------------------------

void MirrorComm(uint64_t id, const CommMirror& m) {
  Comms& c = TheComms();
  std::lock_guard<std::mutex> lock(c.mu);
  c.map[id].comm = m;
}

bool FindComm(uint64_t id, CommMirror* out) {
  Comms& c = TheComms();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(id);
  if (it == c.map.end()) return false;
  *out = it->second.comm;
  return true;
}

void UpdateComm(uint64_t id, int nranks, int rank) {
  Comms& c = TheComms();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(id);
  if (it == c.map.end() || nranks <= 0) return;
  it->second.comm.nranks = nranks;
  it->second.comm.rank = rank;
}

void CommState(uint64_t id, ncclResult_t state) {
  if (state == ncclSuccess || state == ncclInProgress) return;
  Comms& c = TheComms();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(id);
  if (it != c.map.end()) it->second.comm.failed = state;
}

void ForgetComm(uint64_t id) {
  {
    Comms& c = TheComms();
    std::lock_guard<std::mutex> lock(c.mu);
    c.map.erase(id);
  }
  shim::Process::Get().lib_objects().Remove(id);
}

void AddRedOp(uint64_t comm, int op) {
  Comms& c = TheComms();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(comm);
  if (it != c.map.end()) it->second.ops.insert(op);
}

void RemoveRedOp(uint64_t comm, int op) {
  Comms& c = TheComms();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(comm);
  if (it != c.map.end()) it->second.ops.erase(op);
}

bool HasRedOp(uint64_t comm, int op) {
  Comms& c = TheComms();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(comm);
  return it != c.map.end() && it->second.ops.count(op) > 0;
}

// ---- groups ----------------------------------------------------------------------------------

bool InGroup() { return ThreadGroup().depth > 0; }

void JoinGroup(const shim::RemoteCall& c, int device, uint32_t function, bool waits, bool nonblocking, uint64_t created) {
  Group& g = ThreadGroup();
  g.batch.calls.push_back(shim::CallBatch::Call{device, function, c.args()});
  g.waits |= waits;
  g.nonblocking |= nonblocking;
  if (created != 0) g.created.push_back(created);
}

void FailGroup(ncclResult_t r) {
  Group& g = ThreadGroup();
  if (g.error == ncclSuccess) g.error = r;
}

void SetLastError(const std::string& what) { shim::ThreadSlot<LastError>().text = what; }

namespace {

// Sends the group's calls: one message per server, in the order they were made.
Status SendGroup(Group& g) {
  shim::Runtime& rt = shim::Runtime::Get();
  std::vector<bool> sent(g.batch.calls.size(), false);
  for (size_t first = 0; first < g.batch.calls.size(); first++) {
    if (sent[first]) continue;
    int device = g.batch.calls[first].device;
    shim::RemoteCall c(shim::CallCtx{false, "ncclGroupEnd"}, kLibrary, g.waits ? k_remoraNcclGroupWait : k_remoraNcclGroup,
                       g.waits ? shim::CallClass::kSync : shim::CallClass::kOrdered, Domain::kNccl);
    RETURN_IF_ERROR(c.OnDevice(device));
    std::vector<const shim::CallBatch::Call*> mine;
    for (size_t i = first; i < g.batch.calls.size(); i++) {
      if (sent[i] || !rt.SameServer(device, g.batch.calls[i].device)) continue;
      sent[i] = true;
      mine.push_back(&g.batch.calls[i]);
    }
    c.Put<uint64_t>(mine.size());
    for (const shim::CallBatch::Call* call : mine) {
      c.Put<uint32_t>(call->function);
      c.PutArray(call->args.data(), call->args.size(), 1);
    }
    RETURN_IF_ERROR(c.Invoke());
  }
  return Status::Ok();
}

}  // namespace

}  // namespace remora::gen::nccl

namespace remora::shim {

uint32_t NcclFinish(Domain caller, const LibCodes& codes, const Status& st, const char* call) {
  uint32_t r = FinishLib(caller, codes, st, call);
  if (r != ncclSuccess && r != ncclInProgress) {
    gen::nccl::SetLastError(st.message());
    // A call of a group that fails fails the group too, as in NCCL (its end answers it).
    if (gen::nccl::InGroup()) gen::nccl::FailGroup(static_cast<ncclResult_t>(r));
  }
  return r;
}

}  // namespace remora::shim

// ---- exported functions answered here --------------------------------------------------------

using namespace remora;
using namespace remora::gen::nccl;

namespace {
constexpr shim::LibCodes kCodes{ncclSuccess, ncclInvalidArgument, ncclSystemError, ncclInvalidUsage, ncclSystemError,
                                ncclInternalError};
ncclResult_t Finish(const Status& st, const char* call) {
  return static_cast<ncclResult_t>(shim::NcclFinish(Domain::kNccl, kCodes, st, call));
}
}  // namespace

extern "C" ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;  // the nccl.h this library implements
  return ncclSuccess;
}

extern "C" const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

extern "C" const char* ncclGetLastError(ncclComm_t) { return shim::ThreadSlot<LastError>().text.c_str(); }

extern "C" void ncclResetDebugInit() {}
extern "C" void ncclResetDebugInitInternal() {}

namespace {
ncclResult_t CommQuery(ncclComm_t comm, int* out, const char* call, int CommMirror::*field) {
  if (comm == nullptr || out == nullptr) return Finish(Status(Domain::kNccl, ncclInvalidArgument, fmt::format("{}: a NULL argument", call)), call);
  CommMirror m;
  if (!FindComm(CommId(comm), &m))
    return Finish(Status(Domain::kNccl, ncclInvalidArgument, fmt::format("{}: not a communicator of this process", call)), call);
  if (m.nranks <= 0 && field != &CommMirror::device) {
    // A split or shrink still in progress (non-blocking): ask the worker, which knows once done.
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (!FindComm(CommId(comm), &m) || m.nranks <= 0) return ncclInProgress;
  }
  *out = m.*field;
  return ncclSuccess;
}
}  // namespace

extern "C" ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) { return CommQuery(comm, count, "ncclCommCount", &CommMirror::nranks); }
extern "C" ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) { return CommQuery(comm, rank, "ncclCommUserRank", &CommMirror::rank); }
extern "C" ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return CommQuery(comm, device, "ncclCommCuDevice", &CommMirror::device);
}

extern "C" ncclResult_t ncclGroupStart() {
  Group& g = ThreadGroup();
  if (g.depth++ == 0) {
    g.batch.library = kLibrary;
    shim::ThreadCallBatch() = &g.batch;
  }
  return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd() {
  Group& g = ThreadGroup();
  if (g.depth == 0) return Finish(Status(Domain::kNccl, ncclInvalidUsage, "ncclGroupEnd: not in a group"), "ncclGroupEnd");
  if (--g.depth > 0) return ncclSuccess;
  shim::ThreadCallBatch() = nullptr;
  if (g.error != ncclSuccess) {
    // A call of the group was refused: NCCL's group end answers it and launches nothing.
    ncclResult_t r = g.error;
    for (uint64_t id : g.created) ForgetComm(id);
    g.Reset();
    return r;
  }
  bool answer_in_progress = g.nonblocking && !g.created.empty();
  Status st = g.batch.calls.empty() ? Status::Ok() : SendGroup(g);
  if (!st.ok()) {
    for (uint64_t id : g.created) ForgetComm(id);
    g.Reset();
    return Finish(st, "ncclGroupEnd");
  }
  // A blocking group's new communicators are ready: their sizes and ranks are the worker's.
  g.Reset();
  return answer_in_progress ? ncclInProgress : ncclSuccess;
}

extern "C" ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  // NCCL's simulation (a group's estimated time, nothing launched) is not served: the worker's
  // communicators are non-blocking, for which NCCL launches a simulated group anyway. The group
  // ends here, discarded, as a simulation leaves nothing behind.
  Group& g = ThreadGroup();
  if (g.depth == 0) return Finish(Status(Domain::kNccl, ncclInvalidUsage, "ncclGroupSimulateEnd: not in a group"), "ncclGroupSimulateEnd");
  if (--g.depth > 0) return ncclSuccess;
  shim::ThreadCallBatch() = nullptr;
  for (uint64_t id : g.created) ForgetComm(id);
  g.Reset();
  (void)simInfo;
  return static_cast<ncclResult_t>(shim::NotSupported(Domain::kNccl, ncclInvalidUsage, "ncclGroupSimulateEnd"));
}

namespace {

// ncclMemAlloc's allocations: physical memory mapped at a reserved range, as NCCL makes them
// (symmetric window registration retains the allocation handle of the memory: cudaMalloc's
// has none). Every call below is remoted: the server holds the memory, charged to the tenant.
struct VmmAllocation {
  CUmemGenericAllocationHandle handle = 0;
  size_t size = 0;
};
struct VmmAllocations {
  std::mutex mu;
  std::map<CUdeviceptr, VmmAllocation> map;
};
VmmAllocations& TheVmm() {
  static auto* v = new VmmAllocations();  // never destroyed: NCCL calls come from exit handlers
  return *v;
}

ncclResult_t VmmFail(CUresult r, const char* step, size_t size) {
  const char* text = nullptr;
  (void)::cuGetErrorString(r, &text);
  return Finish(Status(Domain::kNccl, r == CUDA_ERROR_OUT_OF_MEMORY ? ncclSystemError : ncclUnhandledCudaError,
                       fmt::format("ncclMemAlloc of {} bytes: {}: {}", size, step, text ? text : "a CUDA error")),
                "ncclMemAlloc");
}

}  // namespace

extern "C" ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return Finish(Status(Domain::kNccl, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL"), "ncclMemAlloc");
  if (size == 0) {
    *ptr = nullptr;
    return ncclSuccess;
  }
  int device = 0;
  if (::cudaGetDevice(&device) != cudaSuccess) device = 0;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // as NCCL asks (peers import it)
  size_t gran = 0;
  CUresult r = ::cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || gran == 0) return VmmFail(r, "cuMemGetAllocationGranularity", size);
  const size_t bytes = (size + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h = 0;
  if ((r = ::cuMemCreate(&h, bytes, &prop, 0)) != CUDA_SUCCESS) return VmmFail(r, "cuMemCreate", size);
  CUdeviceptr p = 0;
  if ((r = ::cuMemAddressReserve(&p, bytes, gran, 0, 0)) != CUDA_SUCCESS) {
    (void)::cuMemRelease(h);
    return VmmFail(r, "cuMemAddressReserve", size);
  }
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((r = ::cuMemMap(p, bytes, 0, h, 0)) != CUDA_SUCCESS || (r = ::cuMemSetAccess(p, bytes, &access, 1)) != CUDA_SUCCESS) {
    (void)::cuMemUnmap(p, bytes);
    (void)::cuMemAddressFree(p, bytes);
    (void)::cuMemRelease(h);
    return VmmFail(r, "cuMemMap/cuMemSetAccess", size);
  }
  {
    std::lock_guard<std::mutex> lock(TheVmm().mu);
    TheVmm().map[p] = VmmAllocation{h, bytes};
  }
  *ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  return ncclSuccess;
}

extern "C" ncclResult_t ncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  const auto p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
  VmmAllocation a;
  {
    std::lock_guard<std::mutex> lock(TheVmm().mu);
    auto it = TheVmm().map.find(p);
    if (it == TheVmm().map.end())
      return Finish(Status(Domain::kNccl, ncclInvalidArgument, "ncclMemFree: not memory ncclMemAlloc returned"), "ncclMemFree");
    a = it->second;
    TheVmm().map.erase(it);
  }
  CUresult r = ::cuMemUnmap(p, a.size);
  CUresult r2 = ::cuMemRelease(a.handle);
  CUresult r3 = ::cuMemAddressFree(p, a.size);
  if (r == CUDA_SUCCESS) r = r2 != CUDA_SUCCESS ? r2 : r3;
  if (r == CUDA_SUCCESS) return ncclSuccess;
  const char* text = nullptr;
  (void)::cuGetErrorString(r, &text);
  return Finish(Status(Domain::kNccl, ncclUnhandledCudaError, fmt::format("ncclMemFree: {}", text ? text : "a CUDA error")),
                "ncclMemFree");
}

// The profiling names (pnccl*) of the functions above, as NVIDIA's library exports them.
extern "C" ncclResult_t pncclGetVersion(int* v) { return ncclGetVersion(v); }
extern "C" const char* pncclGetErrorString(ncclResult_t r) { return ncclGetErrorString(r); }
extern "C" const char* pncclGetLastError(ncclComm_t c) { return ncclGetLastError(c); }
extern "C" void pncclResetDebugInit() {}  // (deprecated by NCCL; nothing to reset here)
extern "C" ncclResult_t pncclCommCount(const ncclComm_t c, int* n) { return ncclCommCount(c, n); }
extern "C" ncclResult_t pncclCommUserRank(const ncclComm_t c, int* r) { return ncclCommUserRank(c, r); }
extern "C" ncclResult_t pncclCommCuDevice(const ncclComm_t c, int* d) { return ncclCommCuDevice(c, d); }
extern "C" ncclResult_t pncclGroupStart() { return ncclGroupStart(); }
extern "C" ncclResult_t pncclGroupEnd() { return ncclGroupEnd(); }
extern "C" ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* s) { return ncclGroupSimulateEnd(s); }
extern "C" ncclResult_t pncclMemAlloc(void** p, size_t n) { return ncclMemAlloc(p, n); }
extern "C" ncclResult_t pncclMemFree(void* p) { return ncclMemFree(p); }

// NcclSession: a session's NCCL (docs/ARCHITECTURE.md, "NCCL"). It is the library the generated
// NCCL operations call (gen::nccl::Api), in front of the real one - NVIDIA's libnccl.so.2
// (cuda backend) or the host backend's emulation - and keeps what Remora adds:
//
//  * Communicators are created non-blocking in the real library, whatever the application
//    asked; this class polls them (ncclCommGetAsyncError) from a pending operation, so the
//    worker's loop never waits for another rank. A blocking application's init, split, shrink
//    and finalize are answered once done; a non-blocking one gets ncclInProgress at once.
//  * A collective whose launch is still in progress (ncclInProgress) holds the session's
//    later requests until it is on its stream (stream order); an init does not (the session
//    stays responsive while the other ranks join).
//  * Unique ids: the real id is registered with the supervisor, which answers the capability
//    the application sees; a capability is resolved to the real id through the supervisor
//    (which checks the tenant, and asks the origin server for another server's id).
//  * Each communicator belongs to the clique of the unique id it was made from (split and
//    shrink inherit their parent's): when the supervisor says a member of a clique is gone,
//    its communicators are aborted and every later call on them answers ncclRemoteError.
//  * NCCL's internal memory is charged to the tenant: what the process holds on the GPU beyond
//    the ledger's charges, measured when a communicator's init starts and when it is ready
//    (and after its first launches, which make connections), charged to the communicator and
//    returned when it is destroyed or aborted.
//
// Owned by the executor (created when the session's first NCCL call binds the library); used
// by the executor's single thread only.
#pragma once

#include <nccl.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "nccl_api.h"
#include "nccl_device_types.h"
#include "remora/base/status.h"
#include "remora/protocol/api_args.h"
#include "worker/session/executor.h"
#include "worker/session/lib_objects.h"
#include "worker/backend/nccl_emulation.h"

namespace remora::worker {

class OpContext;

using NcclId = std::array<uint8_t, NCCL_UNIQUE_ID_BYTES>;

// One NCCL communicator of the session, beside its LibObject (same id).
struct NcclComm {
  // kRegistering: a window registration or device communicator NCCL completes in the
  // background (its answer waits; the session's later requests do not).
  enum class Phase { kStarting, kReady, kBusy, kFinalizing, kRegistering, kFailed };
  uint64_t id = 0;        // the client's id (the LibObject's)
  uint64_t bits = 0;      // what the generated operations pass as ncclComm_t (the real one,
                          // or a dead value once aborted, never a real library's)
  ncclComm_t real = nullptr;
  int gpu = 0;
  int nranks = 0, rank = -1;
  bool app_blocking = true;
  Phase phase = Phase::kStarting;
  bool finalized = false;
  ncclResult_t error = ncclSuccess;  // kFailed: what its calls answer
  std::string why;
  ncclResult_t deferred = ncclSuccess;  // a posted call's failure, reported by the next GetAsyncError
  // The cliques (unique ids' origin server and number) it was made from: a member of one gone,
  // it is aborted. A split or shrink is in its parent's.
  std::vector<std::pair<uint64_t, uint64_t>> cliques;
  uint64_t unaccounted_before = 0;  // the GPU's unaccounted memory when its creation started
  bool measured_start = false;
  int launches_measured = 0;
  uint64_t launch_before = 0;       // ... when a measured launch started
  bool measure_launch = false;
  // What the device API made on it (nccl_device.cc): NCCL's windows, and the device
  // communicators as NCCL filled them; only these are deregistered or destroyed.
  std::set<uint64_t> windows;
  std::vector<std::unique_ptr<ncclDevComm>> devcomms;
};

// A communicator's LibObject points at it (the description's size hooks read its size and rank).
struct NcclCommRef final : LibExtra {
  NcclComm* comm = nullptr;
};

// The symbolic name of an NCCL status, for logs.
const char* ncclGetErrorStringOf(ncclResult_t r);

class NcclSession final : public gen::nccl::Api {
 public:
  NcclSession(Executor& ex, gen::nccl::Api& real);
  ~NcclSession() override;
  NcclSession(const NcclSession&) = delete;
  NcclSession& operator=(const NcclSession&) = delete;

  // ---- the generated operations' calls ---------------------------------------------------
  ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) override;
  ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) override;
  ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) override;
  ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) override;
  ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                             ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                             ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream) override;
  ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                          int root, ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                             ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                            cudaStream_t stream) override;
  ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                        cudaStream_t stream) override;
  ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                        cudaStream_t stream) override;

  // ---- the hand-written operations (server/worker/libs/lib_nccl.cc reads their arguments) ------
  // ncclGetUniqueId's worker hook: answered once the supervisor registered the real id.
  ncclResult_t GetUniqueId(OpContext& x);
  // ncclCommInitRank*, ncclCommSplit, ncclCommShrink (one call), or a group's calls.
  Status Create(OpContext& x, uint32_t function);
  Status Group(OpContext& x, bool wait);
  Status Finalize(OpContext& x);
  Status Destroy(OpContext& x);
  Status Abort(OpContext& x);
  Status Revoke(OpContext& x);
  Status GetAsyncError(OpContext& x);
  Status RedOpCreatePreMulSum(OpContext& x);
  // Windows and NCCL 2.28's device API (nccl_device.cc; `fn` is the requirement's wire number).
  Status WindowRegister(OpContext& x);
  Status WindowDeregister(OpContext& x);
  Status DevCommCreate(OpContext& x);
  Status DevCommDestroy(OpContext& x);
  Status Requirement(OpContext& x, uint32_t fn);
  Status Team(OpContext& x);
  Status CalcSlots(OpContext& x);
  // The session's end: every communicator aborted (so work blocked in them ends).
  void Teardown();
  // An object of an NCCL kind the session's end releases (the generated DestroyObject).
  Status DestroyObject(HandleKind kind, uint64_t bits);

  // ---- events -------------------------------------------------------------------------------
  void OnControl(const ControlEvent& ev);
  // Advances what is in progress; true once nothing is (the pending operation then ends).
  Result<bool> Poll();
  // A launch is in progress: the session's later requests wait (stream order).
  bool HoldsQueue() const;

 private:
  // An application's ncclConfig_t as it travelled (lib_nccl_comm.cc in the shim says how).
  struct Config {
    bool present = false;
    std::array<int32_t, 12> v{};  // blocking, cgaClusterSize, ... nvlinkCentricSched
    bool has_net = false, has_name = false;
    std::string net, name;
    bool AppBlocking() const { return !present || v[0] != 0; }
    // For the real library: the application's settings, never blocking.
    ncclConfig_t Make() const;
  };
  // An init, split or shrink as the client sent it.
  struct CreateCall {
    uint32_t function = 0;
    uint64_t id = 0;          // the new communicator's (0: a split's NCCL_SPLIT_NOCOLOR)
    int gpu = 0;
    int nranks = 0, rank = -1;
    std::vector<NcclId> ids;  // init: the capabilities
    Config config;
    bool app_blocking = true;
    uint64_t parent = 0;      // split, shrink
    int color = 0, key = 0;
    std::vector<int> exclude;
    int flags = 0;
  };
  // Work whose answer waits: creates (run once their unique ids are resolved), a finalize or
  // revoke (answered once done, for a blocking application).
  struct Batch {
    enum class Reply { kPlain, kState, kStateRanks };
    uint64_t tag = 0;  // 0: posted, nobody waits
    Reply reply = Reply::kPlain;
    bool group = false;       // the real ncclGroupStart..End around the creates
    bool ran = false;
    bool wait_ready = false;  // answer once `comms` are ready (or failed)
    bool done = false;
    std::vector<CreateCall> creates;
    std::vector<uint64_t> comms;
  };
  struct Resolved {
    NcclId real{};
    uint64_t clique_server = 0, clique_id = 0;
  };
  struct Registering {
    uint64_t tag = 0;
    NcclId real{};
  };
  // A device-API call NCCL completes in the background (kRegistering): answered once its
  // communicator is ready again; `scratch` is what NCCL writes into until then.
  struct DevWait {
    uint64_t tag = 0;
    uint64_t comm = 0;
    std::shared_ptr<void> scratch;
    std::function<void(NcclComm&, api::ArgWriter&)> reply;
  };

  NcclComm* ByBits(ncclComm_t comm);
  NcclComm* ById(uint64_t id);
  NcclComm* Adopt(std::unique_ptr<NcclComm> c);
  // The communicator a hand-written operation names (its next argument), or an error.
  Result<NcclComm*> Named(OpContext& x);
  // The session-level rules around a collective or point-to-point call of the real library.
  template <typename F>
  ncclResult_t Launch(ncclComm_t comm, const char* call, F&& f);
  Status ParseCreate(OpContext& x, uint32_t function, CreateCall* out);
  Status Submit(OpContext& x, std::unique_ptr<Batch> b);
  Status PollBatches();
  // Finalize's and revoke's answer, the communicator's state: now, or for a blocking
  // application whose call `r` is still in progress, once it is ready (or failed).
  Status AnswerState(OpContext& x, NcclComm& c, ncclResult_t r);
  // Destroy and abort (`abort`): the real communicator is ended and the session's forgotten.
  Status End(OpContext& x, bool abort);
  void Run(Batch& b);
  Status StartCreate(Batch& b, CreateCall& c);
  void Answer(Batch& b, const Status& st);
  void Ready(NcclComm& c);
  void Fail(NcclComm& c, ncclResult_t error, const std::string& why);
  void Forget(uint64_t id);
  // The application ended communicator `c` (destroy, abort): a clique the session holds no
  // other communicator of is left, so the session's end is no loss to its other members.
  void Leave(const NcclComm& c);
  // Memory the process holds on `gpu` that the ledger does not (NCCL's, mostly); nullopt
  // where it cannot be measured.
  std::optional<uint64_t> Unaccounted(int gpu);
  // Charges what Unaccounted grew since `before` to `c` (fails `c` beyond the quota).
  void Charge(NcclComm& c, uint64_t before);
  void Schedule();
  Result<uint64_t> Ask(NcclQuestion::Op op, const NcclId& id);
  // The server's NCCL serves `name` of the device API (it has it, and is the release whose
  // structs Remora's nccl.h lays out), else ncclInvalidUsage saying why.
  Status DeviceApi(const char* name);
  // `c` can run a call now: ready (failed: its error; still busy: ncclInvalidUsage).
  Status Usable(const NcclComm& c, const char* call) const;
  // Answers a device-API call on `c` once ncclCommGetAsyncError says NCCL finished it (also
  // when the call returned ncclSuccess: see nccl_device.cc).
  Status Complete(OpContext& x, NcclComm& c, std::shared_ptr<void> scratch,
                  std::function<void(NcclComm&, api::ArgWriter&)> reply);
  void PollDevWaits();

  Executor& ex_;
  gen::nccl::Api& real_;
  std::map<uint64_t, std::unique_ptr<NcclComm>> comms_;  // by id
  std::map<uint64_t, NcclComm*> by_bits_;
  std::map<NcclId, Resolved> resolved_;                  // capability -> real id and clique
  std::map<NcclId, ncclResult_t> refused_;               // capabilities the supervisor refused
  std::map<uint64_t, NcclId> asked_;                     // request -> capability (resolve)
  std::map<uint64_t, Registering> registering_;          // request -> who waits (register)
  std::deque<std::unique_ptr<Batch>> batches_;
  std::vector<DevWait> dev_waits_;
  uint64_t next_request_ = 1;
  bool in_group_ = false;
  std::set<NcclComm*> touched_;  // communicators a group's calls named
  bool scheduled_ = false;
};

// The session's NCCL, made around the real library's table (`real`, a gen::nccl::Api*): the
// table the generated operations are bound to is the returned session's.
std::unique_ptr<NcclSession, void (*)(NcclSession*)> MakeNcclSession(Executor& ex, void* real);
void* NcclSessionApi(NcclSession* s);

}  // namespace remora::worker

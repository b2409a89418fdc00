// Executor: runs one session's calls on the Driver. Single-threaded and non-blocking: it
// polls the connection for requests and the GPU for completions, so a synchronising call
// (stream/event/device synchronize, a copy to the host) is answered when the GPU work
// finishes while other streams of the same client keep flowing.
//
// Ownership: the executor borrows the Connection, Driver and Ledger (all must outlive it)
// and owns every handle the session creates (SessionState); on exit it releases them all,
// newest kind first, and returns the session's memory to the ledger.
//
// Layers (server/worker/LAYERS): declared here, below the handlers, the generated calls and
// the libraries, which all take an Executor&; defined in loop/ (executor.cc: the loop and
// Dispatch; executor_resources.cc), the top, which hands each request to them.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "remora.capnp.h"
#include "remora/memmgr/allocation_table.h"
#include "remora/memmgr/handle_table.h"
#include "remora/memmgr/ledger.h"
#include "remora/protocol/connection.h"
#include "common/session_stats.h"
#include "worker/session/stall_watch.h"
#include "worker/session/ipc_link.h"
#include "worker/backend/driver.h"
#include "worker/session/frame_queue.h"
#include "worker/session/limits.h"
#include "worker/session/module_cache.h"
#include "worker/session/pools.h"
#include "worker/session/reply_queue.h"
#include "worker/session/session_state.h"

namespace remora::sched {
class ComputeBoard;
}

namespace remora::worker {

class ComputeHook;
class NcclSession;  // worker/libs/nccl_session.h
struct ControlEvent;
// NCCL (issue 44): the session's, made around the real library's table when its first call
// binds NCCL, and the table the generated operations are bound to (worker/libs/nccl_session.cc).
std::unique_ptr<NcclSession, void (*)(NcclSession*)> MakeNcclSession(class Executor& ex, void* real);
void* NcclSessionApi(NcclSession* s);
void NcclTeardown(NcclSession* s);
void NcclControl(NcclSession* s, const ControlEvent& ev);

struct SessionConfig {
  uint64_t session_id = 0;
  // The tenant's cache of module images (null: no cache). Borrowed.
  ModuleCache* module_cache = nullptr;
  SessionLimits limits;
  std::string tenant;
  // Application device ordinal -> server GPU index (= driver device); -1 once detached.
  std::vector<int> gpus;
  Ledger* ledger = nullptr;  // null: no quota (unit tests)
  uint32_t ledger_slot = 0;
  SessionCounters* stats = nullptr;  // null: not published (unit tests); see worker/loop/call_stats.h
  // Compute shares of the server's GPUs (server/sched/board.h), shared with the supervisor and
  // the other workers; the session is its slot `ledger_slot`. null: no scheduling (unit tests).
  sched::ComputeBoard* compute = nullptr;
  // Liveness (docs/ARCHITECTURE.md, "Failure model"): a heartbeat frame goes to the client
  // every heartbeat_ns; the session ends when nothing arrived from the client for
  // client_deadline_ns while the executor was reading (0: never, unit tests).
  uint64_t client_deadline_ns = 0;
  uint64_t heartbeat_ns = 250'000'000;
  // The client's window for this server (Hello.window): the session's handles carry it, so
  // they never collide with another server's in one application (handle_table.h). The
  // host backend's device addresses take theirs from HostDriverOptions::window.
  uint8_t window = 0;
};

// Supervisor-to-worker events, polled by the executor (about every millisecond).
struct ControlEvent {
  enum class Kind { kSetDevices, kEndSession, kIpcRelease, kMigrate, kNcclAnswer, kNcclLost } kind = Kind::kEndSession;
  std::vector<int> gpus;
  std::string reason;
  std::string url, token;  // kMigrate: where the administrator moves the session
  uint64_t export_id = 0;  // kIpcRelease: free this export now (its last importer closed it)
  // NCCL (worker/libs/nccl_session.h): kNcclAnswer answers question `nccl_request` with `nccl_status`
  // and the id; both name the clique (the unique id's origin server and number) involved.
  uint64_t nccl_request = 0;
  uint32_t nccl_status = 0;
  std::vector<uint8_t> nccl_id;
  uint64_t clique_server = 0, clique_id = 0;
};

// A question about NCCL unique ids to the supervisor (answered later by a kNcclAnswer event).
struct NcclQuestion {
  // kLeave: the session destroyed its last communicator of clique (clique_server, clique_id);
  // no answer.
  enum class Op : uint8_t { kRegister = 0, kResolve = 1, kLeave = 2 } op = Op::kRegister;
  uint64_t request = 0;
  std::vector<uint8_t> id;  // 128 bytes: the real id (register) or the capability (resolve)
  uint64_t clique_server = 0, clique_id = 0;
};

class ControlSource {
 public:
  virtual ~ControlSource() = default;
  virtual Result<std::optional<ControlEvent>> Poll() = 0;
  // CUDA IPC: a question the supervisor answers (worker/session/ipc_link.h); `fd` rides along if >= 0.
  // Without a supervisor (unit tests), IPC is not available.
  virtual Result<IpcAnswer> Ask(const IpcQuestion& q, int fd) {
    (void)q;
    (void)fd;
    return Error(Err::kNotSupported, "CUDA IPC needs the Remora server's supervisor");
  }
  // NCCL: sends a question whose answer a later Poll returns (kNcclAnswer). Without a
  // supervisor (unit tests) unique ids are not available.
  virtual Status NcclAsk(const NcclQuestion& q) {
    (void)q;
    return Error(Err::kNotSupported, "NCCL unique ids need the Remora server's supervisor");
  }
  // Tells the supervisor this session closed its open of an export (no answer).
  virtual void Closed(uint64_t export_id) { (void)export_id; }
  // Tells the supervisor why the client did not move (planned migration; no answer).
  virtual void MigrateFailed(const std::string& why) { (void)why; }
  // Blocks until the supervisor says to release an export (an exporter whose session ended,
  // holding memory other sessions still use); nullopt when the supervisor is gone.
  virtual std::optional<uint64_t> WaitRelease() { return std::nullopt; }
};

class Executor;
class IpcState;
struct OpTable;

// Work started by a request that finishes later (a GPU completion, a bulk transfer).
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Advances; true once finished (its reply, if any, posted). An error ends the session
  // unless Recover gives the op that finishes the call in its place.
  virtual Result<bool> Poll(Executor& ex) = 0;
  // Poll failed with `error` while the connection still works (a staging allocation refused
  // mid-transfer, say): the op gives back what it owns and returns the op that finishes its
  // call alone - it consumes the rest of the request's bulk, so the transport stays in step
  // with the client, and answers `error` - or nullptr when it cannot (the session ends).
  virtual std::unique_ptr<PendingOp> Recover(Executor& ex, const Status& error) {
    (void)ex;
    (void)error;
    return nullptr;
  }
  // Later requests must wait (stream order across a transfer that is only partly issued).
  // The executor keeps reading frames meanwhile and runs control requests at once.
  virtual bool HoldsQueue() const { return false; }
  // Later requests that expect a reply must wait (the client reads replies in order and this
  // op's is not out yet); the others may go ahead - the op's device work is queued in stream
  // order already. Only read when HoldsQueue is false.
  virtual bool HoldsReplies() const { return false; }
  // The op is still consuming the current frame's incoming bulk: no frame can be read.
  virtual bool HoldsTransport() const { return false; }
  // The session ends with this op unfinished: give back what it owns (no reply is sent).
  virtual void Abandon(Executor& ex) { (void)ex; }
};

// Executor: the loop of one session. It composes what the session needs - its objects
// (SessionState), frames it cannot dispatch yet (FrameQueue), outgoing frames (ReplyQueue),
// reusable driver objects (EventPool, BouncePool) and the generated libraries it serves -
// and runs until the session ends.
class Executor {
 public:
  // `staging` (pinned memory for the transport) must outlive `conn`, which frees into it.
  Executor(Connection& conn, Driver& driver, StagingAllocator& staging, SessionConfig config,
           ControlSource* control = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Serves until the client says goodbye (OK), leaves (kDevicesUnavailable), the session is
  // ended by the supervisor, or Stop() is called.
  Status Run();
  // Thread-safe and async-signal-safe: asks Run() to finish the calls in flight and return.
  void Stop() { stop_.store(true); }

  // ---- used by handlers and pending ops -----------------------------------------------
  using Stream = worker::Stream;
  using Event = worker::Event;
  using Module = worker::Module;
  using Function = worker::Function;
  using Pool = worker::Pool;
  using HostRegion = worker::HostRegion;
  using HostCallback = worker::HostCallback;

  Connection& conn() { return conn_; }
  Driver& driver() { return driver_; }
  SessionState& session() { return session_; }
  // CUDA IPC: this session's exports and opens (ipc_state.h); the supervisor, if any.
  IpcState& ipc() { return *ipc_; }
  ControlSource* control() { return control_; }
  const SessionConfig& config() const { return config_; }
  // Names the unit of work in progress for the stall watch (stall_watch.h).
  StallWatch& stall_watch() { return stall_watch_; }

  // Posts a Reply for `tag`. `fill` sets the result member; bulk follows if bulk_bytes > 0.
  template <typename Fill>
  Status PostReply(uint64_t tag, const Status& status, Fill&& fill, uint64_t bulk_bytes = 0);
  Status PostReply(uint64_t tag, const Status& status) {
    return PostReply(tag, status, [](wire::Reply::Builder&) {});
  }
  // Posts an unsolicited Notice (queued behind a bulk reply in progress).
  template <typename Fill>
  Status PostNotice(Fill&& fill);
  // Records the failure of an asynchronous call: the next synchronising reply carries it.
  void DeferError(const Status& st);
  // Marks the start and end of a reply whose bulk is being produced (other replies queue).
  void BeginBulkReply() { replies_.BeginBulk(); }
  Status EndBulkReply() { return replies_.EndBulk(); }

  // A pinned event of `gpu` from the pool (timing disabled) for completion tracking.
  Result<DEvent> AcquirePoolEvent(int gpu);
  // Gives an event back once it has completed (or the session is ending): the compute
  // scheduler counts the work before a recorded one as done.
  void ReleasePoolEvent(int gpu, DEvent e);
  // A pool event recorded on `s` (its GPU made current first): completes when the stream
  // reaches this point. Release it with ReleasePoolEvent(s.gpu, e).
  Result<DEvent> RecordPoolEvent(const Stream& s);
  // GPU work (a launch, a library call that launches kernels) was issued on `s`: the compute
  // scheduler measures it (worker/loop/compute_hook.h). Call it after the driver accepted it.
  void NoteGpuWork(const Stream& s);
  // 64 KiB pinned bounce buffers for small asynchronous host-to-device copies.
  Result<std::byte*> AcquireBounce() { return bounce_pool_.Acquire(driver_); }
  void ReleaseBounce(std::byte* p) { bounce_pool_.Release(p); }
  Status SetDevice(int gpu);

  Result<const DeviceDescription*> Description(int gpu);
  // Host address of [offset, offset+n) in a registered region, or kInvalidValue.
  Result<std::byte*> RegionRange(uint64_t region, uint64_t offset, uint64_t n);
  Ledger* ledger() { return config_.ledger; }
  uint32_t ledger_slot() const { return config_.ledger_slot; }
  // Charges `bytes` on `gpu` to the session's tenant (the ledger). A pool's tenant whose
  // share on this server is used up gets more from its pool-wide limit first, if there is any
  // (the supervisor asks the pool's store; docs/ARCHITECTURE.md, "Pool-wide quotas").
  Status Charge(int gpu, uint64_t bytes);
  void ReleaseCharge(int gpu, uint64_t bytes) {
    if (config_.ledger && bytes) config_.ledger->Release(config_.ledger_slot, static_cast<uint32_t>(gpu), bytes);
  }
  void AddPending(std::unique_ptr<PendingOp> op) { pending_.push_back(std::move(op)); }
  // The bulk of the request being served, chunk by chunk in order (nullopt: not yet
  // arrived), and its release once nothing reads a chunk any more. Ops use these rather
  // than the connection: the bulk may have been read ahead into memory.
  Result<std::optional<BulkChunk>> PollBulk() { return frames_.PollBulk(); }
  void ReleaseBulk(const BulkChunk& chunk) { frames_.ReleaseBulk(chunk); }
  // Host functions launched whose client callback has not finished - a stream's
  // (cuLaunchHostFunc) or a launched graph's host node: work queued behind them in a stream
  // may wait on the client, so transfers must not hold transport memory.
  bool HostCallbacksOutstanding() {
    return !session_.host_callbacks().empty() || session_.graphs().HostNodesOutstanding();
  }
  // Whether a driver call that waits for the whole device (cuMemFree, cuModuleUnload,
  // cuMemHostRegister: they return once every stream ran what was queued before them) may be
  // made now. Not while one of the session's host functions is outstanding: its stream waits
  // for the client's callbackDone, which only this thread takes, so the call would never
  // return. An operation holding such a call polls until this holds; no host function can be
  // queued between the check and the call (the host functions are queued by this thread).
  bool MayWaitForDevice() { return !HostCallbacksOutstanding(); }
  // Frees pinned memory this executor allocated (a transfer's spill buffer): cuMemFreeHost
  // waits for the whole device as cuMemFree does, so it is made now only if MayWaitForDevice,
  // else once it holds (PollPending), or at the session's end.
  void FreeHostWhenIdle(void* p);
  Result<int> GpuOf(int ordinal) const;
  // The application's ordinal of this server's GPU `gpu` (the first that names it; -1: none).
  int OrdinalOf(int gpu) const;
  Result<Stream> ResolveStream(wire::StreamRef::Reader ref, uint64_t thread, int ordinal) {
    return ResolveStream(ref.getHandle(), ref.getPerThread(), thread, ordinal);
  }
  // Stream `handle` (0, 1 and 2 are the default streams; `per_thread` makes 0 the calling
  // thread's own) of the calling thread on device `ordinal`.
  Result<Stream> ResolveStream(uint64_t handle, bool per_thread, uint64_t thread, int ordinal);

  // ---- stream capture (graph_state.h) --------------------------------------------------
  // Whether work issued on `s` now goes into a graph (a capture is active or invalidated on
  // it); false at once while the session captures nothing. An error where the driver
  // refuses the question (the legacy stream while another stream captures).
  Result<bool> Capturing(const Stream& s);
  // What a synchronising call on capturing stream `s` gets: the driver's own error (which
  // invalidates the capture, as in CUDA).
  Status CaptureViolation(const Stream& s);
  // A device staging buffer of `bytes` for a host side of a graph copy: a session allocation
  // charged to the tenant (graph_state.h, "Host memory in graphs").
  Result<DevPtr> AllocateStaging(int gpu, uint64_t bytes);
  // Frees what GraphTables::ForgetGraph/ForgetExec returned (staging no graph binds any
  // more; a graph's memory-node allocations), returning the charges.
  void FreeStaging(const std::vector<DevPtr>& buffers);
  // What the session holds against its limits (worker/session/limits.h).
  ResourceCounter& resources() { return resources_; }
  // Planned migration (issue 40, N5): a session takes one migrateImport in its life (true
  // the first time this is asked), and only while nothing else was made in it.
  bool TakeMigrationImport() { return !std::exchange(migration_imported_, true); }

  // Libraries whose generated calls this session serves (the driver API always; others as
  // the worker loads them): the operations and the implementation they call.
  struct LibraryBinding {
    const OpTable* table = nullptr;
    void* api = nullptr;
  };
  void BindLibrary(uint16_t id, const OpTable* table, void* api) {
    if (id < libraries_.size()) libraries_[id] = LibraryBinding{table, api};
  }
  const LibraryBinding* library(uint16_t id) const {
    return id < libraries_.size() && libraries_[id].table != nullptr ? &libraries_[id] : nullptr;
  }
  // The binding of library `id`; a math library (cuBLAS, cuDNN, ...) is bound on its first
  // call in the session, from the driver (the real library, or the host backend's emulation).
  // kNotSupported if this server cannot serve it.
  Result<const LibraryBinding*> Library(uint16_t id);
  // The session's NCCL (worker/libs/nccl_session.h), once a call bound the library; else nullptr.
  NcclSession* nccl() { return nccl_.get(); }

 private:
  Status Dispatch(const InFrame& frame);
  // Reads and dispatches frames (up to a budget); true if any was handled.
  Result<bool> DispatchFrames();
  bool IsControl(const InFrame& frame);
  Result<bool> PollPending();
  Status PollControl();
  Status CheckClient();
  // Reports what this process holds on `gpu` beyond the session's charges as context overhead.
  void MeasureOverhead(int gpu);
  Status ApplyControl(const ControlEvent& ev);
  // Gives the worker thread the capture mode the calling client thread would have in CUDA
  // (its own mode, against the captures of all client threads).
  void ApplyCaptureMode(uint64_t thread, int mode);
  // Announces host functions that driver threads reached (graph host nodes, destructors).
  Result<bool> PostCallbackNotices();
  // Ends everything in reverse: pending operations, the session's objects, the pools.
  void ReleaseEverything();

  Connection& conn_;
  Driver& driver_;
  SessionConfig config_;
  ResourceCounter resources_{config_.limits};
  ControlSource* control_;
  std::atomic<bool> stop_{false};
  bool goodbye_ = false;
  std::string end_reason_;
  // N5, N6: a migrateImport was taken; the administrator ordered a move whose failure
  // report (migrateFailed) is awaited, once.
  bool migration_imported_ = false;
  bool migrate_ordered_ = false;
  uint64_t generation_ = 1;
  int current_gpu_ = -1;
  Status deferred_;  // first asynchronous failure not yet reported

  StagingAllocator& staging_;
  std::vector<SharedRegion> registered_;            // the transport's shared regions, pinned
  EventPool event_pool_;
  BouncePool bounce_pool_;
  std::vector<void*> deferred_host_frees_;  // FreeHostWhenIdle
  SessionState session_;
  std::deque<std::unique_ptr<PendingOp>> pending_;
  FrameQueue frames_;
  ReplyQueue replies_;
  std::array<LibraryBinding, kNumDomains> libraries_{};
  std::map<int, DeviceDescription> descriptions_;  // by GPU, kept after a detach
  uint64_t last_control_poll_ns_ = 0;
  // Liveness: when the client was last heard (a frame, or a pass that did not read), the
  // last heartbeat sent, and whether this loop pass polled the connection.
  uint64_t last_heard_ns_ = 0, last_beat_ns_ = 0;
  bool polled_ = false;
  bool heard_any_ = false;  // a frame came from the client (its handshake is over)
  uint64_t last_overhead_ns_ = 0;
  std::set<int> measured_gpus_;  // GPUs this session made current (context overhead reported)
  std::unique_ptr<ComputeHook> compute_;  // null without a compute board
  std::unique_ptr<IpcState> ipc_;
  bool gated_ = false;  // the request just dispatched is GPU work the scheduler holds back
  std::unique_ptr<NcclSession, void (*)(NcclSession*)> nccl_{nullptr, nullptr};  // (issue 44)
  StallWatch stall_watch_{config_.session_id, StallWatch::WarnAfterFromEnv()};
};

}  // namespace remora::worker

#include "worker/session/executor_inl.h"

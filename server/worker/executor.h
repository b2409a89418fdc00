// Executor: runs one session's calls on the Driver. Single-threaded and non-blocking: it
// polls the connection for requests and the GPU for completions, so a synchronising call
// (stream/event/device synchronize, a copy to the host) is answered when the GPU work
// finishes while other streams of the same client keep flowing.
//
// Ownership: the executor borrows the Connection, Driver and Ledger (all must outlive it)
// and owns every handle the session creates; on exit it releases them all and returns the
// session's memory to the ledger.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remora.capnp.h"
#include "remora/memmgr/allocation_table.h"
#include "remora/memmgr/handle_table.h"
#include "remora/memmgr/ledger.h"
#include "remora/protocol/connection.h"
#include "worker/driver.h"
#include "worker/limits.h"
#include "worker/module_cache.h"

namespace remora::worker {

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
};

// Supervisor-to-worker events, polled by the executor (about every millisecond).
struct ControlEvent {
  enum class Kind { kSetDevices, kEndSession } kind = Kind::kEndSession;
  std::vector<int> gpus;
  std::string reason;
};

class ControlSource {
 public:
  virtual ~ControlSource() = default;
  virtual Result<std::optional<ControlEvent>> Poll() = 0;
};

class Executor;

// Work started by a request that finishes later (a GPU completion, a bulk transfer).
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Advances; true once finished (its reply, if any, posted). An error ends the session.
  virtual Result<bool> Poll(Executor& ex) = 0;
  // Later requests must wait (stream order across a transfer that is only partly issued).
  // The executor keeps reading frames meanwhile and runs control requests at once.
  virtual bool HoldsQueue() const { return false; }
  // The op is still consuming the current frame's incoming bulk: no frame can be read.
  virtual bool HoldsTransport() const { return false; }
  // The session ends with this op unfinished: give back what it owns (no reply is sent).
  virtual void Abandon(Executor& ex) { (void)ex; }
};

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
  struct Stream {
    DStream stream = nullptr;
    int gpu = 0;
    unsigned flags = 0;  // cudaStreamNonBlocking or 0
  };
  struct Event {
    DEvent event = nullptr;
    int gpu = 0;
    unsigned flags = 0;
  };
  struct Module {
    DModule module = nullptr;
    int gpu = 0;
    std::string hash;        // hex
    uint64_t charged = 0;    // bytes charged to the tenant for its code and data
  };
  struct Function {
    DFunction function = nullptr;
    int gpu = 0;
    uint64_t module = 0;
    std::vector<ParamInfo> params;
  };
  struct Pool {
    DPool pool = nullptr;
    int gpu = 0;
    bool created = false;    // by this session (destroyed with it)
  };
  // Pinned host memory of the client mapped here (shm): DMA goes straight to and from it.
  struct HostRegion {
    std::byte* base = nullptr;
    size_t size = 0;
    bool registered = false;  // with the driver (pinned); else copies are staged by the driver
  };
  // A host function waiting in a stream: the driver thread blocks in it until the client
  // has run the callback. Shared between the executor and that thread.
  struct HostCallback {
    uint64_t id = 0;
    std::atomic<bool> reached{false};
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };

  Connection& conn() { return conn_; }
  Driver& driver() { return driver_; }

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

  // A pinned event of `gpu` from a pool (timing disabled) for completion tracking.
  Result<DEvent> AcquirePoolEvent(int gpu);
  void ReleasePoolEvent(int gpu, DEvent e);
  // A pool event recorded on `s` (its GPU made current first): completes when the stream
  // reaches this point. Release it with ReleasePoolEvent(s.gpu, e).
  Result<DEvent> RecordPoolEvent(const Stream& s);
  // 64 KiB pinned bounce buffers for small asynchronous host-to-device copies.
  Result<std::byte*> AcquireBounce();
  void ReleaseBounce(std::byte* p);
  Status SetDevice(int gpu);

  // Marks the start and end of a reply whose bulk is being produced (other replies queue).
  void BeginBulkReply() { bulk_reply_active_ = true; }
  Status EndBulkReply();

  Result<const DeviceDescription*> Description(int gpu);
  const SessionConfig& config() const { return config_; }
  AllocationTable& allocations() { return allocs_; }
  HandleTable<Stream>& streams() { return streams_; }
  HandleTable<Event>& events() { return events_; }
  HandleTable<Module>& modules() { return modules_; }
  HandleTable<Function>& functions() { return functions_; }
  HandleTable<Pool>& pools() { return pools_; }
  // Module handle already loaded for (hash, gpu), function handle for (module, name).
  std::map<std::pair<std::string, int>, uint64_t>& module_index() { return module_index_; }
  std::map<std::pair<uint64_t, std::string>, uint64_t>& function_index() { return function_index_; }
  std::map<uint64_t, std::shared_ptr<HostCallback>>& host_callbacks() { return host_callbacks_; }
  std::map<uint64_t, HostRegion>& host_regions() { return host_regions_; }
  // Host address of [offset, offset+n) in a registered region, or kInvalidValue.
  Result<std::byte*> RegionRange(uint64_t region, uint64_t offset, uint64_t n);
  Status Charge(int gpu, uint64_t bytes) {
    return config_.ledger ? config_.ledger->Reserve(config_.ledger_slot, static_cast<uint32_t>(gpu), bytes) : Status::Ok();
  }
  std::map<std::pair<uint64_t, int>, DStream>& per_thread_streams() { return per_thread_streams_; }
  void AddPending(std::unique_ptr<PendingOp> op) { pending_.push_back(std::move(op)); }
  // The bulk of the request being served, chunk by chunk in order (nullopt: not yet
  // arrived), and its release once nothing reads a chunk any more. Ops use these rather
  // than the connection: the bulk may have been read ahead into memory.
  Result<std::optional<BulkChunk>> PollBulk();
  void ReleaseBulk(const BulkChunk& chunk);
  // Host functions launched whose client callback has not finished: work queued behind
  // them in a stream may wait on the client, so transfers must not hold transport memory.
  bool HostCallbacksOutstanding() const { return !host_callbacks_.empty(); }
  Result<int> GpuOf(int ordinal) const;
  Result<Stream> ResolveStream(wire::StreamRef::Reader ref, uint64_t thread, int ordinal);

  // What the session holds against its limits (worker/limits.h).
  ResourceCounter& resources() { return resources_; }
  Ledger* ledger() { return config_.ledger; }
  uint32_t ledger_slot() const { return config_.ledger_slot; }
  void ReleaseCharge(int gpu, uint64_t bytes) {
    if (config_.ledger && bytes) config_.ledger->Release(config_.ledger_slot, static_cast<uint32_t>(gpu), bytes);
  }

 private:
  friend class Handlers;

  Status Dispatch(const InFrame& frame);
  // Reads and dispatches frames (up to a budget); true if any was handled.
  Result<bool> DispatchFrames();
  bool IsControl(const InFrame& frame);
  Result<bool> PollPending();
  Status PollControl();
  // Reports what this process holds on `gpu` beyond the session's charges as context overhead.
  void MeasureOverhead(int gpu);
  Status ApplyControl(const ControlEvent& ev);
  void ReleaseEverything();


  Connection& conn_;
  Driver& driver_;
  SessionConfig config_;
  ResourceCounter resources_{config_.limits};
  ControlSource* control_;
  std::atomic<bool> stop_{false};
  bool goodbye_ = false;
  std::string end_reason_;
  uint64_t generation_ = 1;
  int current_gpu_ = -1;

  HandleTable<Stream> streams_{HandleKind::kStream};
  HandleTable<Event> events_{HandleKind::kEvent};
  HandleTable<Module> modules_{HandleKind::kModule};
  HandleTable<Function> functions_{HandleKind::kFunction};
  HandleTable<Pool> pools_{HandleKind::kPool};
  std::map<std::pair<std::string, int>, uint64_t> module_index_;
  std::map<std::pair<uint64_t, std::string>, uint64_t> function_index_;
  std::map<uint64_t, std::shared_ptr<HostCallback>> host_callbacks_;
  std::map<uint64_t, HostRegion> host_regions_;
  AllocationTable allocs_;
  std::map<std::pair<uint64_t, int>, DStream> per_thread_streams_;

  std::deque<std::unique_ptr<PendingOp>> pending_;
  Status deferred_;  // first asynchronous failure not yet reported

  std::map<int, std::vector<DEvent>> event_pool_;
  std::vector<DEvent> all_pool_events_;
  std::vector<std::pair<int, DEvent>> pool_event_owner_;
  std::vector<std::byte*> bounce_free_;
  std::vector<std::byte*> bounce_all_;

  // Frames read while an op held the queue, in arrival order. Only the last may have bulk,
  // which then stays in the transport until the frame is dispatched.
  // A backlogged frame's bulk is read ahead into memory ("spilled") within a budget, so
  // that frames behind it - a callbackDone the held op may be waiting for - still arrive;
  // past the budget the bulk stays in the transport and reading stops.
  struct Backlogged {
    FrameHeader header;
    std::vector<uint64_t> body;
    std::vector<std::byte> bulk;  // spilled bulk (filled while spilling_)
    bool spilled = false;
  };
  // Reads more of the last backlogged frame's bulk; true once all of it is in memory.
  Result<bool> SpillBulk();
  std::deque<Backlogged> backlog_;
  bool backlog_has_bulk_ = false;  // the last backlogged frame's bulk is in the transport
  bool spilling_ = false;          // the last backlogged frame's bulk is being spilled
  uint64_t spill_filled_ = 0;
  uint64_t spilled_bytes_ = 0;     // held by backlogged frames
  // Spilled bulk of the frame being dispatched, served by PollBulk.
  std::vector<std::byte> replay_;
  uint64_t replay_polled_ = 0, replay_released_ = 0;

  bool bulk_reply_active_ = false;
  struct QueuedReply {
    FrameKind kind;
    uint64_t tag;
    std::vector<uint64_t> body;
  };
  std::deque<QueuedReply> queued_replies_;

  StagingAllocator& staging_;
  std::map<int, DeviceDescription> descriptions_;  // by GPU, kept after a detach
  std::vector<SharedRegion> registered_;
  uint64_t last_control_poll_ns_ = 0;
  uint64_t last_overhead_ns_ = 0;
  std::set<int> measured_gpus_;  // GPUs this session made current (context overhead reported)
};

}  // namespace remora::worker

#include "worker/executor_inl.h"

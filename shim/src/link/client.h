// Client: the shim's end of a session. Sends requests over the Connection and routes each
// reply to the thread waiting for it.
//
// Threading: any number of application threads call in concurrently. Sends are serialised
// by one lock; one waiting thread at a time receives frames on behalf of all (the others
// sleep on a condition variable and take over when it is done), so replies to different
// streams complete independently.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "remora.capnp.h"
#include "remora/protocol/connection.h"
#include "remora/protocol/handshake.h"
#include "census.h"
#include "drained_streams.h"
#include "function_ref.h"
#include "stream_key.h"

namespace remora::shim {

class Watchdog;
class Client;

// Several servers in one application (REMORA_SERVER with several URLs; docs/ARCHITECTURE.md,
// "GPUs of several servers"): each server is one Client (a link), and the application's
// device ordinals are the links' devices one after the other. Owned by the Runtime.
class DeviceRouter {
 public:
  virtual ~DeviceRouter() = default;
  // The link serving application ordinal `device`, and that server's ordinal for it in
  // *local; nullptr for an ordinal no server has (the call goes where it was made,
  // unchanged, and that server refuses it). Thread-safe, lock-free.
  virtual Client* Route(int device, int* local) const = 0;
};

using BuildFn = FunctionRef<void(wire::Request::Builder&)>;
using ReplyFn = FunctionRef<Status(wire::Reply::Reader&)>;

class Client {
 public:
  Client(std::unique_ptr<Connection> conn, SessionInfo session);
  ~Client();

  // Copies: a planned migration may change both (they are read past the link's gate).
  SessionInfo session();
  Capabilities capabilities();

  // Sends a request and waits for its reply. `on_reply` runs (on whichever thread receives
  // the reply) only if the call itself succeeded; `reply_bulk` receives the reply's bulk.
  // Returns the call's own status. An earlier asynchronous failure reported with the reply
  // is kept for TakeAsyncError().
  // `device` is the application's ordinal: with several servers, Call, CallWithFd, Post and
  // PostExpectingBulk go to the link serving it, with that server's ordinal (SetLinks).
  Status Call(int device, BuildFn build, ReplyFn on_reply, ConstBytes bulk = {}, MutableBytes reply_bulk = {});
  // Call() on this link with this server's own ordinal, never routed (the device list).
  Status CallLocal(int local_device, BuildFn build, ReplyFn on_reply, ConstBytes bulk = {}, MutableBytes reply_bulk = {}) {
    return CallHere(local_device, build, on_reply, bulk, reply_bulk);
  }
  Status PostLocal(int local_device, BuildFn build) { return PostHere(local_device, build, {}); }
  Status CallWithFdLocal(int local_device, int fd, BuildFn build, ReplyFn on_reply) {
    return CallWithFdHere(local_device, fd, build, on_reply);
  }
  // Makes this client one link of a multi-server session: calls are routed by `router`;
  // the work sequence is `shared_sequence` (one for all links, so a synchronisation skipped
  // as needless never misses another link's work); `links` (this one included) share
  // asynchronous errors and capture counts. Called once, before any call; `router`,
  // `shared_sequence` and the links outlive this client's use.
  void SetLinks(const DeviceRouter* router, std::atomic<uint64_t>* shared_sequence, std::vector<Client*> links);
  // The link serving application ordinal `device` (this client without several servers).
  Client* LinkFor(int device) {
    int local = device;
    return Route(&local);
  }
  // Call() with a file descriptor passed just ahead of the request (transports that
  // pass descriptors); the caller keeps its copy.
  Status CallWithFd(int device, int fd, BuildFn build, ReplyFn on_reply);
  // Long-lived client memory registered with the transport (RDMA); see Connection.
  Status RegisterHostMemory(const void* p, size_t n);
  Status UnregisterHostMemory(const void* p);
  // Sends a request nobody waits for (asynchronous call); its errors surface later.
  Status Post(int device, BuildFn build, ConstBytes bulk = {});
  // Sends a request whose reply bulk lands in `reply_bulk` whenever a thread next receives
  // (an asynchronous device-to-host copy). The memory must stay valid until then. With
  // `drains`, the reply, once in, shows that stream drained (StreamIdle).
  Status PostExpectingBulk(int device, BuildFn build, MutableBytes reply_bulk, const StreamKey* drains = nullptr);
  // Blocks until no asynchronous device-to-host copy posted with PostExpectingBulk (on any
  // link) still has to land in [p, p+n): a host-to-device copy about to read those bytes in
  // this process comes after it in stream order, as the GPU would read them.
  void AwaitLandingsInto(const void* p, size_t n);
  // Pushes out posted requests the transport may still be batching (see Connection::Flush).
  Status Flush();
  // Reports the call census if REMORA_CALL_STATS asked for one (at the session's end; the
  // process's census is shared by its links and reports once).
  void ReportCensus() const {
    if (census_) census_->Report();
  }

  // The first asynchronous failure not yet reported, cleared by the call. With several
  // servers, this link's first, else another link's: the next synchronising call reports
  // it, whatever device it synchronises (CUDA keeps them per context).
  Status TakeAsyncError();
  // A sticky error (the context is broken: illegal address, launch failure...) seen in any
  // reply, or OK. Calls that do not wait for the server check it themselves.
  Status sticky() const;
  // ---- device synchronisation answered here (api_device.cc) -------------------------------
  // The work sequence advances with every request that may leave work queued on a device -
  // anything but a waited-for synchronous copy, allocation, free or device synchronisation,
  // each complete once answered - and with every notice from the server (a device detached,
  // a host function reached...). A cudaDeviceSynchronize of `device` that finds the sequence
  // where that device's last completed synchronisation left it has nothing to wait for.
  // Thread-safe.
  uint64_t work_sequence() const { return work_seq_->load(std::memory_order_acquire); }
  // Whether `device`'s last completed synchronisation began at sequence `seq`.
  bool SyncedAt(int device, uint64_t seq) const {
    return device >= 0 && device < kSyncDevices && synced_[static_cast<size_t>(device)].load(std::memory_order_acquire) == seq;
  }
  // A synchronisation of `device` that began at sequence `seq` completed.
  void NoteSynced(int device, uint64_t seq) {
    if (device >= 0 && device < kSyncDevices) synced_[static_cast<size_t>(device)].store(seq, std::memory_order_release);
  }

  // ---- stream synchronisation answered here (remote_call.cc, api_memcpy.cc) ------------------
  // Everything queued on `key` had run when a waited-for call that began at work sequence
  // `seq` completed (a copy into pageable memory, a stream synchronisation or query).
  void NoteStreamDrained(const StreamKey& key, uint64_t seq) { drained_.Drained(key, seq); }
  // Whether nothing was sent since `key` was last drained, the session is sound and no
  // capture is going on: a synchronisation or query of it has nothing to wait for. A request
  // counts as sent once its frame went out (Send), so a call another thread returned from
  // before this one is never missed. When a posted copy (PostExpectingBulk with `drains`)
  // was the last thing sent and its reply is still to come: with `wait`, blocks until the
  // reply is in (a synchronisation: one reply instead of a second round trip) and answers
  // for then; without, false (a query does not block). Thread-safe.
  bool StreamIdle(const StreamKey& key, bool wait = false);

  // Device-list generation last seen from the server.
  uint64_t generation() const { return generation_.load(std::memory_order_relaxed); }
  // Stream captures in progress in the session (on every link), as the last replies
  // reported (capture queries are answered locally while there are none).
  uint32_t captures_active() const;
  // Why the session is unusable (lost server, ended by the administrator), or OK.
  Status broken() const;
  // Where host-function notices go (called on the receiving thread; must not block):
  // kReached, the stream reached callback id; kCancelled, the server refused it (it never
  // runs); kRepeat, a graph reached host function id; kCaptured, id was captured into a graph;
  // kRun, run id once without answering.
  enum class CallbackEvent { kReached, kCancelled, kRepeat, kCaptured, kRun };
  void SetCallbackSink(std::function<void(CallbackEvent, uint64_t)> sink) { callback_sink_ = std::move(sink); }
  // Where a graph host node's notice goes (Notice.graphHostNode: the bytes its graph's
  // copies wrote into the application's memory before it, then run the function; called
  // on the receiving thread, must not block).
  void SetGraphNodeSink(std::function<void(wire::GraphHostNode::Reader)> sink) { graph_node_sink_ = std::move(sink); }
  // Receives one frame if no other thread is receiving, waiting at most timeout_ms; used by
  // the callback thread so a notice arrives even when no application thread waits.
  void Pump(int timeout_ms);
  // Receives, without waiting, the frames already there if no other thread is receiving
  // (the watchdog's drain of an idle session's heartbeats and notices).
  void PollIdle();

  // ---- liveness (watchdog.h) ------------------------------------------------------------
  // Starts heartbeats and the deadline on the server (no-op with deadline 0).
  void Watch(uint64_t deadline_ns);
  // Sends a heartbeat; may block like any send (only the watchdog's beat thread calls it).
  Status SendHeartbeat();
  // When a frame last arrived from the server (MonotonicNanos), and the transport's count of
  // bulk bytes received (a long reply still streaming is the server answering).
  uint64_t last_heard_ns() const { return last_heard_ns_.load(std::memory_order_relaxed); }
  uint64_t receive_progress() const;
  // The server stopped answering: pending and later calls fail with `why`
  // (kDevicesUnavailable) and blocked sends and receives return.
  void GiveUp(const Status& why);

  // ---- planned migration (migration.h) ---------------------------------------------------
  // Where a migrate notice goes (called on the receiving thread; must not block).
  void SetMigrationSink(std::function<void(std::string url, std::string token)> sink) { migration_sink_ = std::move(sink); }
  // Holds the link still: lets the calls in progress end and holds new ones back (they
  // wait), so that only the calling thread uses the link until Resume(). The watchdog
  // goes on (a server silent in the middle of a move is given up as ever).
  // False (and nothing held) if calls were still in progress after timeout_ms.
  bool Quiesce(int timeout_ms);
  // Lets held-back calls go on.
  void Resume();
  // While quiesced: the link talks to another server from now on (the session moved);
  // *conn becomes the old connection (its caller says goodbye on it). False (and nothing
  // changed) while replies are still awaited or a thread is receiving.
  bool SwapConnection(std::unique_ptr<Connection>* conn, SessionInfo session);
  // A link that is not (yet) the application's: its connection, taken away.
  std::unique_ptr<Connection> TakeConnection() { return std::move(conn_); }

  // A small pinned buffer shared with the worker, through which small device-to-pageable
  // copies go (api_memcpy.cc). Created by the first such copy; unmapped with the client.
  struct SharedBounce {
    std::mutex mu;         // held by the one copy using the buffer
    bool tried = false;    // creation was attempted (under mu)
    void* base = nullptr;  // nullptr: the transport cannot share memory
    size_t size = 0;
    uint64_t region = 0;
  };
  SharedBounce& shared_bounce() { return bounce_; }

 private:
  struct Waiter {
    ReplyFn* on_reply = nullptr;
    MutableBytes reply_bulk;
    bool detached = false;  // nobody waits: an asynchronous call with a reply
    bool drains = false;    // its reply drains a stream (DrainedStreams::Pending)
    bool done = false;
    Status status;
  };

  // The link serving `*device`, which becomes that server's ordinal.
  Client* Route(int* device) {
    if (router_ == nullptr) return this;
    int local = *device;
    Client* c = router_->Route(*device, &local);
    if (c == nullptr) return this;
    *device = local;
    return c;
  }
  // The unrouted calls: `device` is this server's ordinal.
  Status CallHere(int device, BuildFn build, ReplyFn on_reply, ConstBytes bulk, MutableBytes reply_bulk);
  Status CallWithFdHere(int device, int fd, BuildFn build, ReplyFn on_reply);
  Status PostHere(int device, BuildFn build, ConstBytes bulk);
  Status PostExpectingBulkHere(int device, BuildFn build, MutableBytes reply_bulk, const StreamKey* drains);
  Status TakeOwnAsyncError();

  // How a request travels. kCall: the caller blocks for the reply, so a request complete
  // when answered leaves no work behind (see work_sequence()); kCallWithFd blocks too but
  // counts as leaving work; the posted kinds leave work and are no round trip in the census.
  enum class SendKind { kPost, kPostWithReply, kCall, kCallWithFd };
  // `*sent_seq` (if given): the work sequence right after this request went out, in wire order.
  Status Send(int device, BuildFn build, SendKind kind, uint64_t tag, ConstBytes bulk, MutableBytes reply_bulk,
              int fd = -1, uint64_t* sent_seq = nullptr);
  // A call that waits for its reply (CallHere, CallWithFdHere; `fd` -1 for none).
  Status CallAs(SendKind kind, int device, int fd, BuildFn build, ReplyFn on_reply, ConstBytes bulk,
                MutableBytes reply_bulk);
  void WaitFor(Waiter& w);
  // With `lock` (on mu_) held: while `waiting()`, receives frames for everyone (one thread at
  // a time; the others sleep until it is done and look again).
  void ReceiveWhile(std::unique_lock<std::mutex>& lock, FunctionRef<bool()> waiting);
  // Receives until request `tag` no longer drains a stream in waiting (its reply is handled)
  // or the session broke.
  void AwaitReply(uint64_t tag);
  void ReceiveOne(int timeout_ms);
  void HandleReply(const InFrame& f);
  void HandleNotice(const InFrame& f);
  void MarkBroken(const Status& why);
  void NoteAsyncError(const Status& st);
  Status DrainBulk(uint64_t bytes);

  std::unique_ptr<Connection> conn_;
  SessionInfo session_;
  std::atomic<uint64_t> next_tag_{1};
  static constexpr int kSyncDevices = 64;
  std::atomic<uint64_t> own_seq_{1};
  std::atomic<uint64_t>* work_seq_ = &own_seq_;              // see work_sequence(); SetLinks
  const DeviceRouter* router_ = nullptr;                     // several servers only
  std::vector<Client*> links_;                               // every link, this one included
  std::array<std::atomic<uint64_t>, kSyncDevices> synced_{};  // per device ordinal; 0: never
  std::atomic<uint64_t> generation_{0};
  DrainedStreams drained_;  // has its own lock

  std::mutex send_mu_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool receiving_ = false;
  std::unordered_map<uint64_t, Waiter*> waiters_;
  Status broken_;
  Status async_error_;
  std::function<void(CallbackEvent, uint64_t)> callback_sink_;
  std::function<void(wire::GraphHostNode::Reader)> graph_node_sink_;
  std::atomic<uint32_t> captures_{0};
  SharedBounce bounce_;  // has its own lock
  Status sticky_;
  Census* census_ = nullptr;  // the process's, when REMORA_CALL_STATS asks for one
  std::atomic<uint64_t> last_heard_ns_{0};
  std::unique_ptr<Watchdog> watchdog_;  // stopped first in ~Client

  // The gate a migration closes (Quiesce): every call passes it; the migrating thread
  // (gate_owner_) passes a closed one.
  friend class GateEntry;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  int gate_active_ = 0;      // calls inside
  bool gate_closed_ = false;
  std::atomic<std::thread::id> gate_owner_{};
  std::function<void(std::string, std::string)> migration_sink_;
};

// The calling thread's stream-capture mode (cudaThreadExchangeStreamCaptureMode), sent with
// each of its requests.
int& ThreadCaptureMode();

}  // namespace remora::shim

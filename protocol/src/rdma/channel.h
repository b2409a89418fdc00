// Channel: one connected RC queue pair carrying the slot messages of wire.h with
// credit-based flow control, plus one-sided READ/WRITE, plus the session's liveness sources
// (the TCP socket kept from the bootstrap, the rdma_cm events). Both sides of the RDMA
// connection are built on it (requester.cc, executor.cc).
//
// Receiving: each side pre-posts `recv_slots` receives of `slot_bytes`; the peer may have one
// message in flight per slot (its credits). A frame record that fits one message stays in its
// slot until the owner releases it (zero copy); larger records arrive as fragments and are
// reassembled on the heap. Re-posted slots are returned to the peer as credits in the header
// of every outgoing message, or in a kCredit message once a quarter of the queue is owed.
// Data messages need two credits, so the last one is always left for a kCredit: the two sides
// can never wait on each other's credits.
//
// Sending: messages are copied into registered send slots (no per-message registration).
// One-sided operations are posted by the owner with its own registered memory; their
// completions come back through ChannelSink::OnOneSidedDone.
//
// Failure: any error completion, a DISCONNECTED (or similar) CM event, or EOF on the TCP
// socket makes the channel failed; every later call returns that failure (always
// kDevicesUnavailable), and already received records can still be taken.
//
// Thread-safety: none. The requester serialises all calls with its lock, except WaitFds,
// which only polls file descriptors and may run unlocked. The executor is single-threaded.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdma/verbs_objects.h"
#include "rdma/wire.h"
#include "remora/base/fd.h"

namespace remora::rdma {

struct Geometry {
  uint32_t recv_slots = 64;          // our receive queue: the peer's credits
  uint32_t slot_bytes = 16 * 1024;   // largest message we accept (and send)
  uint32_t send_slots = 72;          // messages we may have in flight
  uint32_t max_one_sided = 32;       // READ/WRITE work requests the owner may have in flight
  uint64_t max_record_bytes = 1ull << 40;  // largest frame record accepted from the peer
  bool detach_queued = false;        // copy queued records to the heap when they hold > half the slots
};

// A frame record from the peer; holds its receive slot (or a heap copy) until released.
struct InRecord {
  uint8_t flags = 0;
  ConstBytes bytes;
  int slot = -1;
  std::vector<uint64_t> heap;
  std::vector<BulkDesc> segments;  // kSegment messages that arrived before it was taken
};

// What the owner hears about besides frame records. Called from within Pump.
class ChannelSink {
 public:
  virtual void OnSegment(const BulkDesc& segment) = 0;  // for the record taken last
  virtual void OnAck(uint64_t count) = 0;
  virtual void OnOneSidedDone(uint64_t id) = 0;

 protected:
  ~ChannelSink() = default;
};

class Channel {
 public:
  // Builds PD, completion channel, CQ, registered slots and the QP on `id` (address
  // resolved, or a connect request), and posts the receives. `ec` is the CM event channel of
  // `id`; `tcp` the session's bootstrap socket (made non-blocking).
  static Result<std::unique_ptr<Channel>> Create(EventChannel ec, CmId id, Fd tcp, const Geometry& g);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  rdma_cm_id* id() const { return id_.get(); }
  rdma_event_channel* event_channel() const { return ec_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  int tcp_fd() const { return tcp_.get(); }
  // Outstanding RDMA READs we may issue / serve (rdma_conn_param fields).
  uint8_t initiator_depth() const { return initiator_depth_; }
  uint8_t responder_resources() const { return responder_resources_; }
  ConnectData LocalConnectData(const Secret& secret) const { return {secret, geo_.recv_slots, geo_.slot_bytes}; }
  // Once established: the peer's receive queue (credits and largest message).
  void SetPeer(const ConnectData& peer);
  void SetSink(ChannelSink* sink) { sink_ = sink; }

  // ---- progress ---------------------------------------------------------------------
  // Handles every completion in the CQ (and, every few ms, checks the TCP socket and the CM
  // events). Returns whether anything completed, or the failure.
  Result<bool> Pump();
  bool failed() const { return !failure_.ok(); }
  const Status& failure() const { return failure_; }
  void Fail(Status why);  // keeps the first failure
  // Thread-safe: shuts the bootstrap socket down, so the next liveness check (within a few
  // ms, in whichever thread waits) fails the channel, and the peer sees the session closed.
  void ShutdownLivenessSocket() const;
  // Disconnects and destroys the QP (no DMA touches the owner's memory afterwards).
  void Shutdown();
  // Waits up to timeout_ms for every posted send to complete (graceful close).
  void Quiesce(int timeout_ms);

  // ---- receiving --------------------------------------------------------------------
  bool HasRecord() const { return !incoming_.empty(); }
  std::optional<InRecord> TakeRecord();
  // Gives the record's slot back (re-posts it); the record's bytes die.
  void Release(InRecord& record);

  // ---- sending ----------------------------------------------------------------------
  // A frame record being sent: the concatenation of `parts` (prefix, body, embedded bulk).
  struct OutRecord {
    uint8_t flags = 0;
    std::array<ConstBytes, 3> parts;
    uint64_t total = 0;
    uint64_t sent = 0;
  };
  bool CanSend() const { return ok_to_send() && credits_ >= 2; }
  // Posts as many messages of `record` as credits and send slots allow; true once all are.
  Result<bool> SendSome(OutRecord& record);
  Status SendSegment(const BulkDesc& segment);  // requires CanSend()
  Status SendAck(uint64_t count);               // requires CanSend()
  // A message with nothing but the credits owed (requires CanSend()): the executor sends one
  // now and then while it RDMA-writes a long reply, which the requester cannot see arrive,
  // so that the requester's watchdog sees the executor alive (messages_received()).
  Status SendKeepalive();
  Status PostRead(uint64_t id, void* local, uint32_t lkey, uint64_t remote, uint32_t rkey, uint32_t bytes);
  Status PostWrite(uint64_t id, const void* local, uint32_t lkey, uint64_t remote, uint32_t rkey, uint32_t bytes);
  uint32_t one_sided_in_flight() const { return one_sided_; }
  // Messages received so far (frames, fragments, credits, acks, segments).
  uint64_t messages_received() const { return msgs_received_; }

  // ---- sleeping ---------------------------------------------------------------------
  struct Wakeup {
    bool cq = false, cm = false, tcp = false;
  };
  // Asks for a completion event for the next completion. Pump again afterwards before
  // sleeping, or a completion that came in between is slept through.
  Status ArmCq();
  // Sleeps until a completion event, a CM event, TCP activity or timeout_ms. Reads no
  // channel state: callable without the owner's lock (the fds live as long as the channel).
  Wakeup WaitFds(int timeout_ms) const;
  // Consumes what WaitFds saw (CQ events, CM events, a closed socket).
  void HandleWakeup(const Wakeup& w);

  std::string Stats() const;

 private:
  Status PostOneSided(ibv_wr_opcode opcode, uint64_t id, void* local, uint32_t lkey, uint64_t remote, uint32_t rkey,
                      uint32_t bytes);
  Channel(EventChannel ec, CmId id, Fd tcp, const Geometry& g);
  Status Build();
  bool ok_to_send() const { return failure_.ok() && !free_send_.empty() && peer_known_; }
  Status PostMessage(MsgType type, uint8_t flags, uint64_t aux, const OutRecord* from, uint64_t offset, size_t bytes,
                     ConstBytes payload = {});
  void PostRecv(uint32_t slot);
  void Repost(uint32_t slot);
  void HandleCompletion(const ibv_wc& wc);
  void HandleReceive(uint32_t slot, uint32_t bytes);
  void MaybeDetach();
  void MaybeReturnCredits();
  void CheckCmEvents();
  void CheckLiveness();

  Geometry geo_;
  // Declared in creation order: released in reverse.
  Fd tcp_;
  EventChannel ec_;
  CmId id_;
  Pd pd_;
  CompChannel comp_;
  Cq cq_;
  Memory recv_mem_;
  Mr recv_mr_;
  Memory send_mem_;
  Mr send_mr_;
  QpOf qp_;

  ChannelSink* sink_ = nullptr;
  Status failure_;
  bool peer_known_ = false;
  bool armed_ = false;
  uint8_t initiator_depth_ = 0, responder_resources_ = 0;
  uint32_t peer_slots_ = 0;
  uint32_t msg_bytes_ = 0;  // largest message both sides accept
  uint32_t credits_ = 0;    // messages the peer can take now
  uint32_t to_return_ = 0;  // slots re-posted but not yet returned as credits
  uint32_t held_ = 0;       // slots held by queued or taken records
  uint32_t one_sided_ = 0;
  uint32_t sends_in_flight_ = 0;
  std::vector<uint32_t> free_send_;
  std::deque<InRecord> incoming_;
  // Reassembly of a record that spans several messages.
  std::vector<uint64_t> reasm_;
  uint64_t reasm_total_ = 0, reasm_filled_ = 0;
  uint8_t reasm_flags_ = 0;
  bool reassembling_ = false;
  uint64_t next_liveness_ns_ = 0;
  uint64_t msgs_sent_ = 0, msgs_received_ = 0, credits_sent_ = 0, credits_received_ = 0, detached_ = 0;
};

}  // namespace remora::rdma

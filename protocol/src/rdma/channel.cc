#include "rdma/channel.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora::rdma {
namespace {

// wr_id: kind in the top byte, slot or owner id below.
enum WrKind : uint64_t { kWrRecv = 1, kWrSend = 2, kWrOneSided = 3 };
constexpr uint64_t WrId(WrKind k, uint64_t v) { return uint64_t{k} << 56 | v; }
constexpr uint64_t kLivenessCheckNs = 20'000'000;

void GatherCopy(std::byte* dst, const Channel::OutRecord& r, uint64_t offset, size_t n) {
  for (ConstBytes part : r.parts) {
    if (n == 0) return;
    if (offset >= part.size()) {
      offset -= part.size();
      continue;
    }
    size_t take = std::min<uint64_t>(part.size() - offset, n);
    std::memcpy(dst, part.data() + offset, take);
    dst += take;
    n -= take;
    offset = 0;
  }
}

const char* OpName(const ibv_wc& wc) {
  switch (wc.wr_id >> 56) {
    case kWrRecv: return "RDMA receive";
    case kWrSend: return "RDMA send";
    default: return wc.opcode == IBV_WC_RDMA_READ ? "RDMA read" : "RDMA write";
  }
}

}  // namespace

Channel::Channel(EventChannel ec, CmId id, Fd tcp, const Geometry& g)
    : geo_(g), tcp_(std::move(tcp)), ec_(std::move(ec)), id_(std::move(id)) {}

Result<std::unique_ptr<Channel>> Channel::Create(EventChannel ec, CmId id, Fd tcp, const Geometry& g) {
  std::unique_ptr<Channel> ch(new Channel(std::move(ec), std::move(id), std::move(tcp), g));
  RETURN_IF_ERROR(ch->Build());
  return ch;
}

Status Channel::Build() {
  const VerbsApi& v = Verbs();
  ibv_context* ctx = id_->verbs;
  if (ctx == nullptr) return Error(Err::kDevicesUnavailable, "rdma_cm id has no device");
  RETURN_IF_ERROR(SetNonBlocking(tcp_.get()));
  RETURN_IF_ERROR(SetNonBlocking(ec_->fd));
  ibv_device_attr attr{};
  if (int e = v.query_device(ctx, &attr); e != 0) return ErrnoStatus(Err::kDevicesUnavailable, "ibv_query_device", e);
  initiator_depth_ = static_cast<uint8_t>(std::clamp(attr.max_qp_init_rd_atom, 1, 16));
  responder_resources_ = static_cast<uint8_t>(std::clamp(attr.max_qp_rd_atom, 1, 16));

  pd_ = Pd(v.alloc_pd(ctx));
  if (!pd_) return ErrnoStatus(Err::kDevicesUnavailable, "ibv_alloc_pd", errno);
  comp_ = CompChannel(v.create_comp_channel(ctx));
  if (!comp_) return ErrnoStatus(Err::kDevicesUnavailable, "ibv_create_comp_channel", errno);
  RETURN_IF_ERROR(SetNonBlocking(comp_->fd));
  int send_wr = std::min<int>(static_cast<int>(geo_.send_slots + geo_.max_one_sided), attr.max_qp_wr);
  int recv_wr = std::min<int>(static_cast<int>(geo_.recv_slots), attr.max_qp_wr);
  geo_.recv_slots = static_cast<uint32_t>(recv_wr);
  if (static_cast<uint32_t>(send_wr) < geo_.send_slots + geo_.max_one_sided)
    geo_.send_slots = static_cast<uint32_t>(send_wr) - std::min<uint32_t>(geo_.max_one_sided, static_cast<uint32_t>(send_wr) / 2);
  int cqe = std::min(send_wr + recv_wr, attr.max_cqe);
  cq_ = Cq(v.create_cq(ctx, cqe, nullptr, comp_.get(), 0));
  if (!cq_) return ErrnoStatus(Err::kDevicesUnavailable, "ibv_create_cq", errno);

  ASSIGN_OR_RETURN(recv_mem_, Memory::Map(size_t{geo_.recv_slots} * geo_.slot_bytes));
  ASSIGN_OR_RETURN(recv_mr_, Register(pd_.get(), recv_mem_.data(), recv_mem_.size(), IBV_ACCESS_LOCAL_WRITE));
  ASSIGN_OR_RETURN(send_mem_, Memory::Map(size_t{geo_.send_slots} * geo_.slot_bytes));
  ASSIGN_OR_RETURN(send_mr_, Register(pd_.get(), send_mem_.data(), send_mem_.size(), IBV_ACCESS_LOCAL_WRITE));

  ibv_qp_init_attr qa{};
  qa.send_cq = cq_.get();
  qa.recv_cq = cq_.get();
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 0;
  qa.cap.max_send_wr = static_cast<uint32_t>(send_wr);
  qa.cap.max_recv_wr = static_cast<uint32_t>(recv_wr);
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (v.create_qp(id_.get(), pd_.get(), &qa) != 0) return ErrnoStatus(Err::kDevicesUnavailable, "rdma_create_qp", errno);
  qp_ = QpOf(id_.get());

  for (uint32_t i = 0; i < geo_.send_slots; i++) free_send_.push_back(geo_.send_slots - 1 - i);
  for (uint32_t i = 0; i < geo_.recv_slots; i++) PostRecv(i);
  return failure_;
}

Channel::~Channel() { Shutdown(); }

void Channel::Shutdown() {
  if (!qp_) return;
  Verbs().disconnect(id_.get());  // moves the QP to the error state; the peer gets DISCONNECTED
  qp_.reset();
  if (failure_.ok()) failure_ = Error(Err::kDevicesUnavailable, "the RDMA connection was closed");
}

void Channel::SetPeer(const ConnectData& peer) {
  peer_slots_ = peer.recv_slots;
  credits_ = peer.recv_slots;
  msg_bytes_ = std::min(geo_.slot_bytes, peer.slot_bytes);
  peer_known_ = true;
}

void Channel::Fail(Status why) {
  if (!failure_.ok()) return;
  if (why.code() != Err::kDevicesUnavailable) why = Status(Err::kDevicesUnavailable, why.message());
  LOG_DEBUG("rdma: connection failed: {}", why.message());
  failure_ = std::move(why);
}

// ---- completions ----------------------------------------------------------------------

Result<bool> Channel::Pump() {
  bool any = false;
  if (qp_) {
    ibv_wc wc[32];
    for (;;) {
      int n = ibv_poll_cq(cq_.get(), 32, wc);
      if (n < 0) {
        Fail(Error(Err::kDevicesUnavailable, "ibv_poll_cq failed ({})", n));
        break;
      }
      for (int i = 0; i < n; i++) HandleCompletion(wc[i]);
      any = any || n > 0;
      if (n < 32) break;
    }
    MaybeReturnCredits();
    uint64_t now = MonotonicNanos();
    if (now >= next_liveness_ns_) {
      next_liveness_ns_ = now + kLivenessCheckNs;
      CheckLiveness();
    }
  }
  if (!failure_.ok()) return failure_;
  return any;
}

void Channel::HandleCompletion(const ibv_wc& wc) {
  uint64_t kind = wc.wr_id >> 56, value = wc.wr_id & ((uint64_t{1} << 56) - 1);
  if (kind == kWrSend) {
    free_send_.push_back(static_cast<uint32_t>(value));
    sends_in_flight_--;
  } else if (kind == kWrOneSided) {
    one_sided_--;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status != IBV_WC_WR_FLUSH_ERR || failure_.ok())
      Fail(Error(Err::kDevicesUnavailable, "{} failed: {} (vendor error 0x{:x})", OpName(wc),
                 Verbs().wc_status_str(wc.status), wc.vendor_err));
    return;
  }
  if (kind == kWrRecv) {
    msgs_received_++;
    HandleReceive(static_cast<uint32_t>(value), wc.byte_len);
  } else if (kind == kWrOneSided && sink_ != nullptr) {
    sink_->OnOneSidedDone(value);
  }
}

void Channel::HandleReceive(uint32_t slot, uint32_t len) {
  std::byte* p = recv_mem_.data() + size_t{slot} * geo_.slot_bytes;
  SlotHeader h;
  if (len < sizeof(h)) return Fail(Error(Err::kInvalidValue, "RDMA message of {} bytes is truncated", len));
  std::memcpy(&h, p, sizeof(h));
  if (sizeof(h) + h.bytes > len) return Fail(Error(Err::kInvalidValue, "RDMA message claims {} bytes, {} arrived", h.bytes, len));
  credits_ += h.credits;
  if (credits_ > peer_slots_) return Fail(Error(Err::kInvalidValue, "RDMA peer returned more credits than it has slots"));
  std::byte* payload = p + sizeof(h);
  switch (static_cast<MsgType>(h.type)) {
    case MsgType::kCredit:
      credits_received_++;
      return Repost(slot);
    case MsgType::kAck:
      Repost(slot);
      if (sink_ != nullptr) sink_->OnAck(h.aux);
      return;
    case MsgType::kSegment: {
      BulkDesc d;
      if (h.bytes != sizeof(d) || reassembling_) return Fail(Error(Err::kInvalidValue, "malformed RDMA segment message"));
      std::memcpy(&d, payload, sizeof(d));
      Repost(slot);
      if (!incoming_.empty()) incoming_.back().segments.push_back(d);
      else if (sink_ != nullptr) sink_->OnSegment(d);
      return;
    }
    case MsgType::kFrame:
      if (reassembling_ || h.aux < h.bytes || h.aux > geo_.max_record_bytes || h.bytes == 0)
        return Fail(Error(Err::kInvalidValue, "malformed RDMA frame message ({} of {} bytes)", h.bytes, h.aux));
      if (h.aux == h.bytes) {
        InRecord r;
        r.flags = h.flags;
        r.bytes = {payload, h.bytes};
        r.slot = static_cast<int>(slot);
        held_++;
        incoming_.push_back(std::move(r));
        MaybeDetach();
        return;
      }
      reasm_.assign((h.aux + 7) / 8, 0);
      reasm_total_ = h.aux;
      reasm_flags_ = h.flags;
      reasm_filled_ = h.bytes;
      reassembling_ = true;
      std::memcpy(reasm_.data(), payload, h.bytes);
      return Repost(slot);
    case MsgType::kFragment: {
      if (!reassembling_ || h.bytes == 0 || reasm_filled_ + h.bytes > reasm_total_)
        return Fail(Error(Err::kInvalidValue, "unexpected RDMA fragment"));
      std::memcpy(reinterpret_cast<std::byte*>(reasm_.data()) + reasm_filled_, payload, h.bytes);
      reasm_filled_ += h.bytes;
      Repost(slot);
      if (reasm_filled_ == reasm_total_) {
        InRecord r;
        r.flags = reasm_flags_;
        r.heap = std::move(reasm_);
        r.bytes = {reinterpret_cast<const std::byte*>(r.heap.data()), reasm_total_};
        reasm_ = {};
        reassembling_ = false;
        incoming_.push_back(std::move(r));
      }
      return;
    }
  }
  Fail(Error(Err::kInvalidValue, "unknown RDMA message type {}", h.type));
}

// ---- receiving ------------------------------------------------------------------------

void Channel::PostRecv(uint32_t slot) {
  if (!qp_) return;
  ibv_sge sge{reinterpret_cast<uintptr_t>(recv_mem_.data() + size_t{slot} * geo_.slot_bytes), geo_.slot_bytes, recv_mr_->lkey};
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.wr_id = WrId(kWrRecv, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (int e = ibv_post_recv(qp_->qp, &wr, &bad); e != 0) Fail(ErrnoStatus(Err::kDevicesUnavailable, "ibv_post_recv", e));
}

void Channel::Repost(uint32_t slot) {
  PostRecv(slot);
  to_return_++;
}

std::optional<InRecord> Channel::TakeRecord() {
  if (incoming_.empty()) return std::nullopt;
  InRecord r = std::move(incoming_.front());
  incoming_.pop_front();
  return r;
}

void Channel::Release(InRecord& r) {
  if (r.slot >= 0) {
    held_--;
    Repost(static_cast<uint32_t>(r.slot));
    r.slot = -1;
  }
  r.heap = {};
  r.bytes = {};
  MaybeReturnCredits();
}

void Channel::MaybeDetach() {
  if (!geo_.detach_queued || held_ <= geo_.recv_slots / 2) return;
  for (InRecord& r : incoming_) {
    if (held_ <= geo_.recv_slots / 4) break;
    if (r.slot < 0) continue;
    r.heap.assign((r.bytes.size() + 7) / 8, 0);
    std::memcpy(r.heap.data(), r.bytes.data(), r.bytes.size());
    r.bytes = {reinterpret_cast<const std::byte*>(r.heap.data()), r.bytes.size()};
    held_--;
    Repost(static_cast<uint32_t>(r.slot));
    r.slot = -1;
    detached_++;
  }
}

void Channel::MaybeReturnCredits() {
  // The last credit is kept for exactly this message, so it can always go out.
  if (to_return_ < std::max<uint32_t>(1, geo_.recv_slots / 4) || credits_ < 1 || !ok_to_send()) return;
  Status st = PostMessage(MsgType::kCredit, 0, 0, nullptr, 0, 0);
  if (st.ok()) credits_sent_++;
}

// ---- sending --------------------------------------------------------------------------

Status Channel::PostMessage(MsgType type, uint8_t flags, uint64_t aux, const OutRecord* from, uint64_t offset, size_t bytes,
                            ConstBytes payload) {
  uint32_t slot = free_send_.back();
  free_send_.pop_back();
  std::byte* p = send_mem_.data() + size_t{slot} * geo_.slot_bytes;
  SlotHeader h;
  h.type = static_cast<uint8_t>(type);
  h.flags = flags;
  h.credits = static_cast<uint16_t>(std::min<uint32_t>(to_return_, 0xffff));
  h.bytes = static_cast<uint32_t>(from != nullptr ? bytes : payload.size());
  h.aux = aux;
  std::memcpy(p, &h, sizeof(h));
  if (from != nullptr) GatherCopy(p + sizeof(h), *from, offset, bytes);
  else if (!payload.empty()) std::memcpy(p + sizeof(h), payload.data(), payload.size());
  ibv_sge sge{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(sizeof(h) + h.bytes), send_mr_->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = WrId(kWrSend, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (int e = ibv_post_send(qp_->qp, &wr, &bad); e != 0) {
    free_send_.push_back(slot);
    Fail(ErrnoStatus(Err::kDevicesUnavailable, "ibv_post_send", e));
    return failure_;
  }
  to_return_ -= h.credits;
  credits_--;
  sends_in_flight_++;
  msgs_sent_++;
  return Status::Ok();
}

Result<bool> Channel::SendSome(OutRecord& r) {
  if (!failure_.ok()) return failure_;
  uint32_t room = msg_bytes_ - static_cast<uint32_t>(sizeof(SlotHeader));
  while (r.sent < r.total) {
    if (!CanSend()) return false;
    size_t n = std::min<uint64_t>(room, r.total - r.sent);
    MsgType t = r.sent == 0 ? MsgType::kFrame : MsgType::kFragment;
    RETURN_IF_ERROR(PostMessage(t, r.flags, r.sent == 0 ? r.total : 0, &r, r.sent, n));
    r.sent += n;
  }
  return true;
}

Status Channel::SendSegment(const BulkDesc& segment) {
  if (!CanSend()) return failure_.ok() ? Error(Err::kUnknown, "SendSegment without credits") : failure_;
  return PostMessage(MsgType::kSegment, 0, 0, nullptr, 0, 0, AsBytes(&segment, sizeof(segment)));
}

Status Channel::SendAck(uint64_t count) {
  if (!CanSend()) return failure_.ok() ? Error(Err::kUnknown, "SendAck without credits") : failure_;
  return PostMessage(MsgType::kAck, 0, count, nullptr, 0, 0);
}

Status Channel::SendKeepalive() {
  if (!CanSend()) return failure_.ok() ? Error(Err::kUnknown, "SendKeepalive without credits") : failure_;
  Status st = PostMessage(MsgType::kCredit, 0, 0, nullptr, 0, 0);
  if (st.ok()) credits_sent_++;
  return st;
}

Status Channel::PostRead(uint64_t id, void* local, uint32_t lkey, uint64_t remote, uint32_t rkey, uint32_t bytes) {
  return PostOneSided(IBV_WR_RDMA_READ, id, local, lkey, remote, rkey, bytes);
}

Status Channel::PostWrite(uint64_t id, const void* local, uint32_t lkey, uint64_t remote, uint32_t rkey, uint32_t bytes) {
  return PostOneSided(IBV_WR_RDMA_WRITE, id, const_cast<void*>(local), lkey, remote, rkey, bytes);
}

Status Channel::PostOneSided(ibv_wr_opcode opcode, uint64_t id, void* local, uint32_t lkey, uint64_t remote,
                             uint32_t rkey, uint32_t bytes) {
  if (!failure_.ok()) return failure_;
  ibv_sge sge{reinterpret_cast<uintptr_t>(local), bytes, lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = WrId(kWrOneSided, id);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  if (int e = ibv_post_send(qp_->qp, &wr, &bad); e != 0) {
    Fail(ErrnoStatus(Err::kDevicesUnavailable,
                     opcode == IBV_WR_RDMA_READ ? "ibv_post_send(RDMA read)" : "ibv_post_send(RDMA write)", e));
    return failure_;
  }
  one_sided_++;
  return Status::Ok();
}

// ---- sleeping and liveness ------------------------------------------------------------

Status Channel::ArmCq() {
  if (armed_ || !qp_) return Status::Ok();
  if (int e = ibv_req_notify_cq(cq_.get(), 0); e != 0) {
    Fail(ErrnoStatus(Err::kDevicesUnavailable, "ibv_req_notify_cq", e));
    return failure_;
  }
  armed_ = true;
  return Status::Ok();
}

Channel::Wakeup Channel::WaitFds(int timeout_ms) const {
  struct pollfd p[3] = {{comp_->fd, POLLIN, 0}, {ec_->fd, POLLIN, 0}, {tcp_.get(), POLLIN | POLLRDHUP, 0}};
  Wakeup w;
  if (::poll(p, 3, timeout_ms) <= 0) return w;
  w.cq = p[0].revents != 0;
  w.cm = p[1].revents != 0;
  w.tcp = p[2].revents != 0;
  return w;
}

void Channel::HandleWakeup(const Wakeup& w) {
  if (w.cq) {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (Verbs().get_cq_event(comp_.get(), &cq, &ctx) == 0) {
      Verbs().ack_cq_events(cq, 1);
      armed_ = false;
    }
  }
  if (w.cm) CheckCmEvents();
  if (w.tcp && StreamClosed(tcp_.get())) Fail(Error(Err::kDevicesUnavailable, "the peer closed the session"));
}

void Channel::CheckCmEvents() {
  rdma_cm_event* ev = nullptr;
  while (Verbs().get_cm_event(ec_.get(), &ev) == 0) {
    CmEvent event(ev);
    switch (ev->event) {
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
      case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      case RDMA_CM_EVENT_ADDR_CHANGE:
        Fail(Error(Err::kDevicesUnavailable, "RDMA connection lost ({})", event.name()));
        break;
      default:
        LOG_DEBUG("rdma: ignoring CM event {}", event.name());
    }
  }
}

void Channel::ShutdownLivenessSocket() const { ::shutdown(tcp_.get(), SHUT_RDWR); }

void Channel::CheckLiveness() {
  CheckCmEvents();
  if (failure_.ok() && StreamClosed(tcp_.get())) Fail(Error(Err::kDevicesUnavailable, "the peer closed the session"));
}

void Channel::Quiesce(int timeout_ms) {
  uint64_t deadline = MonotonicNanos() + uint64_t(timeout_ms) * 1000000;
  while (failure_.ok() && sends_in_flight_ > 0 && MonotonicNanos() < deadline) {
    if (!Pump().ok()) break;
    if (sends_in_flight_ == 0) break;
    if (!ArmCq().ok()) break;
    if (Pump().ok() && sends_in_flight_ > 0) HandleWakeup(WaitFds(10));
  }
}

std::string Channel::Stats() const {
  return fmt::format("{} messages sent ({} credit returns), {} received ({} credit returns), {} records detached",
                     msgs_sent_, credits_sent_, msgs_received_, credits_received_, detached_);
}

}  // namespace remora::rdma

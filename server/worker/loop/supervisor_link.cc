#include "worker/loop/supervisor_link.h"

#include <poll.h>

#include <cerrno>

#include "control.capnp.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"

namespace remora::worker {
namespace {

constexpr int kAnswerTimeoutMs = 5000;  // the supervisor answers from its event loop at once

ControlEvent SupervisorGone() {
  ControlEvent ev;
  ev.reason = "the Remora server supervisor exited";
  return ev;
}

}  // namespace

Result<std::optional<IpcAnswer>> SupervisorLink::ReadOne(int timeout_ms) {
  std::vector<Fd> fds;
  auto frame = fs_.Read(timeout_ms, &fds);
  if (!frame.ok()) {
    if (frame.status().code() == Err::kTimeout) return std::optional<IpcAnswer>();
    // The supervisor is gone: nobody tracks this session's quota any more. Said once.
    if (!gone_) queued_.push_back(SupervisorGone());
    gone_ = true;
    return Error(Err::kDevicesUnavailable, "the Remora server supervisor exited");
  }
  std::optional<IpcAnswer> answer;
  Status st = GuardDecode("control message", [&]() -> Status {
    BodyReader r(frame->body);
    auto m = r.Root<control::ControlMessage>();
    ControlEvent ev;
    switch (m.which()) {
      case control::ControlMessage::SET_GPUS:
        ev.kind = ControlEvent::Kind::kSetDevices;
        for (int32_t g : m.getSetGpus()) ev.gpus.push_back(g);
        queued_.push_back(std::move(ev));
        return Status::Ok();
      case control::ControlMessage::END_SESSION:
        ev.kind = ControlEvent::Kind::kEndSession;
        ev.reason = m.getEndSession();
        queued_.push_back(std::move(ev));
        return Status::Ok();
      case control::ControlMessage::MIGRATE:
        ev.kind = ControlEvent::Kind::kMigrate;
        ev.url = m.getMigrate().getUrl();
        ev.token = m.getMigrate().getToken();
        queued_.push_back(std::move(ev));
        return Status::Ok();
      case control::ControlMessage::DATA_CONNECTION:
        // Only while the session starts (AwaitDataConnections); once per index, with its socket.
        if (fds.size() != 1 || data_connections_.count(m.getDataConnection()) > 0) data_malformed_ = true;
        else data_connections_[m.getDataConnection()] = std::move(fds[0]);
        return Status::Ok();
      case control::ControlMessage::IPC_RELEASE:
        ev.kind = ControlEvent::Kind::kIpcRelease;
        ev.export_id = m.getIpcRelease();
        queued_.push_back(std::move(ev));
        return Status::Ok();
      case control::ControlMessage::NCCL_ANSWER: {
        auto x = m.getNcclAnswer();
        ev.kind = ControlEvent::Kind::kNcclAnswer;
        ev.nccl_request = x.getRequestId();
        ev.nccl_status = x.getStatus();
        ev.nccl_id.assign(x.getId().begin(), x.getId().end());
        ev.clique_server = x.getCliqueServer();
        ev.clique_id = x.getCliqueId();
        queued_.push_back(std::move(ev));
        return Status::Ok();
      }
      case control::ControlMessage::NCCL_LOST: {
        auto x = m.getNcclLost();
        ev.kind = ControlEvent::Kind::kNcclLost;
        ev.clique_server = x.getCliqueServer();
        ev.clique_id = x.getCliqueId();
        ev.reason = Printable(std::string_view(x.getReason().cStr(), x.getReason().size()), 512);
        queued_.push_back(std::move(ev));
        return Status::Ok();
      }
      case control::ControlMessage::IPC_REPLY: {
        auto x = m.getIpcReply();
        IpcAnswer a;
        a.status = x.getStatus();
        a.export_id = x.getExportId();
        if (x.getHandle().size() == kIpcHandleBytes) std::copy(x.getHandle().begin(), x.getHandle().end(), a.handle.begin());
        a.real.assign(x.getReal().begin(), x.getReal().end());
        a.size = x.getSize();
        a.gpu = x.getGpu();
        a.importers = x.getImporters();
        if (!fds.empty()) a.fd = std::move(fds[0]);
        if (x.getRequestId() + 1 != next_request_) return Error(Err::kInvalidValue, "an IPC answer out of turn");
        answer = std::move(a);
        return Status::Ok();
      }
      default:
        return Status::Ok();  // nothing for a worker (or newer than it): ignored
    }
  });
  RETURN_IF_ERROR(st);
  return answer;
}

Result<std::vector<Fd>> SupervisorLink::AwaitDataConnections(int client_fd, uint32_t n, int timeout_ms) {
  uint64_t deadline = MonotonicNanos() + uint64_t(timeout_ms) * 1'000'000;
  while (data_connections_.size() < n) {
    if (data_malformed_ || (!data_connections_.empty() && data_connections_.rbegin()->first >= n))
      return Error(Err::kInvalidValue, "a malformed data connection hand-over");
    if (gone_) return Error(Err::kDevicesUnavailable, "the Remora server supervisor exited");
    for (const ControlEvent& ev : queued_)
      if (ev.kind == ControlEvent::Kind::kEndSession) return Error(Err::kDevicesUnavailable, "session ended: {}", ev.reason);
    uint64_t now = MonotonicNanos();
    if (now >= deadline)
      return Error(Err::kTimeout, "the client opened {} of its {} data connections", data_connections_.size(), n);
    struct pollfd p[2] = {{fd_, POLLIN, 0}, {client_fd, POLLRDHUP, 0}};
    int ready = ::poll(p, 2, static_cast<int>((deadline - now) / 1'000'000) + 1);
    if (ready < 0 && errno != EINTR) return ErrnoStatus(Err::kUnknown, "poll", errno);
    if (ready > 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
      return Error(Err::kDevicesUnavailable, "the client closed its connection after opening {} of its {} data connections",
                   data_connections_.size(), n);
    if (ready > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      auto r = ReadOne(kAnswerTimeoutMs);
      if (!r.ok()) return r.status();
    }
  }
  std::vector<Fd> out;
  for (auto& [index, fd] : data_connections_) out.push_back(std::move(fd));
  data_connections_.clear();
  return out;
}

Result<std::optional<ControlEvent>> SupervisorLink::Poll() {
  if (queued_.empty() && !gone_) {
    struct pollfd p = {fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) {
      auto r = ReadOne(1000);
      if (!r.ok() && !gone_) return r.status();
    }
  }
  if (queued_.empty()) return std::optional<ControlEvent>();
  ControlEvent ev = std::move(queued_.front());
  queued_.pop_front();
  return std::optional<ControlEvent>(std::move(ev));
}

Result<IpcAnswer> SupervisorLink::Ask(const IpcQuestion& q, int fd) {
  if (gone_) return Error(Err::kDevicesUnavailable, "the Remora server supervisor exited");
  uint64_t id = next_request_++;
  ScratchMessage msg;
  auto root = msg.InitRoot<control::ControlMessage>();
  switch (q.op) {
    case IpcQuestion::Op::kExport: {
      auto x = root.initIpcExport();
      x.setRequestId(id);
      x.setKind(q.kind);
      x.setGpu(q.gpu);
      x.setSize(q.size);
      x.setReal(capnp::Data::Reader(q.bytes.data(), q.bytes.size()));
      x.setLocalId(q.id);
      break;
    }
    case IpcQuestion::Op::kOpen: {
      auto x = root.initIpcOpen();
      x.setRequestId(id);
      x.setKind(q.kind);
      x.setHandle(capnp::Data::Reader(q.bytes.data(), q.bytes.size()));
      break;
    }
    case IpcQuestion::Op::kUnexport: {
      auto x = root.initIpcUnexport();
      x.setRequestId(id);
      x.setExportId(q.id);
      break;
    }
    case IpcQuestion::Op::kBorrow: {
      auto x = root.initQuotaBorrow();
      x.setRequestId(id);
      x.setGpu(q.gpu);
      x.setBytes(q.size);
      break;
    }
  }
  OutFrame f;
  f.kind = FrameKind::kNotice;
  f.body = msg.Flatten();
  RETURN_IF_ERROR(fd >= 0 ? fs_.Write(f, {}, std::span<const int>(&fd, 1)) : fs_.Write(f));
  uint64_t deadline = MonotonicNanos() + uint64_t{kAnswerTimeoutMs} * 1'000'000;
  for (;;) {
    uint64_t now = MonotonicNanos();
    if (now >= deadline) return Error(Err::kTimeout, "the supervisor did not answer an IPC request");
    ASSIGN_OR_RETURN(std::optional<IpcAnswer> a, ReadOne(static_cast<int>((deadline - now) / 1'000'000) + 1));
    if (a) return std::move(*a);
  }
}

void SupervisorLink::Tell(const char* what, ScratchMessage& msg) {
  if (gone_) return;
  OutFrame f;
  f.kind = FrameKind::kNotice;
  f.body = msg.Flatten();
  if (Status st = fs_.Write(f); !st.ok()) LOG_WARN("cannot tell the supervisor {}: {}", what, st.message());
}

Status SupervisorLink::NcclAsk(const NcclQuestion& q) {
  if (gone_) return Error(Err::kDevicesUnavailable, "the Remora server supervisor exited");
  ScratchMessage msg;
  auto x = msg.InitRoot<control::ControlMessage>().initNcclAsk();
  x.setRequestId(q.request);
  x.setOp(static_cast<uint8_t>(q.op));
  x.setId(capnp::Data::Reader(q.id.data(), q.id.size()));
  x.setCliqueServer(q.clique_server);
  x.setCliqueId(q.clique_id);
  OutFrame f;
  f.kind = FrameKind::kNotice;
  f.body = msg.Flatten();
  return fs_.Write(f);
}

void SupervisorLink::Closed(uint64_t export_id) {
  ScratchMessage msg;
  msg.InitRoot<control::ControlMessage>().setIpcClose(export_id);
  Tell("about a closed IPC open", msg);
}

void SupervisorLink::MigrateFailed(const std::string& why) {
  ScratchMessage msg;
  msg.InitRoot<control::ControlMessage>().setMigrateFailed(why);
  Tell("why a move failed", msg);
}

std::optional<uint64_t> SupervisorLink::WaitRelease() {
  for (;;) {
    for (auto it = queued_.begin(); it != queued_.end(); ++it) {
      if (it->kind != ControlEvent::Kind::kIpcRelease) continue;
      uint64_t id = it->export_id;
      queued_.erase(it);
      return id;
    }
    if (gone_) return std::nullopt;
    if (!ReadOne(1000).ok()) return std::nullopt;
  }
}

}  // namespace remora::worker

// The supervisor's end of CUDA IPC between sessions: workers register exports and ask to
// open handles over their control sockets (server/common/control.capnp); the registry
// (ipc_registry.h) decides; the ledger keeps an ended exporter's still-open memory charged.
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cstring>

#include "control.capnp.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/message.h"
#include "supervisor/supervisor.h"

namespace remora::server {
namespace {

constexpr int kControlReadMs = 200;  // a frame a worker started must arrive whole by then

IpcParty PartyOf(const SessionState& s) { return IpcParty{s.pid, s.id, s.tenant, s.ledger_slot}; }

}  // namespace

void Supervisor::WatchControl(SessionState& s) {
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = kControlTag + static_cast<uint64_t>(s.pid);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, s.control.get(), &ev) != 0)
    LOG_WARN("session {}: cannot watch its worker's control socket ({}): IPC requests will not be answered", s.id,
             std::strerror(errno));
}

void Supervisor::OnControl(pid_t pid) {
  auto it = sessions_.find(pid);
  if (it == sessions_.end()) return;
  SessionState& s = it->second;
  FrameSocket fs(s.control.get());
  std::vector<Fd> fds;
  auto frame = fs.Read(kControlReadMs, &fds);
  if (!frame.ok()) {
    // The worker closed its end (it is ending: Reap follows) or sent half a frame.
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.control.get(), nullptr);
    LOG_DEBUG("session {}: control socket: {}", s.id, frame.status().message());
    return;
  }
  uint64_t request = 0;
  bool answer = false;
  uint32_t result = kCuSuccess;
  IpcHandle handle{};
  bool has_handle = false;
  uint64_t export_id = 0;
  int opened_fd = -1;
  IpcOpened opened;
  int importers = 0;
  std::vector<IpcAction> actions;
  Status st = GuardDecode("control message", [&]() -> Status {
    BodyReader r(frame->body);
    auto m = r.Root<control::ControlMessage>();
    switch (m.which()) {
      case control::ControlMessage::QUOTA_BORROW: {
        auto x = m.getQuotaBorrow();
        OnQuotaBorrow(pid, x.getRequestId(), x.getBytes());  // answered when the pool has
        return Status::Ok();
      }
      case control::ControlMessage::IPC_EXPORT: {
        auto x = m.getIpcExport();
        request = x.getRequestId();
        answer = true;
        IpcExportRequest req;
        std::optional<IpcKind> kind = IpcKindOf(x.getKind());
        if (!kind) return Error(Err::kInvalidValue, "an export of unknown kind {}", x.getKind());
        req.kind = *kind;
        req.gpu = x.getGpu();
        req.size = x.getSize();
        req.real.assign(x.getReal().begin(), x.getReal().end());
        req.local_id = x.getLocalId();
        if (fds.size() > 1) return Error(Err::kInvalidValue, "an export with {} descriptors", fds.size());
        if (!fds.empty()) req.fd = std::move(fds[0]);
        std::string why;
        auto made = ipc_.Export(PartyOf(s), std::move(req), &export_id, &why);
        if (!made.ok()) {
          result = made.status().raw();
          LOG_PEER(s.peer_log, Warn, "session {} (tenant '{}', {}@{} pid {}) was refused an IPC export: {}", s.id,
                   s.tenant, s.client.user, s.client.hostname, s.client.pid, why);
          return Status::Ok();
        }
        handle = *made;
        has_handle = true;
        LOG_DEBUG("session {} (tenant '{}') exported {} {} as IPC export {}", s.id, s.tenant,
                  x.getKind() == 1 ? "an event" : x.getKind() == 3 ? "a memory pool" : "memory of",
                  x.getKind() == 1 || x.getKind() == 3 ? std::string() : FormatSize(x.getSize()), export_id);
        return Status::Ok();
      }
      case control::ControlMessage::IPC_OPEN: {
        auto x = m.getIpcOpen();
        request = x.getRequestId();
        answer = true;
        std::string why;
        auto data = x.getHandle();
        std::optional<IpcKind> kind = IpcKindOf(x.getKind());
        if (!kind) return Error(Err::kInvalidValue, "an open of unknown kind {}", x.getKind());
        auto o = ipc_.Open(PartyOf(s), *kind, std::span<const uint8_t>(data.begin(), data.size()), &why);
        if (!o.ok()) {
          result = o.status().raw();
          LOG_PEER(s.peer_log, Warn, "session {} (tenant '{}', {}@{} pid {}) was refused an IPC open: {}", s.id,
                   s.tenant, s.client.user, s.client.hostname, s.client.pid, why);
          return Status::Ok();
        }
        opened = *o;
        export_id = o->export_id;
        opened_fd = o->fd;
        return Status::Ok();
      }
      case control::ControlMessage::NCCL_ASK: {
        auto x = m.getNcclAsk();
        NcclIdBytes id{};
        if (x.getId().size() == id.size()) std::copy(x.getId().begin(), x.getId().end(), id.begin());
        else if (x.getOp() != 2) return Error(Err::kInvalidValue, "an NCCL unique id of {} bytes", x.getId().size());
        OnNcclAsk(pid, x.getRequestId(), x.getOp(), id, NcclClique{x.getCliqueServer(), x.getCliqueId()});
        return Status::Ok();
      }
      case control::ControlMessage::IPC_CLOSE:
        actions = ipc_.Close(pid, m.getIpcClose());
        return Status::Ok();
      case control::ControlMessage::MIGRATE_FAILED:
        // Taken only as the answer to a move the administrator ordered, once (N6): a report
        // nobody asked for is the client's (or a compromised worker's) and is dropped.
        if (!s.migrate_ordered) {
          LOG_PEER(s.peer_log, Info, "session {} (tenant '{}'): a report of a failed move nobody ordered: ignored",
                   s.id, s.tenant);
          return Status::Ok();
        }
        s.migrate_ordered = false;
        // The client's words: escaped and bounded before they are kept, logged or shown.
        s.migrate_failed = Printable(std::string_view(m.getMigrateFailed().cStr(), m.getMigrateFailed().size()), 512);
        if (s.migrate_failed.empty()) s.migrate_failed = "the move failed (no reason given)";
        LOG_WARN("session {} (tenant '{}') did not move: {}", s.id, s.tenant, s.migrate_failed);
        return Status::Ok();
      case control::ControlMessage::IPC_UNEXPORT: {
        auto x = m.getIpcUnexport();
        request = x.getRequestId();
        answer = true;
        importers = ipc_.Unexport(pid, x.getExportId());
        if (importers < 0) {
          result = kCuInvalidHandle;
          importers = 0;
        } else if (importers > 0) {
          LOG_INFO("session {} freed IPC export {} while {} open(s) remain: kept (and charged) until they close", s.id,
                   x.getExportId(), importers);
        }
        return Status::Ok();
      }
      default:
        return Error(Err::kInvalidValue, "unexpected control message from a worker");
    }
  });
  if (!st.ok()) {
    LOG_WARN("session {}: {}; ending it", s.id, st.message());
    SignalWorker(pid, SIGKILL);
    return;
  }
  if (answer) {
    Status sent = SendControl(s, [&](void* p) {
      auto rep = static_cast<control::ControlMessage::Builder*>(p)->initIpcReply();
      rep.setRequestId(request);
      rep.setStatus(result);
      rep.setExportId(export_id);
      rep.setImporters(static_cast<uint32_t>(importers));
      if (has_handle) rep.setHandle(capnp::Data::Reader(handle.data(), handle.size()));
      if (opened.real != nullptr) {
        rep.setReal(capnp::Data::Reader(opened.real->data(), opened.real->size()));
        rep.setSize(opened.size);
        rep.setGpu(opened.gpu);
      }
    }, result == kCuSuccess ? opened_fd : -1);
    if (!sent.ok()) {
      LOG_WARN("session {}: cannot answer its worker's IPC request: {}", s.id, sent.message());
      // An open it never learns of must not stay counted.
      if (opened.real != nullptr) actions = ipc_.Close(pid, export_id);
    }
  }
  ApplyIpcActions(actions);
}

bool Supervisor::IpcSessionEnded(SessionState& s) {
  std::map<int, uint64_t> open = ipc_.OpenBytesOf(s.pid);
  std::vector<IpcAction> actions = ipc_.SessionEnded(s.pid);
  bool keep = !open.empty();
  if (keep) {
    // Keep exactly the bytes still open elsewhere; everything else returns to the tenant now.
    uint64_t returned = 0, kept = 0;
    for (uint32_t g = 0; g < kLedgerMaxGpus; g++) {
      uint64_t used = ledger_->SessionUsed(s.ledger_slot, g);
      uint64_t hold = open.count(static_cast<int>(g)) ? open[static_cast<int>(g)] : 0;
      if (used > hold) {
        ledger_->Release(s.ledger_slot, g, used - hold);
        returned += used - hold;
      }
      kept += std::min(used, hold);
    }
    ipc_held_slots_[s.ledger_slot] = s.tenant;
    LOG_INFO("session {} (tenant '{}') ended with {} of its memory open in other sessions: kept and charged to it "
             "until they close it ({} returned to the tenant)", s.id, s.tenant, FormatSize(kept), FormatSize(returned));
  }
  ApplyIpcActions(actions);
  return keep;
}

void Supervisor::ApplyIpcActions(const std::vector<IpcAction>& actions) {
  for (const IpcAction& a : actions) {
    if (a.kind == IpcAction::Kind::kRelease) {
      auto it = sessions_.find(a.pid);
      if (it == sessions_.end()) continue;
      Status st = SendControl(it->second, [&](void* p) {
        static_cast<control::ControlMessage::Builder*>(p)->setIpcRelease(a.export_id);
      });
      if (!st.ok()) LOG_WARN("session {}: cannot tell its worker to free IPC export {}: {}", it->second.id, a.export_id,
                             st.message());
      continue;
    }
    auto held = ipc_held_slots_.find(a.ledger_slot);
    if (held == ipc_held_slots_.end()) continue;
    ledger_->Release(a.ledger_slot, static_cast<uint32_t>(a.gpu), a.bytes);
    LOG_INFO("IPC export {} of an ended session of tenant '{}' closed by its last importer: {} returned", a.export_id,
             held->second, FormatSize(a.bytes));
    if (a.slot_empty) {
      ledger_->CloseSession(a.ledger_slot);
      ipc_held_slots_.erase(held);
    }
  }
}

}  // namespace remora::server

// SupervisorLink: the worker's end of its control socket (fd 4, server/common/control.capnp).
// The supervisor's notices (GPU set changes, the session's end, IPC releases) are polled by
// the executor; IPC questions (worker/session/ipc_link.h) are asked and answered in place, notices
// arriving meanwhile kept for the next Poll. Executor thread only.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "remora/protocol/frame_socket.h"
#include "remora/protocol/message.h"
#include "worker/session/executor.h"

namespace remora::worker {

class SupervisorLink final : public ControlSource {
 public:
  explicit SupervisorLink(int fd) : fd_(fd), fs_(fd) {}
  // A tcp session's `n` data connections, in index order, as the supervisor hands them over
  // once the client's DataHello proved each belongs here. Fails when they do not all come
  // within timeout_ms, or when the client's own connection (`client_fd`) closes first (a
  // client killed right after its handshake: its worker must not wait out the deadline).
  // Notices arriving meanwhile (a GPU detached, the session ended) are kept for Poll.
  Result<std::vector<Fd>> AwaitDataConnections(int client_fd, uint32_t n, int timeout_ms);
  Result<std::optional<ControlEvent>> Poll() override;
  Result<IpcAnswer> Ask(const IpcQuestion& q, int fd) override;
  void Closed(uint64_t export_id) override;
  void MigrateFailed(const std::string& why) override;
  Status NcclAsk(const NcclQuestion& q) override;
  std::optional<uint64_t> WaitRelease() override;

 private:
  // Reads one message (waiting up to timeout_ms): a notice is queued, an answer returned.
  Result<std::optional<IpcAnswer>> ReadOne(int timeout_ms);
  // Sends the supervisor `msg`, a message that needs no answer (`what` names it in a
  // warning if it cannot be sent); nothing once the supervisor is gone.
  void Tell(const char* what, ScratchMessage& msg);

  int fd_;
  FrameSocket fs_;
  bool gone_ = false;
  uint64_t next_request_ = 1;
  std::deque<ControlEvent> queued_;
  std::map<uint32_t, Fd> data_connections_;  // handed over, by index, until taken
  bool data_malformed_ = false;
};

}  // namespace remora::worker

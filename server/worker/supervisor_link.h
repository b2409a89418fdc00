// SupervisorLink: the worker's end of its control socket (fd 4, server/common/control.capnp).
// The supervisor's notices (GPU set changes, the session's end, IPC releases) are polled by
// the executor; IPC questions (worker/ipc_link.h) are asked and answered in place, notices
// arriving meanwhile kept for the next Poll. Executor thread only.
#pragma once

#include <deque>
#include <optional>

#include "remora/protocol/frame_socket.h"
#include "worker/executor.h"

namespace remora::worker {

class SupervisorLink final : public ControlSource {
 public:
  explicit SupervisorLink(int fd) : fd_(fd), fs_(fd) {}
  Result<std::optional<ControlEvent>> Poll() override;
  Result<IpcAnswer> Ask(const IpcQuestion& q, int fd) override;
  void Closed(uint64_t export_id) override;
  std::optional<uint64_t> WaitRelease() override;

 private:
  // Reads one message (waiting up to timeout_ms): a notice is queued, an answer returned.
  Result<std::optional<IpcAnswer>> ReadOne(int timeout_ms);

  int fd_;
  FrameSocket fs_;
  bool gone_ = false;
  uint64_t next_request_ = 1;
  std::deque<ControlEvent> queued_;
};

}  // namespace remora::worker

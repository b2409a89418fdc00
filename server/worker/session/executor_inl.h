#pragma once

#include "remora/protocol/message.h"

namespace remora::worker {

template <typename Fill>
Status Executor::PostReply(uint64_t tag, const Status& status, Fill&& fill, uint64_t bulk_bytes) {
  ScratchMessage msg;
  auto r = msg.InitRoot<wire::Reply>();
  r.setError(status.raw());
  r.setErrorDomain(static_cast<uint16_t>(status.domain()));
  if (!status.ok()) r.setMessage(status.message());
  if (!deferred_.ok()) {
    r.setAsyncError(deferred_.raw());
    r.setAsyncErrorDomain(static_cast<uint16_t>(deferred_.domain()));
    r.setAsyncMessage(deferred_.message());
    deferred_ = Status();
  }
  r.setDeviceGeneration(generation_);
  if (int captures = session_.graphs().active_captures(); captures > 0) r.setCapturesActive(static_cast<uint32_t>(captures));
  fill(r);
  OutFrame f;
  f.kind = FrameKind::kReply;
  f.tag = tag;
  f.body = msg.Flatten();
  return replies_.Post(f, bulk_bytes);
}

template <typename Fill>
Status Executor::PostNotice(Fill&& fill) {
  ScratchMessage msg;
  auto n = msg.InitRoot<wire::Notice>();
  fill(n);
  OutFrame f;
  f.kind = FrameKind::kNotice;
  f.body = msg.Flatten();
  return replies_.Post(f, 0);
}

}  // namespace remora::worker

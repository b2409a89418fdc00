// The interface between the session's NCCL (nccl_session.h) and an emulation of NCCL that a
// backend provides (the host backend's, host_lib_nccl.h): what only an emulation can tell.
#pragma once

#include <cstdint>

namespace remora::worker {

// What the host backend's emulation (host_lib_nccl.cc) offers beyond NCCL's API: the memory it
// holds on `gpu` for its communicators (the cuda backend measures the process instead), and an
// abort of everything it runs (the session's end: work blocked waiting for another rank ends,
// even that of communicators the application destroyed).
class NcclEmulation {
 public:
  virtual ~NcclEmulation() = default;
  virtual uint64_t InternalBytes(int gpu) = 0;
  virtual void AbortAll() = 0;
};

}  // namespace remora::worker

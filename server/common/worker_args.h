// The contract between the supervisor and the worker processes it spawns: argv flags and
// inherited descriptor numbers. Both sides include this header; nothing else defines it.
#pragma once

namespace remora::worker_args {

// Descriptors a session worker inherits.
inline constexpr int kClientFd = 3;   // the client's socket (after the handshake)
inline constexpr int kControlFd = 4;  // socketpair with the supervisor (control.capnp frames)
inline constexpr int kLedgerFd = 5;   // memfd holding the quota ledger
inline constexpr int kStatsFd = 6;    // memfd of the session's counters (common/session_stats.h)
inline constexpr int kFirstExtraFd = 7;  // transport descriptors (the shm segment), --extra-fds of them

// Probe mode (`remora-worker --probe --backend B`): prints the GPU inventory, one line per
// GPU: "gpu\t<index>\t<total bytes>\t<uuid hex>\t<pci bus id>\t<name>", after a first line
// "backend\t<name>\t<emulated 0|1>" and "driver\t<CUDA_VERSION-style version>". Exit status 0, or 1 with the reason on stderr.

}  // namespace remora::worker_args

// The contract between the supervisor and the worker processes it spawns: argv flags and
// inherited descriptor numbers. Both sides include this header; nothing else defines it.
#pragma once

namespace remora::worker_args {

// Descriptors a session worker inherits.
inline constexpr int kClientFd = 3;   // the client's socket (after the handshake)
inline constexpr int kControlFd = 4;  // socketpair with the supervisor (control.capnp frames)
inline constexpr int kLedgerFd = 5;   // memfd holding the quota ledger, writable: the worker maps
                                      // its own slot's page from it, then closes it
inline constexpr int kStatsFd = 6;    // memfd of the session's counters (common/session_stats.h)
inline constexpr int kLedgerReadFd = 7;  // the ledger's memfd again, read-only
inline constexpr int kModuleCacheFd = 8; // the tenant's module cache directory (with --module-cache-budget)
inline constexpr int kFirstExtraFd = 9;  // transport descriptors (the shm segment), --extra-fds of them

// With --encrypted, the first control message is sessionKeys (the data path's keys never
// appear on a command line). --limits carries SessionLimits::Format(). With --data-streams N
// (tcp), the next N control messages are dataConnection, each with its socket (SCM_RIGHTS).

// Probe mode (`remora-worker --probe --backend B`): prints the GPU inventory, one line per
// GPU: "gpu\t<index>\t<total bytes>\t<uuid hex>\t<pci bus id>\t<name>", after a first line
// "backend\t<name>\t<emulated 0|1>" and "driver\t<CUDA_VERSION-style version>". Exit status 0, or 1 with the reason on stderr.

}  // namespace remora::worker_args

// The worker's own confinement (docs/SECURITY.md, F7), entered before it reads anything a
// client sent. The supervisor has already started it as the worker user with no
// capabilities, a clean environment and only its own descriptors; here the worker
//  - becomes non-dumpable (no core dumps of tenant data; /proc/PID of it is root's, so
//    other processes of the worker user cannot read its memory or attach to it),
//  - sets no_new_privs (no set-uid program can give it privileges back),
//  - installs a seccomp filter.
//
// The filter is a deny-list, not an allow-list: the NVIDIA driver's set of system calls is
// not documented and cannot be exercised here without a GPU, and an allow-list that misses
// one breaks the real driver in the field. It denies (EPERM) what a GPU session never
// needs and an attacker would: ptrace and cross-process memory access, signals to other
// processes, new namespaces, mounts, module and kexec loading, bpf, perf events, keyrings,
// io_uring, userfaultfd, raw I/O ports, clock and host changes, reboot. clone3 answers ENOSYS
// (its flags cannot be inspected; glibc then uses clone, whose flags can), and clone with a
// namespace flag is denied. Non-native system call ABIs (x32, i386) are refused.
#pragma once

#include "remora/base/status.h"

namespace remora::worker {

// Applies everything above to the calling process (and threads it creates afterwards).
Status EnterSandbox();

}  // namespace remora::worker

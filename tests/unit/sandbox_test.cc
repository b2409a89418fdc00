// server/worker: the worker's seccomp sandbox (docs/SECURITY.md, F7), entered by a forked
// child: what a compromised worker would try is refused (a new process among it); what a
// session needs still works.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "worker/loop/sandbox.h"

namespace remora::worker {
namespace {

// Runs `probe` in a sandboxed child; its exit status (0: all as expected, else the number
// of the failing check).
int InSandbox(int (*probe)()) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!EnterSandbox().ok()) ::_exit(100);
    ::_exit(probe());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

TEST(Sandbox, DangerousCallsAreRefused) {
  int rc = InSandbox([]() -> int {
    if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != -1 || errno != EPERM) return 1;
    if (::unshare(CLONE_NEWUSER) != -1 || errno != EPERM) return 2;
    if (::unshare(CLONE_NEWNS) != -1 || errno != EPERM) return 3;
    if (::mount("none", "/tmp", "tmpfs", 0, nullptr) != -1 || errno != EPERM) return 4;
    if (::kill(::getppid(), 0) != -1 || errno != EPERM) return 5;  // another process
    if (::kill(0, 0) != -1 || errno != EPERM) return 6;           // the process group
    if (::syscall(SYS_bpf, 0, nullptr, 0) != -1 || errno != EPERM) return 7;
    if (::syscall(SYS_process_vm_readv, ::getppid(), nullptr, 0, nullptr, 0, 0) != -1 || errno != EPERM) return 8;
    if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) return 9;
    if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) return 10;
    // No new process (issue 40, N2: one could outlive the worker and keep its ledger page):
    // fork, vfork-style clone (posix_spawn) and clone without CLONE_THREAD.
    pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    if (child != -1 || errno != EPERM) return 11;
    if (::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0) != -1 || errno != EPERM) return 12;
    if (::syscall(SYS_clone, CLONE_VM | CLONE_VFORK | SIGCHLD, nullptr, nullptr, nullptr, 0) != -1 || errno != EPERM)
      return 13;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "check " << rc << " was allowed";
}

TEST(Sandbox, WhatASessionNeedsStillWorks) {
  int rc = InSandbox([]() -> int {
    if (::kill(::getpid(), 0) != 0) return 1;  // signals to itself
    int ran = 0;
    std::thread t([&] { ran = 1; });         // threads (clone with CLONE_THREAD, no namespaces)
    t.join();
    if (ran != 1) return 2;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "check " << rc << " failed";
}

}  // namespace
}  // namespace remora::worker

#include "worker/loop/sandbox.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "remora/base/util.h"

namespace remora::worker {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
constexpr uint32_t kX32Bit = 0x40000000;  // __X32_SYSCALL_BIT
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
constexpr uint32_t kX32Bit = 0;
#else
#error "seccomp filter: unsupported architecture"
#endif

// System calls a GPU session never needs: EPERM.
const int kDenied[] = {
    __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev, __NR_kcmp,
    __NR_mount, __NR_umount2, __NR_pivot_root, __NR_chroot, __NR_setns, __NR_unshare,
    __NR_init_module, __NR_finit_module, __NR_delete_module, __NR_kexec_load, __NR_kexec_file_load,
    __NR_bpf, __NR_perf_event_open, __NR_userfaultfd,
    __NR_keyctl, __NR_add_key, __NR_request_key,
    __NR_swapon, __NR_swapoff, __NR_reboot, __NR_syslog, __NR_acct, __NR_quotactl,
    __NR_open_by_handle_at, __NR_name_to_handle_at, __NR_lookup_dcookie, __NR_fanotify_init,
    __NR_settimeofday, __NR_clock_settime, __NR_clock_adjtime, __NR_adjtimex,
    __NR_sethostname, __NR_setdomainname, __NR_vhangup, __NR_personality,
    __NR_tkill, __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register,
#if defined(__x86_64__)
    __NR_fork, __NR_vfork,  // (and clone without CLONE_THREAD, below): no process outlives the worker
    __NR_iopl, __NR_ioperm, __NR_uselib, __NR__sysctl, __NR_create_module, __NR_get_kernel_syms,
    __NR_query_module, __NR_nfsservctl,
#endif
#ifdef __NR_pidfd_getfd
    __NR_pidfd_getfd,
#endif
#ifdef __NR_pidfd_send_signal
    __NR_pidfd_send_signal,
#endif
#ifdef __NR_fsopen
    __NR_fsopen, __NR_fsconfig, __NR_fsmount, __NR_fspick, __NR_move_mount, __NR_open_tree,
#endif
#ifdef __NR_mount_setattr
    __NR_mount_setattr,
#endif
};

constexpr uint32_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                                     CLONE_NEWNET | CLONE_NEWCGROUP;

constexpr uint32_t kOffNr = offsetof(struct seccomp_data, nr);
constexpr uint32_t kOffArch = offsetof(struct seccomp_data, arch);
constexpr uint32_t kOffArg0 = offsetof(struct seccomp_data, args[0]);

sock_filter Stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return BPF_JUMP(code, k, jt, jf); }

std::vector<sock_filter> BuildFilter(pid_t self) {
  const uint32_t kAllow = SECCOMP_RET_ALLOW;
  const uint32_t kEperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  const uint32_t kEnosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  std::vector<sock_filter> f;
  // Only the native ABI.
  f.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kOffArch));
  f.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0));
  f.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  f.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kOffNr));
  if (kX32Bit != 0) {
    f.push_back(Jump(BPF_JMP | BPF_JGE | BPF_K, kX32Bit, 0, 1));
    f.push_back(Stmt(BPF_RET | BPF_K, kEperm));
  }
  for (int nr : kDenied) {
    f.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    f.push_back(Stmt(BPF_RET | BPF_K, kEperm));
  }
#ifdef __NR_clone3
  f.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1));
  f.push_back(Stmt(BPF_RET | BPF_K, kEnosys));
#else
  (void)kEnosys;
#endif
  // clone: threads only (no new process, which could outlive the worker and keep its
  // writable ledger page after the slot went to another session: N2), no new namespaces.
  f.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 6));
  f.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kOffArg0));
  f.push_back(Jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0));
  f.push_back(Stmt(BPF_RET | BPF_K, kEperm));
  f.push_back(Jump(BPF_JMP | BPF_JSET | BPF_K, kNamespaceFlags, 0, 1));
  f.push_back(Stmt(BPF_RET | BPF_K, kEperm));
  f.push_back(Stmt(BPF_RET | BPF_K, kAllow));
  // Signals only to this process: kill, tgkill, rt_sigqueueinfo and rt_tgsigqueueinfo take
  // the target process first.
  for (int nr : {__NR_kill, __NR_tgkill, __NR_rt_sigqueueinfo, __NR_rt_tgsigqueueinfo}) {
    f.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 4));
    f.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kOffArg0));
    f.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(self), 0, 1));
    f.push_back(Stmt(BPF_RET | BPF_K, kAllow));
    f.push_back(Stmt(BPF_RET | BPF_K, kEperm));
  }
  f.push_back(Stmt(BPF_RET | BPF_K, kAllow));
  return f;
}

}  // namespace

Status EnterSandbox() {
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return ErrnoStatus(Err::kInitializationError, "prctl(PR_SET_DUMPABLE)", errno);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return ErrnoStatus(Err::kInitializationError, "prctl(PR_SET_NO_NEW_PRIVS)", errno);
  std::vector<sock_filter> filter = BuildFilter(::getpid());
  struct sock_fprog prog = {static_cast<unsigned short>(filter.size()), filter.data()};
  // Every thread of the process, including those the driver already started.
  if (::syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0)
    return ErrnoStatus(Err::kInitializationError, "seccomp(SECCOMP_SET_MODE_FILTER)", errno);
  return Status::Ok();
}

}  // namespace remora::worker

/* remora-worker-exec: the one privileged step of starting a session worker
 * (docs/SECURITY.md, "The server holds no privilege"; finding N10).
 *
 *   remora-worker-exec exec [--stable-addresses] [--env NAME=VALUE]... -- [WORKER ARGUMENTS...]
 *   remora-worker-exec signal PID SIGNAL
 *
 * Installed beside remora-worker (/usr/libexec/remora/), owner root, group remora, mode 0750,
 * with the file capabilities cap_setuid,cap_setgid=ep (setuid root where the filesystem has
 * none): only the server's group may run it. It becomes the user REMORA_WORKER_USER
 * ("remora-worker"; no other user, never root) with that user's groups, gives up every
 * capability (and the bounding set where it can), sets no_new_privs, and then
 *  - exec: executes remora-worker, the file beside it (owned by root or by this file's owner,
 *    writable by no one else), with the given arguments and environment (passed as
 *    arguments: the dynamic loader drops LD_LIBRARY_PATH and the like from a privileged
 *    program's environment), keeping every descriptor it was given;
 *  - signal: sends SIGNAL to PID, which the kernel permits only if PID runs as that user
 *    (the server, which shares no uid with its workers, ends them this way).
 * Nothing else: its caller gains the worker user's rights, which a worker has anyway, and
 * no more. Exit status: what the worker exits with; 126 if it could not be started; for
 * signal 0, 3 if there is no such process of the worker user, 1 otherwise; 2 on a usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef REMORA_WORKER_USER
#define REMORA_WORKER_USER "remora-worker"
#endif
#define MAX_GROUPS 256
#define MAX_ENV 256

static void die(int status, const char *what) {
  fprintf(stderr, "remora-worker-exec: %s%s%s\n", what, errno ? ": " : "", errno ? strerror(errno) : "");
  exit(status);
}

static void usage(void) {
  errno = 0;
  die(2, "usage: remora-worker-exec exec [--stable-addresses] [--env NAME=VALUE]... -- [ARGS...] | signal PID SIGNAL");
}

static int last_cap(void) {
  int last = 40;
  FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
  if (f) {
    if (fscanf(f, "%d", &last) != 1) last = 40;
    fclose(f);
  }
  return last;
}

/* Becomes the worker user for good: groups, gid, uid, no capabilities, no_new_privs. */
static void become_worker(void) {
  struct passwd *pw;
  gid_t groups[MAX_GROUPS];
  int n = MAX_GROUPS, cap;
  uid_t uid, r, e, s;
  gid_t gid, rg, eg, sg;
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  errno = 0;
  pw = getpwnam(REMORA_WORKER_USER);
  if (pw == NULL) die(126, "no user " REMORA_WORKER_USER " on this host");
  uid = pw->pw_uid;
  gid = pw->pw_gid;
  if (uid == 0 || gid == 0) {
    errno = 0;
    die(126, "the user " REMORA_WORKER_USER " is root or in group root: refused");
  }
  if (getgrouplist(REMORA_WORKER_USER, gid, groups, &n) < 0) die(126, "too many groups of " REMORA_WORKER_USER);
  for (int i = 0; i < n; i++)
    if (groups[i] == 0) {
      errno = 0;
      die(126, "the user " REMORA_WORKER_USER " is in group root: refused");
    }
  /* Only a process with CAP_SETPCAP (a setuid-root start) can empty the bounding set; with
   * file capabilities it stays as the service manager set it, and no_new_privs keeps the
   * worker from ever gaining anything in it. */
  for (cap = last_cap(); cap >= 0; cap--) (void)prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  if (setgroups((size_t)n, groups) != 0) die(126, "setgroups (is this file setuid root or cap_setgid+ep?)");
  if (setresgid(gid, gid, gid) != 0) die(126, "setresgid");
  if (setresuid(uid, uid, uid) != 0) die(126, "setresuid (is this file setuid root or cap_setuid+ep?)");
  if (getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid || getresgid(&rg, &eg, &sg) != 0 || rg != gid ||
      eg != gid || sg != gid) {
    errno = 0;
    die(126, "the user change did not take");
  }
  (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  memset(d, 0, sizeof(d));
  if (syscall(SYS_capset, &h, d) != 0) die(126, "capset");
  if (syscall(SYS_capget, &h, d) != 0 || d[0].effective || d[1].effective || d[0].permitted || d[1].permitted) {
    errno = 0;
    die(126, "capabilities remain");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die(126, "prctl(PR_SET_NO_NEW_PRIVS)");
}

/* remora-worker beside this program, opened before the user change (its directory need not
 * be reachable by the worker user): a regular file of root or of this file's owner that no
 * one else may write. */
static int open_worker(void) {
  char self[4096], path[4200];
  struct stat me, st;
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  char *slash;
  int fd;
  if (len <= 0) die(126, "readlink(/proc/self/exe)");
  self[len] = '\0';
  if (stat("/proc/self/exe", &me) != 0) die(126, "stat(/proc/self/exe)");
  slash = strrchr(self, '/');
  if (slash == NULL) die(126, "where is this program?");
  *slash = '\0';
  snprintf(path, sizeof(path), "%s/remora-worker", self);
  fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) die(126, path);
  errno = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) die(126, "remora-worker beside this program is not a regular file");
  if ((st.st_uid != 0 && st.st_uid != me.st_uid) || (st.st_mode & 022) != 0)
    die(126, "remora-worker beside this program must belong to root (or to this program's owner) and be writable by no "
             "one else");
  return fd;
}

static int run_exec(int argc, char **argv) {
  char *envp[MAX_ENV + 1];
  int nenv = 0, i = 2, stable = 0, fd;
  char **args;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--stable-addresses") == 0) {
      stable = 1;
    } else if (strcmp(argv[i], "--env") == 0 && i + 1 < argc && strchr(argv[i + 1], '=') != NULL && nenv < MAX_ENV) {
      envp[nenv++] = argv[++i];
    } else {
      usage();
    }
  }
  if (i >= argc) usage();
  envp[nenv] = NULL;
  fd = open_worker();
  become_worker();
  /* Cleared by the kernel when a privileged program starts, so it is asked for here. Best
   * effort: a container's seccomp profile may refuse it (a later move then fails cleanly). */
  if (stable) (void)personality(ADDR_NO_RANDOMIZE);
  args = argv + i;               /* "--" becomes argv[0] */
  args[0] = "remora-worker";
  syscall(SYS_execveat, fd, "", args, envp, AT_EMPTY_PATH);
  die(126, "execute remora-worker");
  return 126;
}

static int run_signal(int argc, char **argv) {
  char *end = NULL;
  long pid, sig;
  if (argc != 4) usage();
  pid = strtol(argv[2], &end, 10);
  if (*argv[2] == '\0' || *end != '\0' || pid <= 1 || pid > 4194304) usage();
  sig = strtol(argv[3], &end, 10);
  if (*argv[3] == '\0' || *end != '\0' || sig < 0 || sig > 64) usage(); /* 0: only whether it may */
  become_worker();
  if (kill((pid_t)pid, (int)sig) == 0) return 0;
  if (errno == ESRCH || errno == EPERM) return 3; /* gone, or not a process of the worker user */
  die(1, "kill");
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  if (strcmp(argv[1], "exec") == 0) return run_exec(argc, argv);
  if (strcmp(argv[1], "signal") == 0) return run_signal(argc, argv);
  usage();
  return 2;
}

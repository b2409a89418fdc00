// remorafs: a remora-server's control plane as a cgroup-style file system (libfuse3).
//
//   remorafs [--state-dir DIR | --admin URL [--admin-token-file F]] MOUNTPOINT [-f] [-o OPTS]
//
// Checks that the server answers, mounts, then (without -f) goes to the background. The log
// (one line per failed operation, plus mounts and changes) goes to --log-file, else to
// stderr with -f, else to syslog. Unmounts and exits 0 on SIGTERM, SIGINT or SIGHUP, and
// exits 0 when unmounted by `fusermount3 -u` or umount. Errors before mounting: one line
// "remorafs: ..." on stderr, exit 1 (2 for usage errors).
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "admin_client.h"
#include "fuse_ops.h"
#include "reconnecting_client.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "syslog_sink.h"
#include "tree.h"

namespace remora::fs {
namespace {

struct Options {
  std::string state_dir, admin_url, token_file, mountpoint, fuse_options, log_file;
  bool foreground = false;
};

int Fatal(const std::string& message, int code = 1) {
  std::fprintf(stderr, "remorafs: %s\n", message.c_str());
  return code;
}

// The admin connection's options (admin::ConnectOptionsFrom), with an absolute state
// directory: the daemon runs in "/".
Result<admin::ConnectOptions> ConnectOptionsFrom(const Options& o) {
  ASSIGN_OR_RETURN(admin::ConnectOptions c, admin::ConnectOptionsFrom(o.state_dir, o.admin_url, o.token_file));
  if (!c.state_dir.empty()) {
    char real[PATH_MAX];
    if (::realpath(c.state_dir.c_str(), real) == nullptr)
      return ErrnoStatus(Err::kInitializationError, "state directory " + c.state_dir, errno);
    c.state_dir = real;
  }
  return c;
}

int Main(const Options& o) {
  SetLogIdentity("remorafs");
  SetLogLevelFromEnv(LogLevel::kInfo);
  auto connect = ConnectOptionsFrom(o);
  if (!connect.ok()) return Fatal(connect.status().message(), connect.status().code() == Err::kInvalidValue ? 2 : 1);
  std::string server;
  {
    // Fail before mounting if the server does not answer. This client ends here: its thread
    // would not survive the fork into the background.
    auto probe = admin::AdminClient::Connect(*connect);
    if (!probe.ok()) return Fatal(probe.status().message());
    auto info = (*probe)->Info();
    if (!info.ok()) return Fatal(info.status().message());
    server = "remora-server " + info->version + " on " + info->hostname + " (pid " + std::to_string(info->pid) + ", " +
             info->backend + ")";
  }
  char mountpoint[PATH_MAX];  // absolute: libfuse unmounts it from "/" in the background
  if (::realpath(o.mountpoint.c_str(), mountpoint) == nullptr)
    return Fatal("mount point " + o.mountpoint + ": " + std::strerror(errno));
  int log_fd = -1;
  if (!o.log_file.empty()) {
    log_fd = ::open(o.log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (log_fd < 0) return Fatal("log file " + o.log_file + ": " + std::strerror(errno));
    SetLogFd(log_fd);
  }

  // The kernel checks every access against the files' modes (owner: this process's uid),
  // so allow_other gives other users read access to what is world-readable and nothing
  // more; fuse_ops.cc refuses changes and token reads to anyone but root and this uid.
  std::string options = "default_permissions";
  if (!o.fuse_options.empty()) options += "," + o.fuse_options;
  std::vector<std::string> argv = {"remorafs", "-o", options};
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  for (const std::string& a : argv) fuse_opt_add_arg(&args, a.c_str());
  ReconnectingClient client(*connect);  // connects on the first operation, in the daemon
  Tree tree(client);
  fuse* f = fuse_new(&args, &Operations(), sizeof(fuse_operations), &tree);
  fuse_opt_free_args(&args);
  if (f == nullptr) return Fatal("bad FUSE options '" + options + "'", 2);
  if (fuse_mount(f, mountpoint) != 0) {
    fuse_destroy(f);
    return Fatal(std::string("cannot mount on ") + mountpoint + " (libfuse said why above)");
  }
  if (fuse_daemonize(o.foreground ? 1 : 0) != 0) {
    fuse_unmount(f);
    fuse_destroy(f);
    return Fatal("cannot go to the background");
  }
  if (!o.foreground && log_fd < 0) {
    log_fd = StartSyslogSink("remorafs");
    if (log_fd >= 0) SetLogFd(log_fd);
  }
  fuse_session* se = fuse_get_session(f);
  fuse_set_signal_handlers(se);
  LOG_INFO("mounted {}: {}", mountpoint, server);
  int rc = fuse_loop_mt(f, nullptr);  // until a stop signal (rc = its number) or an unmount
  fuse_remove_signal_handlers(se);
  fuse_unmount(f);
  fuse_destroy(f);
  if (rc < 0) {
    LOG_ERROR("stopped: {}", std::strerror(-rc));
    return 1;
  }
  LOG_INFO("unmounted {}{}", mountpoint, rc > 0 ? fmt::format(" (signal {})", rc) : "");
  return 0;
}

}  // namespace
}  // namespace remora::fs

int main(int argc, char** argv) {
  remora::fs::Options o;
  CLI::App app{"remorafs: a remora-server's control plane as a file system (tenants, memory limits, GPUs, sessions)"};
  auto* dir = app.add_option("-D,--state-dir", o.state_dir, "the server's state directory (its admin.sock); default $REMORA_STATE_DIR");
  app.add_option("--admin", o.admin_url, "admin URL instead: unix:///path/admin.sock or tcp://HOST:PORT")->excludes(dir);
  app.add_option("--admin-token-file", o.token_file, "admin token for tcp:// (default $REMORA_ADMIN_TOKEN)");
  app.add_option("MOUNTPOINT", o.mountpoint, "an existing directory")->required();
  app.add_flag("-f,--foreground", o.foreground, "stay in the foreground (log to stderr)");
  app.add_option("-o", o.fuse_options, "FUSE mount options, comma-separated (default_permissions is always added)");
  app.add_option("--log-file", o.log_file, "append the log here (default: stderr with -f, else syslog)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    return remora::fs::Fatal(what + " (see remorafs --help)", 2);
  }
  return remora::fs::Main(o);
}

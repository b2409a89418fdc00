// remora-server: the supervisor of one GPU host.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "remora/base/log.h"
#include "supervisor/supervisor.h"

int main(int argc, char** argv) {
  using namespace remora;
  server::ServerOptions o;
  std::string auth = "token";
  CLI::App app{"remora-server: serves this host's GPUs to Remora clients"};
  app.add_option("--listen", o.listen, "shm:///path/to.sock, tcp://HOST:PORT or rdma://HOST:PORT (repeatable)")->required();
  app.add_option("--state-dir", o.state_dir, "directory of the state database (created if missing)")->required();
  app.add_option("--backend", o.backend, "cuda (the NVIDIA driver) or host (emulated in host memory, no kernels)")
      ->check(CLI::IsMember({"cuda", "host"}));
  app.add_option("--host-gpus", o.host_gpus, "number of emulated GPUs (--backend host)")->check(CLI::Range(1, 16));
  app.add_option("--host-gpu-memory", o.host_gpu_memory, "memory of each emulated GPU, e.g. 16GiB (--backend host)");
  app.add_option("--auth", auth, "token: clients authenticate as a tenant; none: every client is tenant 'local'")
      ->check(CLI::IsMember({"token", "none"}));
  app.add_option("--ready-file", o.ready_file, "write the listening URLs here once ready");
  app.add_option("--drain-timeout", o.drain_timeout_s, "seconds sessions get to end after SIGTERM");
  app.add_option("--log-level", o.log_level, "error|warn|info|debug|trace");
  app.add_option("--admin-listen", o.admin_listen,
                 "also serve the admin API on tcp://HOST:PORT (clients log in with the admin token); "
                 "it is always served on STATE_DIR/admin.sock");
  app.add_option("--admin-token-file", o.admin_token_file,
                 "file holding the admin token for --admin-listen (created, mode 0600, if missing)");
  app.add_option("--metrics-listen", o.metrics_listen,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (tcp://HOST:PORT; no authentication: "
                 "bind it to a trusted network)");
  app.add_option("--compute-control", o.compute_control,
                 "auto: schedule and measure a GPU's work only while a tenant attached to it has a compute share, "
                 "cap or priority (no cost otherwise); on: always, measuring GPU time on every GPU")
      ->check(CLI::IsMember({"auto", "on"}));
  CLI11_PARSE(app, argc, argv);
  o.auth_required = auth == "token";
  if (!o.admin_listen.empty() && o.admin_token_file.empty()) {
    std::fprintf(stderr, "remora-server: --admin-listen needs --admin-token-file\n");
    return 2;
  }

  SetLogIdentity(o.backend == "host" ? "remora-server (host-emulated backend)" : "remora-server");
  setenv("REMORA_LOG", o.log_level.c_str(), 1);
  SetLogLevelFromEnv(LogLevel::kInfo);
  server::Supervisor sup(o);
  Status st = sup.Start();
  if (!st.ok()) {
    LOG_ERROR("cannot start: {}", st.message());
    return 1;
  }
  return sup.Run();
}

// remora-server: the supervisor of one GPU host.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/secure.h"
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
  app.add_option("--deadline", o.deadline_s, "seconds a session's worker waits without a sign of life from its client "
                                            "(an idle client sends heartbeats) before it ends the session (and, if longer "
                                            "than 15 s, for its client's RDMA connection to be set up); 0: never")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_flag("--stable-addresses", o.stable_addresses,
               "start session workers without address-space randomisation, so that a session moved here "
               "(remoractl session migrate) finds its device addresses free on the cuda backend; weakens a "
               "defence of the workers against memory-corruption exploits");
  app.add_option("--log-level", o.log_level, "error|warn|info|debug|trace");
  app.add_option("--admin-listen", o.admin_listen,
                 "also serve the admin API on tcp://HOST:PORT (clients log in with the admin token); "
                 "it is always served on STATE_DIR/admin.sock");
  app.add_option("--admin-token-file", o.admin_token_file,
                 "file holding the admin token for --admin-listen (created, mode 0600, if missing)");
  app.add_flag("--insecure", o.insecure, "allow --auth none on tcp:// and rdma:// listeners (anyone who can reach them "
                                        "uses the GPUs)");
  std::string encrypt = "auto";
  app.add_option("--encrypt", encrypt, "tcp:// session encryption: on (required), off (refused) or auto (on for peers "
                                      "that are not on this host)")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  app.add_option("--worker-user", o.worker_user, "user the session workers run as when the server runs as root "
                                                "(default remora-worker)");
  app.add_option("--max-sessions-per-tenant", o.max_sessions_per_tenant, "sessions one tenant may have at once");
  app.add_option("--tcp-streams", o.tcp_streams,
                 "parallel data connections a tcp:// session may stripe its bulk over (default: one per core, at most 8; "
                 "0: none)");
  app.add_option("--session-limit", o.session_limits,
                 "a per-session limit, NAME=VALUE (repeatable): streams, events, modules, module-bytes, pools, "
                 "graphs, callbacks, pinned-bytes, ipc-exports, library-objects, graph-nodes, pending, spill-bytes "
                 "(docs/SECURITY.md)");
  std::string cache_bytes, tenant_cache_bytes;
  app.add_option("--module-cache-dir", o.module_cache_dir, "module image caches (default STATE_DIR/modules)");
  app.add_option("--module-cache-size", cache_bytes, "bytes all tenants' module caches may hold together (default 16GiB)");
  app.add_option("--module-cache-tenant-size", tenant_cache_bytes, "bytes each tenant's module cache may hold (default 4GiB)");
  app.add_option("--handshake-timeout", o.handshake_timeout_ms, "milliseconds a connection has to authenticate")
      ->check(CLI::Range(100, 60000));
  app.add_option("--handshakes-per-peer", o.handshakes_per_peer, "handshakes one peer (IP address, or uid) may have "
                                                                "in progress");
  std::string shm_mode;
  app.add_option("--shm-mode", shm_mode, "mode of the shm:// socket, octal (default 0666 with --auth token, else 0600)");
  app.add_option("--metrics-listen", o.metrics_listen,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (tcp://HOST:PORT); without authentication "
                 "only the server's and GPUs' series");
  app.add_option("--metrics-token-file", o.metrics_token_file,
                 "bearer token (created if missing) a scraper sends to get the per-tenant and per-session series too "
                 "(Prometheus: authorization: {credentials_file: ...})");
  app.add_flag("--metrics-public-details", o.metrics_public_details,
               "give every scraper the per-tenant and per-session series (tenant names, quotas, usage; sessions' "
               "program, user and host)");
  app.add_option("--compute-control", o.compute_control,
                 "auto: schedule and measure a GPU's work only while a tenant attached to it has a compute share, "
                 "cap or priority (no cost otherwise); on: always, measuring GPU time on every GPU")
      ->check(CLI::IsMember({"auto", "on"}));
  std::string pool;
  app.add_option("--pool", pool,
                 "join a pool of servers whose state lives in etcd: its client URLs, comma-separated "
                 "(http://HOST:2379,...); tenants, tokens, quotas and GPU assignments then come from the pool");
  app.add_option("--pool-name", o.pool_name, "this server's name in the pool (default: the host name)");
  app.add_option("--pool-prefix", o.pool_prefix, "the pool's keys in etcd (default /remora/)");
  app.add_option("--pool-ttl", o.pool_ttl_s, "seconds of this server's lease in the pool: a lost server's GPUs and "
                                             "quota shares return to the pool this long after it stopped answering")
      ->check(CLI::Range(2, 600));
  app.add_option("--advertise", o.advertise, "a URL the pool tells clients to reach this server at (repeatable; "
                                             "default: the tcp:// listeners)");
  app.add_option("--pool-ca", o.pool_ca, "CA bundle (PEM) of etcd's certificates (https:// endpoints)");
  app.add_option("--pool-cert", o.pool_cert, "this server's client certificate for etcd (PEM)");
  app.add_option("--pool-key", o.pool_key, "its private key (PEM)");

  // Issue 40 (docs/SECURITY.md, N1 and N4).
  app.add_option("--ipc-exports-per-tenant", o.ipc_exports_per_tenant,
                 "CUDA IPC exports one tenant may hold, all its sessions together (default 16384)");
  app.add_option("--worker-memory-max", o.worker_memory_max,
                 "memory a session's worker process may take on beyond what it held at its start, e.g. 8GiB "
                 "(RLIMIT_DATA): auto (the default: the emulated GPUs' memory plus 4GiB on the host backend, none on "
                 "cuda) or off");
  // NCCL (issue 44; docs/OPERATIONS.md, "NCCL").
  app.add_option("--nccl-env", o.nccl_env,
                 "a setting of the workers' NCCL, NCCL_NAME=VALUE (repeatable), e.g. NCCL_SOCKET_IFNAME=eth1: the "
                 "interfaces the servers' NCCLs connect over (NCCL_* variables of the server's own environment pass too)");
  app.add_option("--peer-listen", o.peer_listen,
                 "serve the other servers of the cluster on tcp://HOST:PORT (NCCL unique ids made here are resolved "
                 "there, and lost ranks reported)");
  app.add_option("--peer-advertise", o.peer_advertise, "HOST:PORT other servers reach --peer-listen at (default: as given)");
  app.add_option("--peer", o.peers, "HOST:PORT of another server's --peer-listen this server may connect to (repeatable)");
  app.add_option("--peer-key-file", o.peer_key_file,
                 "the cluster's shared key (mode 0600, at least 32 bytes), with which servers authenticate each other");
  CLI11_PARSE(app, argc, argv);
  for (size_t pos = 0; pos < pool.size();) {
    size_t comma = pool.find(',', pos);
    if (comma == std::string::npos) comma = pool.size();
    if (comma > pos) o.pool.push_back(pool.substr(pos, comma - pos));
    pos = comma + 1;
  }
  if (!o.pool.empty() && o.pool_prefix.empty()) o.pool_prefix = "/";
  if (!o.pool_prefix.empty() && o.pool_prefix.back() != '/') o.pool_prefix += '/';
  o.auth_required = auth == "token";
  o.encrypt = *ParseEncryptMode(encrypt);
  for (auto [text, out] : {std::pair{&cache_bytes, &o.module_cache_bytes}, std::pair{&tenant_cache_bytes, &o.module_cache_tenant_bytes}}) {
    if (text->empty()) continue;
    auto v = ParseSize(*text);
    if (!v.ok()) {
      std::fprintf(stderr, "remora-server: %s\n", v.status().message().c_str());
      return 2;
    }
    *out = v->value_or(UINT64_MAX);
  }
  if (!shm_mode.empty()) {
    char* end = nullptr;
    long m = std::strtol(shm_mode.c_str(), &end, 8);
    if (end == shm_mode.c_str() || *end != '\0' || m < 0 || m > 0777) {
      std::fprintf(stderr, "remora-server: --shm-mode %s: expected an octal mode such as 0660\n", shm_mode.c_str());
      return 2;
    }
    o.shm_mode = static_cast<int>(m);
  }
  if (o.deadline_s != 0 && o.deadline_s < 1) {
    std::fprintf(stderr, "remora-server: --deadline %g: at least 1 second (heartbeats go every 250 ms), or 0\n", o.deadline_s);
    return 2;
  }
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

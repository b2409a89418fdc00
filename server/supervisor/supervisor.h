// The supervisor of one GPU host: listens on the transports, authenticates each connection
// as a tenant, spawns one worker process per session and reaps it, owns the quota ledger
// and the state store. It never initialises CUDA.
//
// Threading: one event-loop thread (Run) owns all state, handshakes included: they are
// non-blocking state machines in the same loop (handshakes.h), within deadlines and
// per-peer budgets, so a slow or hostile peer never stalls anyone. Other threads (the admin
// API) call in through Call(), which runs a function on the loop thread and waits for it.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/compute_region.h"
#include "common/session_stats.h"
#include "remora/base/fd.h"
#include "remora/memmgr/ledger.h"
#include "remora/protocol/handshake.h"
#include "remora/protocol/secure.h"
#include "remora/protocol/transport.h"
#include "supervisor/gpu_inventory.h"
#include "supervisor/handshakes.h"
#include "supervisor/ipc_registry.h"
#include "supervisor/module_store.h"
#include "supervisor/nccl_registry.h"
#include "supervisor/peer_link.h"
#include "supervisor/metrics.h"
#include "supervisor/state_store.h"
#include "supervisor/worker_launcher.h"
#include "supervisor/worker_registry.h"

namespace remora::pool {
class KvStore;
class PoolAdmin;
class PoolAgent;
struct PoolView;
struct ServerRecord;
}  // namespace remora::pool

namespace remora::server {

struct ServerOptions {
  std::vector<std::string> listen;      // URLs
  std::string state_dir;
  std::string backend = "cuda";         // cuda | host
  int host_gpus = 1;
  std::string host_gpu_memory = "16GiB";
  bool auth_required = true;
  std::string ready_file;
  int drain_timeout_s = 10;
  // Seconds a worker waits without hearing from its client before it ends the session
  // (heartbeats every 250 ms keep an idle client alive; 0: never).
  double deadline_s = 10;
  // Workers without address-space randomisation (planned migration on the cuda backend:
  // docs/ARCHITECTURE.md, "Planned migration").
  bool stable_addresses = false;
  std::string worker_path;              // remora-worker
  std::string log_level = "info";
  std::string admin_listen;             // "" or tcp://HOST:PORT (admin API over TCP)
  std::string admin_token_file;         // the admin token for admin_listen
  bool insecure = false;                // allow --auth none on network listeners
  EncryptMode encrypt = EncryptMode::kAuto;  // of tcp:// sessions (secure.h)
  std::string worker_user;              // "" = remora-worker (see worker_launcher.h)
  uint32_t max_sessions_per_tenant = 64;
  std::vector<std::string> session_limits;  // NAME=VALUE (worker/session/limits.h)
  std::string module_cache_dir;         // "" = <state-dir>/modules
  uint64_t module_cache_bytes = 16ull << 30;        // all tenants together
  uint64_t module_cache_tenant_bytes = 4ull << 30;  // each tenant
  int handshake_timeout_ms = 5000;
  uint32_t handshakes_per_peer = 512;
  int shm_mode = -1;                    // of the shm socket; -1: 0666 with --auth token, else 0600
  std::string metrics_listen;           // "" or tcp://HOST:PORT (Prometheus /metrics)
  std::string metrics_token_file;       // bearer token of the scrapers that get tenant and session series
  bool metrics_public_details = false;  // every scraper gets them
  // Compute shares (server/sched/): "auto" schedules and measures a GPU's work only while a
  // tenant attached to it has a share, a cap or a priority; "on" always (every tenant then
  // has at least the default weight, and GPU time is measured on every GPU).
  std::string compute_control = "auto";
  // tcp:// data connections granted to a session at most (-1: one per core, at most 8;
  // 0: none, bulk stays on the control connection).
  int tcp_streams = -1;
  // A pool of servers (server/pool/, docs/ARCHITECTURE.md "A pool of servers"): the etcd
  // cluster's client URLs; empty: a server of its own, its tenants in STATE_DIR/state.db.
  std::vector<std::string> pool;
  std::string pool_prefix = "/remora/";     // the pool's keys in etcd
  std::string pool_name;                    // this server's name in the pool ("": the host name)
  int pool_ttl_s = 10;                      // its lease: how soon the pool notices its loss
  std::vector<std::string> advertise;       // URLs clients reach it at (default: its tcp listeners)
  std::string pool_ca, pool_cert, pool_key; // TLS towards etcd (https:// endpoints)

  // Issue 40 (N1, N4): IPC exports one tenant may hold (all its sessions), and the memory a
  // session's worker process may use ("auto", "off" or a size; worker_launcher.h).
  uint64_t ipc_exports_per_tenant = 16384;
  std::string worker_memory_max = "auto";
  // NCCL (issue 44; docs/ARCHITECTURE.md "NCCL", docs/OPERATIONS.md): the server-to-server link
  // over which the servers of a cluster resolve each other's unique ids and report lost ranks
  // (tcp://HOST:PORT served, HOST:PORT other servers reach it at, the peers this one may dial,
  // the cluster's shared key), and settings for the workers' NCCL (NAME=VALUE, NCCL_* only).
  std::string peer_listen;
  std::string peer_advertise;
  std::vector<std::string> peers;
  std::string peer_key_file;
  std::vector<std::string> nccl_env;
};

struct TenantState {
  TenantRecord record;
  uint32_t ledger_index = 0;
  std::vector<int> gpus;  // attached GPU indices of this server, ascending
};

struct SessionState {
  uint64_t id = 0;
  std::string tenant;
  uint32_t ledger_slot = 0;
  pid_t pid = -1;
  Fd control;
  TransportKind transport = TransportKind::kShm;
  std::string peer;
  PeerIdentity client;
  int64_t started_at = 0;       // unix seconds
  uint64_t kill_after_ns = 0;   // asked to end: SIGKILL if still running at this time
  std::string migrate_failed;   // why the last move asked for did not happen (its client's word)
  SessionStatsBlock stats;      // the counters its worker publishes
  uint32_t data_streams = 0;    // tcp data connections granted (docs/PROTOCOL.md)
  uint32_t data_joined = 0;     // bit i: data connection i was accepted and handed over
  SessionKey data_key{};        // checks their DataHellos
  // Issue 40 (N6): a move the administrator ordered and whose failure report is awaited
  // (taken once), and the budget of the lines its client or worker can cause.
  bool migrate_ordered = false;
  LogBudget peer_log{5, 10};
};

// Event counts for /metrics. Written on the loop and handshake threads, read anywhere.
struct ServerCounters {
  std::atomic<uint64_t> handshakes_accepted{0};
  std::atomic<uint64_t> handshakes_refused{0};
  std::atomic<uint64_t> sessions_started{0};
  std::atomic<uint64_t> sessions_lost{0};
};

class AdminServer;
class MetricsServer;
class PoolLink;

// kInvalidValue when a weight or cap is out of range (supervisor_compute.cc).
Status CheckComputeSettings(const sched::ComputeSettings& settings);

class Supervisor {
 public:
  explicit Supervisor(ServerOptions options);
  ~Supervisor();

  // Opens the state store, probes the GPUs, formats the ledger, opens the listeners and
  // starts the admin API (<state-dir>/admin.sock, see admin_service.h).
  Status Start();
  // Serves until SIGTERM/SIGINT, then drains. Returns the process exit code.
  int Run();

  // Runs `fn` on the loop thread and returns its result (from any other thread).
  template <typename Fn>
  auto Call(Fn fn) -> decltype(fn()) {
    using R = decltype(fn());
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
    auto fut = task->get_future();
    Post([task] { (*task)(); });
    return fut.get();
  }

  // ---- loop-thread API (the admin service uses these through Call) ----------------------
  const Inventory& inventory() const { return inventory_; }
  const std::map<std::string, TenantState>& tenants() const { return tenants_; }
  const std::map<pid_t, SessionState>& sessions() const { return sessions_; }
  Ledger& ledger() { return *ledger_; }
  const ServerOptions& options() const { return options_; }
  int64_t started_at() const { return started_at_; }  // unix seconds
  // Creates a tenant; returns its token (shown once).
  Result<std::string> CreateTenant(const std::string& name, std::optional<uint64_t> memory_limit,
                                   std::optional<std::vector<int>> gpus);
  Status DeleteTenant(const std::string& name, bool force);
  Status SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit);
  // Takes effect for running sessions at their next scheduling decision.
  Status SetCompute(const std::string& name, const sched::ComputeSettings& settings);
  // The compute board (GPU time per tenant and session, who holds each GPU).
  const sched::ComputeBoard& compute_board() const { return compute_.board(); }
  bool ComputeEnforced(int gpu) const { return compute_.board().enabled(static_cast<uint32_t>(gpu)); }
  Status AttachGpu(const std::string& name, int gpu);
  Status DetachGpu(const std::string& name, int gpu);
  Status KillSession(uint64_t id, const std::string& reason);
  // Planned migration: tells session `id`'s worker to ask its client to move to `url`.
  Status MigrateSession(uint64_t id, const std::string& url, const std::string& token);
  // True if `pid` is a session worker of this server or a descendant of one (they never
  // get the admin API).
  bool IsWorkerOrDescendant(pid_t pid) const;
  uid_t worker_uid() const { return launcher_ ? launcher_->user().uid : ::geteuid(); }
  // The state /metrics shows (supervisor_metrics.cc).
  MetricsSnapshot CollectMetrics();

  // ---- a pool of servers (supervisor_pool.cc; docs/ARCHITECTURE.md "A pool of servers") ----
  bool pooled() const { return pool_ != nullptr; }
  // The pool's shared state, for the admin API: blocking store calls, from its thread, never
  // from the loop thread.
  pool::PoolAdmin* pool_admin() { return pool_admin_.get(); }
  pool::PoolAgent* pool_agent() { return pool_.get(); }
  const std::string& pool_name() const { return pool_name_; }
  // The servers holding the tenant's GPUs, in the order its clients number them: each
  // server's client URL and how many of the tenant's GPUs it has (from the mirror).
  std::vector<std::pair<std::string, uint32_t>> PoolLocate(const std::string& tenant);

 private:
  class Keys;

  void Post(std::function<void()> fn);
  void OnAccept(Listener& l);
  // accept(2) ran out of descriptors: drop the waiting connection through the spare one.
  void ShedConnection(Listener& l);
  void OnHandshaken(PendingConnection conn, AuthenticatedPeer peer);
  // A tcp data connection's DataHello: checked against its session, then handed to that
  // session's worker, or refused (and logged).
  void OnDataConnection(PendingConnection conn, DataHello hello);
  Status SpawnSession(PendingConnection& conn, const AuthenticatedPeer& peer, SessionState* out);
  // Ends session `pid` at once (SIGKILL, reaped here), telling its worker why first.
  void EndSessionNow(pid_t pid, const std::string& reason);
  // Ends the tenant's sessions and drops it from the ledger and the maps (not the store).
  void ForgetTenant(const std::string& name);
  // ---- the pool (supervisor_pool.cc) ----
  friend class PoolLink;
  Status StartPool();
  void StopPool();
  // The mirror's view: tenants added, changed and removed; this server's GPU assignments.
  void ApplyPool(const pool::PoolView& view, bool fresh);
  // The lease is lost: shares void, sessions holding pool-limited memory ended.
  void PoolFence(const std::string& why);
  pool::ServerRecord LocalPoolRecord();
  MetricsSnapshot::Pool CollectPoolMetrics();
  // A worker's quotaBorrow: asks the agent, answers the worker when it has.
  void OnQuotaBorrow(pid_t pid, uint64_t request, uint64_t bytes);
  void AnswerWorker(pid_t pid, uint64_t request, uint32_t status);
  // A client's locate handshake (a pool:// address): the tenant's servers, then close.
  void OnLocate(PendingConnection& conn, const AuthenticatedPeer& peer);
  void Reap();
  // Sends a signal to a session worker (through WorkerLauncher: it may run as another user);
  // failures other than "already gone" are logged.
  void SignalWorker(pid_t pid, int sig);
  // ---- IPC between sessions (supervisor_ipc.cc) ----
  // Epoll tags of the workers' control sockets: kControlTag + pid (below Handshakes' tags).
  static constexpr uint64_t kControlTag = 1ull << 31;
  void WatchControl(SessionState& s);
  // A worker's control socket is readable: its IPC requests, answered on the same socket.
  void OnControl(pid_t pid);
  // A worker ended: its IPC opens closed, its exports revoked. Returns true when some of its
  // memory is still open in other sessions: the ledger slot then stays open, holding exactly
  // those bytes, until they are closed.
  bool IpcSessionEnded(SessionState& s);
  void ApplyIpcActions(const std::vector<IpcAction>& actions);
  // ---- NCCL unique ids and cliques (supervisor_nccl.cc) ----
  Status StartNccl();
  void OnNcclAsk(pid_t pid, uint64_t request, uint8_t op, const NcclIdBytes& id, NcclClique clique);
  void AnswerNccl(pid_t pid, uint64_t request, uint32_t status, const NcclIdBytes* id, NcclClique clique);
  // A session ended: the cliques it was in learn it (here and on the origin servers).
  void NcclSessionEnded(SessionState& s);
  void DeliverNccl(const std::vector<NcclNotice>& notices);
  void OnPeerMessage(uint64_t link, uint64_t server, std::vector<uint8_t> message);
  void OnPeerDown(uint64_t link, uint64_t server, const std::string& why);
  void SendPeer(uint64_t link, const std::function<void(void*)>& build);
  void BeginDrain();
  Status SendControl(SessionState& s, const std::function<void(void*)>& build, int fd = -1);
  void PushGpus(const std::string& tenant);
  Status ApplyLimit(TenantState& t);
  // Turns scheduling on for the GPUs where some attached tenant has compute settings (all
  // GPUs with --compute-control on) and off for the others (supervisor_compute.cc).
  void UpdateComputeEnforcement();
  Result<TenantState*> FindTenant(const std::string& name);
  Status WriteReadyFile();
  // Runs the calls queued by Call() (loop thread).
  void RunQueuedCalls();
  // Stops the admin API and the metrics endpoint, serving their Calls until their threads
  // have ended (loop thread).
  void StopServices();
  Status StartMetrics();

  ServerOptions options_;
  std::unique_ptr<StateStore> store_;
  Inventory inventory_;
  Fd ledger_fd_, ledger_ro_fd_;
  void* ledger_mem_ = nullptr;
  std::optional<ModuleStore> modules_;
  std::optional<WorkerLauncher> launcher_;
  std::optional<WorkerRegistry> registry_;  // STATE_DIR/workers: found again after a crash
  std::string limits_arg_;  // SessionLimits::Format() for workers
  uint64_t worker_memory_max_ = 0;  // RLIMIT_DATA of each worker (0: none); --worker-memory-max
  std::optional<Ledger> ledger_;
  ComputeRegion compute_;  // the compute board every worker maps
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::unique_ptr<AdminServer> admin_;
  std::unique_ptr<MetricsServer> metrics_;
  ServerCounters counters_;
  int64_t started_at_ = 0;

  // tenants_ is written only on the loop thread; handshake threads read stored keys under
  // tenants_mu_.
  std::mutex tenants_mu_;
  std::map<std::string, TenantState> tenants_;
  std::unique_ptr<Keys> keys_;
  std::map<pid_t, SessionState> sessions_;
  IpcRegistry ipc_;
  std::map<uint32_t, std::string> ipc_held_slots_;  // ended exporters' ledger slots -> tenant
  std::unique_ptr<NcclRegistry> nccl_;
  std::unique_ptr<PeerLinks> peers_;
  struct RemoteResolve {
    pid_t pid = -1;
    uint64_t session = 0;
    uint64_t request = 0;  // the worker's
    uint64_t link = 0;
  };
  std::map<uint64_t, RemoteResolve> remote_resolves_;  // by the request sent over the link
  uint64_t next_peer_request_ = 1;

  Fd epoll_, signal_fd_, wake_fd_;
  Fd spare_fd_;  // kept open to accept (and drop) a connection when out of descriptors
  std::unique_ptr<Handshakes> handshakes_;
  LogBudget accept_log_{5, 10};
  LogBudget data_log_{20, 10};  // refused tcp data connections (unauthenticated peers)
  std::mutex queue_mu_;
  std::deque<std::function<void()>> calls_;
  bool draining_ = false;
  uint64_t drain_deadline_ns_ = 0;

  // The pool (empty unless --pool).
  std::unique_ptr<pool::KvStore> pool_store_;
  std::unique_ptr<PoolLink> pool_link_;
  std::unique_ptr<pool::PoolAgent> pool_;
  std::unique_ptr<pool::PoolAdmin> pool_admin_;
  std::string pool_name_;
  int64_t pool_lease_ = 0;     // loop thread: the lease shares are raised under (0: none)
  bool pool_applied_ = false;  // loop thread: a view of the pool's tenants was applied
};

}  // namespace remora::server

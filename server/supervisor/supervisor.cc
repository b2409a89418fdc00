#include "supervisor/supervisor.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <fstream>

#include <fmt/ranges.h>

#include "common/worker_args.h"
#include "control.capnp.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/message.h"
#include "pool/kv_store.h"
#include "pool/pool_admin.h"
#include "pool/pool_agent.h"
#include "supervisor/admin_service.h"
#include "supervisor/pool_link.h"
#include "supervisor/metrics_server.h"
#include "supervisor/process.h"
#include "worker/session/limits.h"

namespace remora::server {

namespace {
constexpr uint64_t kKillGraceNs = 2'000'000'000;

// Raises the soft descriptor limit to the hard one: every handshake in progress and every
// admin connection holds one.
void RaiseDescriptorLimit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

uint64_t DescriptorLimit() {
  struct rlimit rl;
  return ::getrlimit(RLIMIT_NOFILE, &rl) == 0 ? static_cast<uint64_t>(rl.rlim_cur) : 1024;
}

// The memory wall of each worker process (N4): the bytes its data segment and private
// writable mappings may grow by after its start (RLIMIT_DATA, set by the worker: its
// --memory-max), which a client's objects grow; 0 for none. Not RLIMIT_AS:
// the CUDA driver reserves far more address space than it uses. On the host backend the
// emulated GPUs' memory is such a mapping, so "auto" allows it plus 4 GiB; on cuda "auto" is
// no limit (device memory is the ledger's; an explicit size applies RLIMIT_DATA there too).
Result<uint64_t> WorkerMemoryMax(const ServerOptions& o) {
  const std::string& v = o.worker_memory_max;
  if (v == "off" || v == "0") return uint64_t{0};
  if (v != "auto") {
    ASSIGN_OR_RETURN(std::optional<uint64_t> n, ParseSize(v));
    if (n && *n < (64ull << 20)) return Error(Err::kInvalidValue, "--worker-memory-max {}: at least 64MiB", v);
    return n.value_or(0);
  }
  if (o.backend != "host") return uint64_t{0};
  ASSIGN_OR_RETURN(std::optional<uint64_t> per_gpu, ParseSize(o.host_gpu_memory));
  if (!per_gpu) return uint64_t{0};
  return *per_gpu * static_cast<uint64_t>(std::max(o.host_gpus, 1)) + (4ull << 30);
}

// The state directory holds the stored keys: this server's, and nobody else's to read.
Status CheckStateDirectory(const std::string& dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Status::Ok();  // created by the state store
  if (!S_ISDIR(st.st_mode)) return Error(Err::kInitializationError, "state directory {} is not a directory", dir);
  if (st.st_uid != ::geteuid())
    return Error(Err::kInitializationError, "state directory {} belongs to uid {}, not to this server (uid {})", dir,
                 st.st_uid, ::geteuid());
  if ((st.st_mode & 077) != 0) {
    LOG_WARN("state directory {} had mode {:o}: set to 0700", dir, st.st_mode & 0777);
    if (::chmod(dir.c_str(), 0700) != 0) return ErrnoStatus(Err::kInitializationError, "chmod " + dir, errno);
  }
  return Status::Ok();
}

// Parent of `pid` from /proc (0 if unknown).
pid_t ParentOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("PPid:", 0) == 0) return static_cast<pid_t>(std::atoi(line.c_str() + 5));
  return 0;
}

}  // namespace

// Verifiers for the handshakes (loop thread, and tests).
class Supervisor::Keys final : public TenantKeys {
 public:
  explicit Keys(Supervisor& s) : s_(s) {}
  std::optional<TenantVerifier> Lookup(std::string_view tenant) override {
    std::lock_guard<std::mutex> lock(s_.tenants_mu_);
    auto it = s_.tenants_.find(std::string(tenant));
    if (it == s_.tenants_.end()) return std::nullopt;
    return TenantVerifier{it->second.record.stored_key, it->second.record.server_key};
  }

 private:
  Supervisor& s_;
};

Supervisor::Supervisor(ServerOptions options) : options_(std::move(options)), keys_(std::make_unique<Keys>(*this)) {}

Supervisor::~Supervisor() {
  StopPool();
  StopServices();
  listeners_.clear();
  if (ledger_mem_ != nullptr) ::munmap(ledger_mem_, LedgerRegionBytes());
}

Status Supervisor::Start() {
  started_at_ = static_cast<int64_t>(std::time(nullptr));
  RaiseDescriptorLimit();
  // Network listeners without authentication serve everyone who can reach them.
  for (const std::string& url : options_.listen) {
    auto ep = ParseEndpoint(url);
    if (ep.ok() && ep->kind != TransportKind::kShm && !options_.auth_required && !options_.insecure)
      return Error(Err::kInvalidValue, "--auth none with {}: anyone who can reach it would use this server's GPUs "
                                       "without a token; add --insecure if that is really wanted", url);
  }
  {
    worker::SessionLimits limits;
    for (const std::string& a : options_.session_limits) RETURN_IF_ERROR(limits.Set(a));
    limits_arg_ = limits.Format();
    // IPC exports: the worker's own check, again here where a compromised worker cannot skip
    // it, per tenant, and within a quarter of this process's descriptors (N1).
    IpcLimits ipc;
    ipc.per_session = limits.limit(worker::Resource::kIpcExports);
    ipc.per_tenant = options_.ipc_exports_per_tenant;
    ipc.descriptors = std::max<uint64_t>(DescriptorLimit() / 4, 16);
    ipc_.SetLimits(ipc);
    ASSIGN_OR_RETURN(worker_memory_max_, WorkerMemoryMax(options_));
    if (worker_memory_max_ > 0)
      LOG_INFO("each session's worker may take on {} of memory (RLIMIT_DATA, --worker-memory-max)",
               FormatSize(worker_memory_max_));
    else
      LOG_INFO("session workers have no memory limit of their own (--worker-memory-max {})",
               options_.worker_memory_max);
  }
  // The workers' NCCL settings join the environment they inherit (worker_launcher.cc passes
  // NCCL_* on): the operator's, never a client's.
  for (const std::string& kv : options_.nccl_env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || kv.compare(0, 5, "NCCL_") != 0)
      return Error(Err::kInvalidValue, "--nccl-env {}: expected NCCL_NAME=VALUE", kv);
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  RETURN_IF_ERROR(CheckStateDirectory(options_.state_dir));
  ASSIGN_OR_RETURN(store_, OpenSqliteStateStore(options_.state_dir));
  // Workers a crashed predecessor left running (stopped, or stuck in a driver call) hold
  // memory no ledger counts any more: end them before counting anew.
  // (The launcher first: it knows how to signal workers of another user.)
  if (options_.worker_path.empty()) options_.worker_path = DefaultWorkerPath();
  std::string helper = options_.worker_path.substr(0, options_.worker_path.rfind('/') + 1) + "remora-worker-exec";
  ASSIGN_OR_RETURN(WorkerUser wu, ResolveWorkerUser(options_.worker_user, helper));
  ASSIGN_OR_RETURN(WorkerLauncher wl, WorkerLauncher::Create(options_.worker_path, std::move(wu), options_.stable_addresses));
  launcher_.emplace(std::move(wl));
  registry_.emplace(options_.state_dir, [this](pid_t pid, int sig) { return launcher_->Signal(pid, sig); });
  ASSIGN_OR_RETURN(int ended, registry_->EndPredecessors(10000));
  if (ended > 0) LOG_WARN("ended {} session worker(s) of a previous server on this state directory", ended);
  // Module images shipped by one session serve the tenant's next ones (worker/session/module_cache.h).
  std::string cache_root = options_.module_cache_dir.empty() ? options_.state_dir + "/modules" : options_.module_cache_dir;
  ASSIGN_OR_RETURN(ModuleStore ms, ModuleStore::Open(cache_root, options_.module_cache_bytes));
  modules_.emplace(std::move(ms));
  std::vector<std::string> backend_args = {"--backend", options_.backend};
  if (options_.backend == "host") {
    backend_args.insert(backend_args.end(), {"--host-gpus", std::to_string(options_.host_gpus), "--host-gpu-memory",
                                             options_.host_gpu_memory});
  }
  ASSIGN_OR_RETURN(inventory_, ProbeGpus(options_.worker_path, backend_args));
  if (inventory_.gpus.size() > kLedgerMaxGpus)
    return Error(Err::kInitializationError, "{} GPUs found; this server supports at most {}", inventory_.gpus.size(), kLedgerMaxGpus);
  for (const GpuInfo& g : inventory_.gpus)
    LOG_INFO("GPU {}: {} ({}, {}){}", g.index, g.name, FormatSize(g.total_memory), g.pci_bus_id,
             inventory_.emulated ? " [host-emulated, not a GPU]" : "");
  if (inventory_.gpus.empty()) LOG_WARN("no GPU found: sessions will see no device");
  for (const GpuInfo& g : inventory_.gpus) {
    if (g.mps) {
      LOG_INFO("GPU {}: MPS is active: the sessions' contexts share the GPU without time-slicing", g.index);
    } else if (!inventory_.emulated) {
      LOG_INFO("GPU {}: MPS is not running: the sessions' contexts time-slice on the GPU (compute shares hold; a "
               "high-priority tenant's latency beside a busy one includes context switches, docs/OPERATIONS.md)", g.index);
    }
  }

  // The ledger lives in shared memory that every worker maps: read-only, but for its own
  // slot (memmgr/ledger.h). Sealed: no worker can change its size under the supervisor.
  ledger_fd_.reset(static_cast<int>(::syscall(SYS_memfd_create, "remora-ledger", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!ledger_fd_ || ::ftruncate(ledger_fd_.get(), static_cast<off_t>(LedgerRegionBytes())) != 0 ||
      ::fcntl(ledger_fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return ErrnoStatus(Err::kInitializationError, "ledger memfd", errno);
  ledger_ro_fd_.reset(::open(("/proc/self/fd/" + std::to_string(ledger_fd_.get())).c_str(), O_RDONLY | O_CLOEXEC));
  if (!ledger_ro_fd_) return ErrnoStatus(Err::kInitializationError, "read-only ledger descriptor", errno);
  ledger_mem_ = ::mmap(nullptr, LedgerRegionBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, ledger_fd_.get(), 0);
  if (ledger_mem_ == MAP_FAILED) {
    ledger_mem_ = nullptr;
    return ErrnoStatus(Err::kInitializationError, "mmap ledger", errno);
  }
  ASSIGN_OR_RETURN(Ledger l, Ledger::Create(ledger_mem_, LedgerRegionBytes()));
  ledger_.emplace(l);
  if (options_.compute_control != "auto" && options_.compute_control != "on")
    return Error(Err::kInvalidValue, "--compute-control must be auto or on, not '{}'", options_.compute_control);
  ASSIGN_OR_RETURN(compute_, ComputeRegion::Create(sched::Tunables{}));

  // A pool's tenants come from the pool (StartPool), not from the state database.
  std::vector<TenantRecord> records;
  if (options_.pool.empty()) {
    ASSIGN_OR_RETURN(records, store_->LoadTenants());
  }
  if (!options_.auth_required &&
      std::none_of(records.begin(), records.end(), [](const TenantRecord& r) { return r.name == "local"; })) {
    TenantRecord local;
    local.name = "local";  // every session of an --auth none server (not persisted)
    for (const GpuInfo& g : inventory_.gpus) local.gpu_uuids.push_back(g.uuid);
    records.push_back(local);
  }
  for (TenantRecord& r : records) {
    TenantState t;
    ASSIGN_OR_RETURN(t.ledger_index, ledger_->AddTenant(r.name));
    for (const GpuInfo& g : inventory_.gpus)
      if (std::find(r.gpu_uuids.begin(), r.gpu_uuids.end(), g.uuid) != r.gpu_uuids.end()) t.gpus.push_back(g.index);
    t.record = std::move(r);
    RETURN_IF_ERROR(ApplyLimit(t));
    compute_.board().AddTenant(t.ledger_index, t.record.compute);
    std::lock_guard<std::mutex> lock(tenants_mu_);
    tenants_.emplace(t.record.name, std::move(t));
  }
  if (options_.pool.empty()) LOG_INFO("state: {} tenant(s) from {}/state.db", tenants_.size(), options_.state_dir);
  UpdateComputeEnforcement();

  unsigned shm_mode = options_.shm_mode >= 0 ? static_cast<unsigned>(options_.shm_mode)
                                            : options_.auth_required ? 0666u : 0600u;
  for (const std::string& url : options_.listen) {
    ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(url));
    ListenOptions listen_options;
    listen_options.shm_mode = shm_mode;
    auto l = Listen(ep, listen_options);
    if (!l.ok()) {
      if (l.status().code() == Err::kNotSupported) {
        LOG_WARN("not serving {}: {}", url, l.status().message());
        continue;
      }
      return l.status();
    }
    LOG_INFO("listening on {}{}", (*l)->endpoint().ToUrl(),
             ep.kind == TransportKind::kShm ? fmt::format(" (socket mode {:o})", shm_mode) : "");
    if (!options_.auth_required && ep.kind != TransportKind::kShm)
      LOG_WARN("--auth none --insecure with {}: anyone who can reach it uses this server's GPUs", url);
    bool loopback = ep.host == "localhost" || ep.host.rfind("127.", 0) == 0 || ep.host == "::1";
    if (ep.kind == TransportKind::kTcp && !loopback && options_.encrypt == EncryptMode::kOff)
      LOG_WARN("--encrypt off with {}: session data crosses the network in the clear and can be read and altered", url);
    if (ep.kind == TransportKind::kRdma && options_.encrypt == EncryptMode::kOn)
      LOG_WARN("--encrypt on: {} sessions are not encrypted (only tcp:// is); a client that requires encryption "
               "is refused there", url);
    int fl = ::fcntl((*l)->fd(), F_GETFL);
    if (fl < 0 || ::fcntl((*l)->fd(), F_SETFL, fl | O_NONBLOCK) != 0)
      return ErrnoStatus(Err::kInitializationError, "listener O_NONBLOCK", errno);
    listeners_.push_back(std::move(*l));
  }
  if (listeners_.empty()) return Error(Err::kInvalidValue, "no transport to serve: give at least one usable --listen URL");

  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGCHLD}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal_fd_.reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_ || !signal_fd_ || !wake_fd_) return ErrnoStatus(Err::kInitializationError, "event loop setup", errno);
  auto add = [&](int fd, uint64_t tag) {
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  };
  add(signal_fd_.get(), 1);
  add(wake_fd_.get(), 2);
  for (size_t i = 0; i < listeners_.size(); i++) add(listeners_[i]->fd(), 100 + i);
  spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  HandshakeLimits hl;
  hl.deadline_ms = options_.handshake_timeout_ms;
  hl.per_peer = options_.handshakes_per_peer;
  // Handshakes of all transports together hold at most about half of the descriptors (a
  // shm handshake holds two: its socket and its segment), so sessions, the admin API and
  // the state store always find some.
  uint64_t spare = DescriptorLimit() > 256 ? DescriptorLimit() - 128 : DescriptorLimit() / 2;
  hl.per_transport = static_cast<size_t>(std::clamp<uint64_t>(spare / (3 * std::max<size_t>(listeners_.size(), 1)), 8, 8192));
  handshakes_ = std::make_unique<Handshakes>(epoll_.get(), hl, [this](PendingConnection c, AuthenticatedPeer p) {
    counters_.handshakes_accepted++;
    OnHandshaken(std::move(c), std::move(p));
  });
  handshakes_->SetRefusedCounter(&counters_.handshakes_refused);
  handshakes_->SetDataDone([this](PendingConnection c, DataHello h) { OnDataConnection(std::move(c), h); });
  ServerAuthPolicy policy;
  policy.auth_required = options_.auth_required;
  policy.keys = keys_.get();
  policy.server_version = REMORA_VERSION;
  policy.encrypt = options_.encrypt;
  handshakes_->SetPolicy(policy);
  if (!options_.pool.empty()) RETURN_IF_ERROR(StartPool());
  AdminOptions admin;
  admin.state_dir = options_.state_dir;
  admin.listen_url = options_.admin_listen;
  admin.token_file = options_.admin_token_file;
  ASSIGN_OR_RETURN(admin_, AdminServer::Start(*this, admin));
  RETURN_IF_ERROR(StartNccl());
  RETURN_IF_ERROR(StartMetrics());
  return WriteReadyFile();
}

Status Supervisor::WriteReadyFile() {
  if (options_.ready_file.empty()) return Status::Ok();
  std::string tmp = options_.ready_file + ".tmp";
  {
    std::ofstream out(tmp);
    for (auto& l : listeners_) out << l->endpoint().ToUrl() << "\n";
    if (!out) return Error(Err::kInitializationError, "cannot write {}", tmp);
  }
  if (::rename(tmp.c_str(), options_.ready_file.c_str()) != 0)
    return ErrnoStatus(Err::kInitializationError, "rename ready file", errno);
  return Status::Ok();
}

void Supervisor::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    calls_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

int Supervisor::Run() {
  struct epoll_event events[32];
  for (;;) {
    if (draining_) {
      if (sessions_.empty()) break;
      if (MonotonicNanos() > drain_deadline_ns_) {
        for (auto& [pid, s] : sessions_) {
          LOG_WARN("session {} did not end within {} s of shutdown: killing its worker", s.id, options_.drain_timeout_s);
          SignalWorker(pid, SIGKILL);
        }
        drain_deadline_ns_ = UINT64_MAX;
      }
    }
    // Workers asked to end that did not: force them.
    uint64_t now = MonotonicNanos();
    for (auto& [pid, s] : sessions_)
      if (s.kill_after_ns != 0 && now > s.kill_after_ns) {
        SignalWorker(pid, SIGKILL);
        s.kill_after_ns = now + 1'000'000'000;  // again in a second while it has not ended
      }
    int n = ::epoll_wait(epoll_.get(), events, 32, 200);
    for (int i = 0; i < n; i++) {
      uint64_t tag = events[i].data.u64;
      if (tag == 1) {
        struct signalfd_siginfo si;
        while (::read(signal_fd_.get(), &si, sizeof(si)) == sizeof(si)) {
          if (si.ssi_signo == SIGCHLD) Reap();
          else if (!draining_) BeginDrain();
        }
      } else if (tag == 2) {
        uint64_t v;
        (void)!::read(wake_fd_.get(), &v, sizeof(v));
        RunQueuedCalls();
      } else if (tag > kControlTag && tag < Handshakes::kTagBase) {
        OnControl(static_cast<pid_t>(tag - kControlTag));
      } else if (Handshakes::Owns(tag)) {
        handshakes_->OnEvent(tag);
      } else if (tag >= 100 && tag - 100 < listeners_.size()) {
        OnAccept(*listeners_[tag - 100]);
      }
    }
    handshakes_->Expire(MonotonicNanos());
    Reap();  // in case a SIGCHLD was coalesced
  }
  StopPool();  // leaves the pool: its registration and shares go at once
  StopServices();
  handshakes_->CloseAll();
  LOG_INFO("server stopped");
  return 0;
}

void Supervisor::RunQueuedCalls() {
  std::deque<std::function<void()>> calls;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    calls.swap(calls_);
  }
  for (auto& c : calls) c();
}

void Supervisor::StopServices() {
  if (admin_) admin_->RequestStop();
  if (metrics_) metrics_->RequestStop();
  // Their threads may be waiting in Call(): keep serving calls until they have ended.
  while ((admin_ && !admin_->Finished()) || (metrics_ && !metrics_->Finished())) {
    RunQueuedCalls();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  RunQueuedCalls();
  admin_.reset();
  metrics_.reset();
  peers_.reset();  // its threads post nothing more
}

bool Supervisor::IsWorkerOrDescendant(pid_t pid) const {
  for (int depth = 0; pid > 1 && depth < 64; depth++) {
    if (sessions_.count(pid)) return true;
    pid = ParentOf(pid);
  }
  return false;
}

void Supervisor::Reap() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    auto it = sessions_.find(pid);
    if (it == sessions_.end()) continue;
    if (Status st = registry_->Remove(pid); !st.ok()) LOG_WARN("worker registry: {}", st.ToString());
    SessionState& s = it->second;
    compute_.board().CloseSession(s.ledger_slot, MonotonicNanos());  // a turn it held goes on
    uint64_t total = 0;
    if (!IpcSessionEnded(s)) {
      std::vector<uint64_t> held = ledger_->CloseSession(s.ledger_slot);
      for (uint64_t b : held) total += b;
    }
    std::string how = WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                        : fmt::format("killed by signal {}", WTERMSIG(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
      LOG_INFO("session {} (tenant '{}') ended; {} returned to the tenant", s.id, s.tenant, FormatSize(total));
    else {
      LOG_WARN("session {} (tenant '{}') worker ended abnormally ({}); {} returned to the tenant", s.id, s.tenant, how,
               FormatSize(total));
      counters_.sessions_lost++;
    }
    NcclSessionEnded(s);
    sessions_.erase(it);
    modules_->Trim();  // the server-wide bound of the module caches
  }
}

void Supervisor::SignalWorker(pid_t pid, int sig) {
  Status st = launcher_ ? launcher_->Signal(pid, sig) : Status(Err::kNotPermitted, "no launcher");
  if (!st.ok() && st.code() != Err::kInvalidValue) LOG_WARN("{}", st.message());
}

void Supervisor::BeginDrain() {
  LOG_INFO("shutting down: no new sessions; ending {} session(s)", sessions_.size());
  draining_ = true;
  drain_deadline_ns_ = MonotonicNanos() + uint64_t(options_.drain_timeout_s) * 1'000'000'000ull;
  for (auto& l : listeners_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, l->fd(), nullptr);
  listeners_.clear();
  handshakes_->CloseAll();
  for (auto& [pid, s] : sessions_) {
    Status st = SendControl(s, [](void* m) {
      static_cast<control::ControlMessage::Builder*>(m)->setEndSession("the Remora server is shutting down");
    });
    if (!st.ok()) SignalWorker(pid, SIGTERM);
  }
}

Status Supervisor::SendControl(SessionState& s, const std::function<void(void*)>& build, int fd) {
  ScratchMessage msg;
  auto root = msg.InitRoot<control::ControlMessage>();
  build(&root);
  OutFrame f;
  f.kind = FrameKind::kNotice;
  f.body = msg.Flatten();
  FrameSocket fs(s.control.get());
  if (fd >= 0) return fs.Write(f, {}, std::span<const int>(&fd, 1));
  return fs.Write(f);
}

Status Supervisor::KillSession(uint64_t id, const std::string& reason) {
  for (auto& [pid, s] : sessions_) {
    if (s.id != id) continue;
    Status st = SendControl(s, [&](void* m) { static_cast<control::ControlMessage::Builder*>(m)->setEndSession(reason); });
    if (!st.ok()) SignalWorker(pid, SIGKILL);
    s.kill_after_ns = MonotonicNanos() + kKillGraceNs;
    LOG_INFO("session {} (tenant '{}') ended by the administrator: {}", id, s.tenant, reason);
    return Status::Ok();
  }
  return Error(Err::kInvalidValue, "no session {}", id);
}

Status Supervisor::MigrateSession(uint64_t id, const std::string& url, const std::string& token) {
  if (url.empty()) return Error(Err::kInvalidValue, "a migration needs the URL of the server to move to");
  for (auto& [pid, s] : sessions_) {
    if (s.id != id) continue;
    s.migrate_failed.clear();
    RETURN_IF_ERROR(SendControl(s, [&](void* m) {
      auto order = static_cast<control::ControlMessage::Builder*>(m)->initMigrate();
      order.setUrl(url);
      order.setToken(token);
    }));
    s.migrate_ordered = true;
    LOG_INFO("session {} (tenant '{}'): the administrator moves it to {}", id, s.tenant, url);
    return Status::Ok();
  }
  return Error(Err::kInvalidValue, "no session {}", id);
}

}  // namespace remora::server

// remora-worker: one process per client session, spawned by remora-server. Owns the
// session's CUDA contexts (or the host-emulated backend) and executes its calls.
#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/compute_region.h"
#include "common/session_stats.h"
#include "common/worker_args.h"
#include "control.capnp.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/message.h"
#include "remora/protocol/secure.h"
#include "remora/protocol/transport.h"
#include "worker/calls/call_profile.h"
#include "worker/backend/driver.h"
#include "worker/session/executor.h"
#include "worker/session/module_cache.h"
#include "worker/loop/sandbox.h"
#include "worker/loop/supervisor_link.h"

namespace remora::worker {
namespace {

Executor* g_executor = nullptr;

std::string ToHexString(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; i++) s += fmt::format("{:02x}", p[i]);
  return s;
}

void OnSignal(int) {
  if (g_executor != nullptr) g_executor->Stop();
}

Result<std::unique_ptr<Driver>> MakeDriver(const std::string& backend, int host_gpus, const std::string& host_mem,
                                           uint8_t window) {
  if (backend == "host") {
    ASSIGN_OR_RETURN(std::optional<uint64_t> mem, ParseSize(host_mem));
    if (host_gpus < 1 || host_gpus > 16) return Error(Err::kInvalidValue, "--host-gpus {}: 1 to 16", host_gpus);
    HostDriverOptions o;
    o.gpus = host_gpus;
    o.window = window;
    o.memory_per_gpu = mem.value_or(16ull << 30);
    return MakeHostDriver(o);
  }
  if (backend == "cuda") {
    // Without address randomisation (remora-server --stable-addresses) every worker's
    // driver would reserve the same device addresses: shifted per window, so sessions of
    // one application on several servers still never collide, while a session moved to
    // another server in its window finds its addresses free there (planned migration).
    if (window > 0 && (::personality(0xffffffff) & ADDR_NO_RANDOMIZE) != 0) {
      void* gap = ::mmap(nullptr, uint64_t{window} << 41, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (gap == MAP_FAILED) LOG_WARN("could not shift window {}'s addresses: {}", window, std::strerror(errno));
    }
    return MakeCudaDriver();
  }
  return Error(Err::kInvalidValue, "unknown backend '{}' (cuda or host)", backend);
}

// The driver's JIT cache (PTX compiled for this GPU, cuDNN's runtime-compiled kernels among
// them): natively it lives in the user's home; a worker has none (HOME=/, a user of its own),
// so every module loaded from PTX was compiled again - cuDNN's attention, which builds a graph
// for each new sequence length, decoded 5x slower than native (native with the cache disabled
// measured the same). The tenant's module cache directory (fd kModuleCacheFd, the worker's
// own, per tenant: one tenant's compiled code is never another's) gets a `jit` subdirectory,
// bounded by the tenant's module cache budget (the driver caps it at 4 GiB). It is named
// through /proc/self/fd: the state directory above it is the server's alone, so its path is
// not the worker user's to walk (a path there measured no faster on the H200), while the
// descriptor is. Only where that directory is the worker user's own (see below). An operator's CUDA_CACHE_PATH, CUDA_CACHE_DISABLE or CUDA_CACHE_MAXSIZE
// (passed on by the supervisor) wins. Before the driver starts: it reads these once.
void UseTenantJitCache(uint64_t budget) {
  if (std::getenv("CUDA_CACHE_PATH") != nullptr || std::getenv("CUDA_CACHE_DISABLE") != nullptr) return;
  // Not where the tenant's directory is the server's, shared with the workers by group (workers
  // under a user of their own through remora-worker-exec): the driver makes its directories
  // 0700, which the server could not remove with the tenant.
  struct stat dir;
  if (::fstat(worker_args::kModuleCacheFd, &dir) != 0 || dir.st_uid != ::geteuid()) {
    LOG_DEBUG("no JIT cache for this session: the tenant's module cache is not this worker's own");
    return;
  }
  if (::mkdirat(worker_args::kModuleCacheFd, "jit", 0700) != 0 && errno != EEXIST) {
    LOG_WARN("no JIT cache for this session (mkdir jit in the tenant's module cache: {})", std::strerror(errno));
    return;
  }
  std::string path = "/proc/self/fd/" + std::to_string(worker_args::kModuleCacheFd) + "/jit";
  ::setenv("CUDA_CACHE_PATH", path.c_str(), 1);
  if (std::getenv("CUDA_CACHE_MAXSIZE") == nullptr)
    ::setenv("CUDA_CACHE_MAXSIZE", std::to_string(std::min<uint64_t>(budget, 4ull << 30)).c_str(), 1);
  LOG_DEBUG("the driver's JIT cache: {} (at most {} bytes)", path, std::getenv("CUDA_CACHE_MAXSIZE"));
}

int Probe(Driver& d) {
  auto n = d.DeviceCount();
  if (!n.ok()) {
    std::fprintf(stderr, "%s\n", n.status().ToString().c_str());
    return 1;
  }
  std::printf("backend\t%s\t%d\n", d.name(), d.emulated() ? 1 : 0);
  std::printf("driver\t%d\n", d.DriverVersion());
  if (std::string kmd = d.KernelDriverVersion(); !kmd.empty()) std::printf("kernel-driver\t%s\n", kmd.c_str());
  for (int i = 0; i < *n; i++) {
    auto desc = d.Describe(i);
    if (!desc.ok()) {
      std::fprintf(stderr, "GPU %d: %s\n", i, desc.status().ToString().c_str());
      return 1;
    }
    std::printf("gpu\t%d\t%llu\t%s\t%s\t%s\n", i, static_cast<unsigned long long>(desc->total_memory),
                ToHexString(desc->uuid, 16).c_str(), desc->pci_bus_id.c_str(), desc->name.c_str());
    // Whether contexts made on the GPU are shared through an MPS server (the daemon runs).
    const size_t mps = CU_DEVICE_ATTRIBUTE_MPS_ENABLED;
    std::printf("mps\t%d\t%d\n", i, mps < desc->attributes.size() && desc->attributes[mps] != 0 ? 1 : 0);
  }
  return 0;
}

// The session keys of an encrypted session: the supervisor's first control message.
Result<SessionKeys> ReadSessionKeys(int control_fd) {
  FrameSocket fs(control_fd);
  ASSIGN_OR_RETURN(InFrame frame, fs.Read(5000));
  SessionKeys keys;
  Status st = GuardDecode("control message", [&]() -> Status {
    BodyReader r(frame.body);
    auto m = r.Root<control::ControlMessage>();
    if (!m.isSessionKeys()) return Error(Err::kInvalidValue, "expected the session keys first");
    auto k = m.getSessionKeys();
    keys.cipher = static_cast<Cipher>(k.getCipher());
    if (k.getClientToServer().size() != 32 || k.getServerToClient().size() != 32 ||
        (keys.cipher != Cipher::kChaCha20Poly1305 && keys.cipher != Cipher::kAes256Gcm))
      return Error(Err::kInvalidValue, "malformed session keys");
    std::memcpy(keys.client_to_server.data(), k.getClientToServer().begin(), 32);
    std::memcpy(keys.server_to_client.data(), k.getServerToClient().begin(), 32);
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  return keys;
}

// The worker's memory wall (--memory-max): RLIMIT_DATA, soft and hard (a worker without
// CAP_SYS_RESOURCE cannot raise it), at what the process's data mappings hold now plus
// `bytes` - what a client's requests can make it grow by. Counted from now because what it
// holds already (the driver's, a sanitizer's shadow memory in those builds) is not the
// client's doing and may be large.
Status LimitMemoryGrowth(uint64_t bytes) {
  uint64_t data_kb = 0;
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof(line), f) != nullptr)
      if (std::strncmp(line, "VmData:", 7) == 0) data_kb = std::strtoull(line + 7, nullptr, 10);
    std::fclose(f);
  }
  if (data_kb == 0) return Error(Err::kInitializationError, "cannot read this worker's VmData (/proc/self/status)");
  uint64_t limit = data_kb * 1024 > UINT64_MAX - bytes ? UINT64_MAX : data_kb * 1024 + bytes;
  struct rlimit rl = {static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
  if (::setrlimit(RLIMIT_DATA, &rl) != 0)
    return ErrnoStatus(Err::kInitializationError, fmt::format("limit this worker's memory to {} bytes", limit), errno);
  LOG_DEBUG("memory wall: RLIMIT_DATA {} ({} held at start + {})", FormatSize(limit), FormatSize(data_kb * 1024),
            FormatSize(bytes));
  return Status::Ok();
}

// Maps the ledger read-only and this session's slot writable, then closes both
// descriptors: from here on nothing in this process can write another slot.
Result<Ledger> MapLedger(uint32_t slot) {
  void* ro = ::mmap(nullptr, LedgerRegionBytes(), PROT_READ, MAP_SHARED, worker_args::kLedgerReadFd, 0);
  if (ro == MAP_FAILED) return ErrnoStatus(Err::kInitializationError, "map the quota ledger", errno);
  if (slot >= kLedgerMaxSessions) return Error(Err::kInvalidValue, "bad ledger slot {}", slot);
  void* own = ::mmap(nullptr, LedgerSlotBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, worker_args::kLedgerFd,
                     static_cast<off_t>(LedgerSlotOffset(slot)));
  if (own == MAP_FAILED) return ErrnoStatus(Err::kInitializationError, "map this session's ledger slot", errno);
  ::close(worker_args::kLedgerFd);
  ::close(worker_args::kLedgerReadFd);
  return Ledger::AttachSession(ro, LedgerRegionBytes(), own, slot);
}

}  // namespace
}  // namespace remora::worker

int main(int argc, char** argv) {
  using namespace remora;
  using namespace remora::worker;
  CLI::App app{"remora-worker: executes one Remora session (spawned by remora-server)"};
  bool probe = false, encrypted = false, no_sandbox = false;
  uint64_t session = 0, cache_budget = 0;
  std::string tenant, transport = "shm", backend = "host", host_mem = "16GiB", gpus_arg, log_level = "info", limits_arg;
  int host_gpus = 1, extra_fds = 0;
  uint32_t data_streams = 0;
  uint32_t slot = 0;
  app.add_flag("--probe", probe, "print the GPU inventory and exit");
  app.add_option("--session", session);
  app.add_option("--tenant", tenant);
  app.add_option("--transport", transport);
  app.add_option("--backend", backend);
  app.add_option("--host-gpus", host_gpus);
  app.add_option("--host-gpu-memory", host_mem);
  app.add_option("--gpus", gpus_arg, "comma-separated server GPU indices, in ordinal order");
  app.add_option("--ledger-slot", slot);
  app.add_option("--extra-fds", extra_fds);
  app.add_option("--data-streams", data_streams, "tcp data connections handed over on the control socket");
  unsigned window = 0;
  app.add_option("--window", window, "the client's window for this server (Hello.window)")->check(CLI::Range(0, 255));
  app.add_option("--log-level", log_level);
  uint64_t client_deadline_ms = 0;
  app.add_option("--client-deadline-ms", client_deadline_ms, "end the session when the client sends nothing for this "
                                                             "long (0: never)");
  int compute_fd = -1;
  app.add_option("--compute-fd", compute_fd, "inherited descriptor of the compute board (server/sched/board.h)");
  app.add_option("--module-cache-budget", cache_budget, "bytes the tenant's module cache (fd 7) may hold");
  app.add_option("--limits", limits_arg, "session limits (NAME=VALUE,...)");
  app.add_flag("--encrypted", encrypted, "the data path is encrypted (keys on the control socket)");
  app.add_flag("--no-sandbox", no_sandbox, "skip the seccomp filter (debugging only)");
  uint64_t memory_max = 0;
  app.add_option("--memory-max", memory_max, "bytes of data segment and private writable mappings this process may "
                                             "hold (RLIMIT_DATA, soft and hard; 0: unchanged)");
  CLI11_PARSE(app, argc, argv);

  if (!probe) {
    std::string emulated = backend == "host" ? " (host-emulated, not a GPU)" : "";
    SetLogIdentity(fmt::format("remora-worker s{} tenant={}{}", session, tenant, emulated));
    setenv("REMORA_LOG", log_level.c_str(), 0);
    SetLogLevelFromEnv(LogLevel::kInfo);
    if (cache_budget > 0) UseTenantJitCache(cache_budget);
  }
  auto driver = MakeDriver(backend, host_gpus, host_mem, static_cast<uint8_t>(window));
  if (probe) {
    if (!driver.ok()) {
      std::fprintf(stderr, "%s\n", driver.status().message().c_str());
      return 1;
    }
    return Probe(**driver);
  }

  if (!driver.ok()) {
    LOG_ERROR("{}", driver.status().message());
    return 2;
  }

  // The quota ledger, shared with the supervisor and the other workers.
  auto ledger = MapLedger(slot);
  if (!ledger.ok()) {
    LOG_ERROR("{}", ledger.status().message());
    return 2;
  }
  auto limits = SessionLimits::Parse(limits_arg);
  if (!limits.ok()) {
    LOG_ERROR("{}", limits.status().message());
    return 2;
  }
  std::optional<SessionKeys> keys;
  if (encrypted) {
    auto k = ReadSessionKeys(worker_args::kControlFd);
    if (!k.ok()) {
      LOG_ERROR("cannot read the session keys: {}", k.status().message());
      return 2;
    }
    keys = *k;
  }
  std::optional<ModuleCache> cache;
  if (cache_budget > 0) cache.emplace(Fd(worker_args::kModuleCacheFd), cache_budget);

  // Nothing a client sent has been read yet: confine the process first. Its memory wall
  // (docs/SECURITY.md, N4): past it an allocation fails, at worst ending this session only.
  if (memory_max > 0) {
    Status wall = LimitMemoryGrowth(memory_max);
    if (!wall.ok()) {
      LOG_ERROR("{}", wall.message());
      return 2;
    }
  }
  if (!no_sandbox) {
    Status sb = EnterSandbox();
    if (!sb.ok()) {
      LOG_ERROR("cannot enter the worker sandbox: {}", sb.message());
      return 2;
    }
  }

  auto parsed_kind = TransportFromName(transport);
  if (!parsed_kind.ok()) {
    LOG_ERROR("{}", parsed_kind.status().message());
    return 2;
  }
  TransportKind kind = *parsed_kind;
  std::vector<Fd> fds;
  for (int i = 0; i < extra_fds; i++) fds.emplace_back(worker_args::kFirstExtraFd + i);
  SupervisorLink control(worker_args::kControlFd);
  if (data_streams > 0) {
    auto data = control.AwaitDataConnections(worker_args::kClientFd, data_streams, 15000);
    if (!data.ok()) {
      LOG_WARN("session not started: {}", data.status().message());
      return 3;
    }
    for (Fd& d : *data) fds.push_back(std::move(d));
  }
  DriverStaging staging(**driver);
  // A client slow to set its data path up (rdma://) is waited for as long as a silent one.
  auto conn = AdoptConnection(kind, Fd(worker_args::kClientFd), std::move(fds), keys,
                              static_cast<int>(std::min<uint64_t>(client_deadline_ms, 86'400'000)));
  if (!conn.ok()) {
    LOG_ERROR("cannot set up the {} connection: {}", transport, conn.status().ToString());
    return 3;
  }

  SessionConfig config;
  config.session_id = session;
  config.tenant = tenant;
  for (size_t pos = 0; pos < gpus_arg.size();) {
    size_t comma = gpus_arg.find(',', pos);
    if (comma == std::string::npos) comma = gpus_arg.size();
    if (comma > pos) config.gpus.push_back(std::stoi(gpus_arg.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  config.ledger = &*ledger;
  config.module_cache = cache ? &*cache : nullptr;
  config.limits = *limits;
  config.ledger_slot = slot;
  config.client_deadline_ns = client_deadline_ms * 1'000'000;
  config.window = static_cast<uint8_t>(window);

  // The session's published counters (for the supervisor's /metrics); optional.
  auto stats = SessionStatsBlock::Attach(Fd(worker_args::kStatsFd));
  if (stats.ok()) config.stats = stats->counters();
  else LOG_WARN("not publishing session counters: {}", stats.status().message());

  // The compute board, shared with the supervisor and the other workers: the session's GPU
  // work is admitted in its turns and measured. Without one, nothing is scheduled.
  ComputeRegion compute;
  if (compute_fd >= 0) {
    auto region = ComputeRegion::Attach(Fd(compute_fd));
    if (!region.ok()) {
      LOG_ERROR("{}", region.status().message());
      return 2;
    }
    compute = std::move(*region);
    config.compute = &compute.board();
  }

  int rc = 0;
  {
    Executor executor(**conn, **driver, staging, config, &control);
    g_executor = &executor;
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    LOG_INFO("serving {} on {} with {} GPU(s) [{}]", (*conn)->Describe(), (*driver)->name(), config.gpus.size(), gpus_arg);
    if (kind == TransportKind::kRdma)
      LOG_DEBUG("RDMA data path: host-staged (RDMA READ/WRITE into pinned host staging, then DMA to and from the "
                "GPU; GPUDirect RDMA into device memory is not implemented)");
    Status st = executor.Run();
    g_executor = nullptr;
    if (CallProfile* profile = CallProfile::Get()) profile->Write(config.session_id);
    if (st.ok()) LOG_INFO("session ended normally");
    else if (st.code() == Err::kDevicesUnavailable) LOG_INFO("session ended: {}", st.message());
    else {
      LOG_WARN("session ended with an error: {}", st.ToString());
      rc = 4;
    }
  }
  conn->reset();
  return rc;
}

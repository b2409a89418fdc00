// remora-chaos-client: one application of the chaos soak (tools/chaos/chaos.py). A CUDA
// program like any other (runtime API, -cudart shared, run under the shim) that does random
// allocations, frees, copies in every direction (pageable and pinned, synchronous and on
// streams), memsets, kernel launches, host callbacks and events, and keeps a host copy of what
// every allocation must hold, so that every byte it reads back is checked.
//
//   remora-chaos-client --seed N --status DIR [--max-bytes B] [--calibrate]
//
// Signals (from the soak's driver):
//   SIGUSR1  checkpoint: finish the work in flight, read back and check every allocation,
//            write DIR/<pid>.json (what it holds, what it saw), then wait for SIGUSR2
//   SIGTERM  a last checkpoint, then exit 0
// DIR/<pid>.json is also rewritten about once a second while running (its counters survive a
// SIGKILL). Exit status: 0 stopped by SIGTERM; 3 the session is gone (its worker or server
// ended, or no server at start) - an expected outcome of the chaos; 4 the data check failed;
// 5 an unexpected CUDA error. --calibrate launches the kernel once, writes its status and
// waits for SIGTERM: the driver measures what a loaded module costs a session.
//
// Kernels are not executed on the host-emulated backend: the kernel here never writes (its
// argument makes it return at once), so the data model holds on a GPU too.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

__global__ void Touch(unsigned char* p, int n) {
  if (n >= 0 && threadIdx.x < static_cast<unsigned>(n)) p[threadIdx.x] ^= 1;  // n < 0: never writes
}

volatile sig_atomic_t g_checkpoint = 0, g_resume = 0, g_stop = 0;
void OnSignal(int sig) {
  if (sig == SIGUSR1) g_checkpoint = 1;
  if (sig == SIGUSR2) g_resume = 1;
  if (sig == SIGTERM) g_stop = 1;
}

constexpr size_t kPinnedBytes = 1 << 20;

struct Alloc {
  unsigned char* dev = nullptr;
  size_t size = 0;
  int ordinal = 0;
  bool pooled = false;    // cudaMallocAsync / cudaFreeAsync
  bool lost = false;      // its device was detached: unusable, still held by the session
  std::vector<unsigned char> shadow;
};

struct CallbackCheck {
  const unsigned char* pinned = nullptr;
  std::vector<unsigned char> expected;
  std::atomic<int> ran{0};
  std::atomic<int> bad{0};
};

void CUDART_CB CheckCallback(void* user) {
  auto* c = static_cast<CallbackCheck*>(user);
  if (std::memcmp(c->pinned, c->expected.data(), c->expected.size()) != 0) c->bad.fetch_add(1);
  c->ran.fetch_add(1);
}

class Client {
 public:
  Client(uint64_t seed, std::string status_dir, size_t max_bytes)
      : rng_(seed), status_dir_(std::move(status_dir)), max_bytes_(max_bytes) {}

  int Run(bool calibrate);

 private:
  // Outcome of a CUDA call in the chaos: fine, an expected refusal, or the end.
  bool Ok(cudaError_t e, const char* what, int ordinal);
  bool Usable(int ordinal) const { return ordinal < static_cast<int>(usable_.size()) && usable_[ordinal]; }
  // Makes `ordinal` current; false (the device was found detached, or the session is gone) if not.
  bool Use(int ordinal) { return Ok(cudaSetDevice(ordinal), "cudaSetDevice", ordinal); }
  int RandomOrdinal();
  cudaStream_t StreamOf(int ordinal, int which);
  void RefreshDevices();
  size_t Held() const;
  Alloc* Pick();
  void Fill(std::vector<unsigned char>& v, size_t off, size_t n);

  void OpAlloc();
  void OpFree();
  void OpWrite();
  void OpRead();
  void OpCopyD2D();
  void OpMemset();
  void OpLaunch();
  void OpCallback();
  void OpEvent();
  void Verify(Alloc& a);
  void Resync(Alloc& a);
  void ProbeDevices();
  void Checkpoint(bool wait);
  void WriteStatus(const char* phase);

  std::mt19937_64 rng_;
  std::string status_dir_;
  size_t max_bytes_;
  std::vector<Alloc> allocs_;
  std::vector<bool> usable_;                 // by ordinal
  std::vector<std::string> bus_ids_;         // by ordinal: which server GPU it is
  std::map<int, std::vector<cudaStream_t>> streams_;
  std::set<std::string> launched_on_;        // GPUs (PCI bus ids) this session loaded the module on
  std::set<std::string> maybe_loaded_on_;    // GPUs where a launch failed as its device went away
  unsigned char* pinned_ = nullptr;
  bool session_lost_ = false;
  bool pinned_ok_ = false;
  // Checks of host functions whose stream failed before they were seen to run: a GPU
  // detached under them lets its host functions go, and one may still run after the failure
  // was reported (on the shim's callback thread), so what it reads lives as long as the process.
  std::vector<std::unique_ptr<CallbackCheck>> abandoned_checks_;
  uint64_t ops_ = 0, checked_bytes_ = 0, mismatches_ = 0, unexpected_ = 0, refused_ = 0, detached_seen_ = 0;
  uint64_t callbacks_ = 0, callback_bad_ = 0, launches_ = 0, checkpoints_ = 0;
  std::string last_unexpected_;
  time_t last_status_ = 0;
};

bool Client::Ok(cudaError_t e, const char* what, int ordinal) {
  (void)ordinal;
  if (e == cudaSuccess) return true;
  if (e == cudaErrorMemoryAllocation) {
    refused_++;
    return false;
  }
  if (e == cudaErrorDevicesUnavailable || e == cudaErrorNoDevice) {
    // A detached device fails alone (and an asynchronous failure of its work may surface at a
    // later call on another device): find out which devices still answer. If device 0, never
    // detached by the soak, does not, the session is gone.
    ProbeDevices();
    return false;
  }
  unexpected_++;
  last_unexpected_ = std::string(what) + ": " + cudaGetErrorName(e);
  std::fprintf(stderr, "chaos-client %d: unexpected %s\n", getpid(), last_unexpected_.c_str());
  return false;
}

void Client::ProbeDevices() {
  for (int d = 0; d < static_cast<int>(usable_.size()); d++) {
    if (!usable_[d]) continue;
    size_t free_b, total_b;
    cudaError_t e = cudaErrorUnknown;
    for (int attempt = 0; attempt < 2 && e != cudaSuccess; attempt++) {  // a deferred error is reported once
      cudaSetDevice(d);
      e = cudaMemGetInfo(&free_b, &total_b);
    }
    if (e == cudaSuccess) continue;
    if (d == 0 || (e != cudaErrorDevicesUnavailable && e != cudaErrorNoDevice)) {
      session_lost_ = true;
      return;
    }
    usable_[d] = false;
    detached_seen_++;
    for (Alloc& a : allocs_)
      if (a.ordinal == d) a.lost = true;
  }
}

// After a call that failed, an operation may or may not have been applied: take what the
// device holds as the truth again (without counting it as a mismatch).
void Client::Resync(Alloc& a) {
  if (session_lost_ || a.lost || !Usable(a.ordinal)) return;
  std::vector<unsigned char> back(a.size);
  if (!Use(a.ordinal)) return;
  if (cudaMemcpy(back.data(), a.dev, a.size, cudaMemcpyDeviceToHost) == cudaSuccess) a.shadow = back;
  else ProbeDevices();
}

void Client::RefreshDevices() {
  int n = 0;
  if (!Ok(cudaGetDeviceCount(&n), "cudaGetDeviceCount", 0)) return;
  while (static_cast<int>(usable_.size()) < n) {
    int d = static_cast<int>(usable_.size());
    cudaDeviceProp p;
    bool ok = cudaGetDeviceProperties(&p, d) == cudaSuccess;
    char bus[32] = {};
    if (ok) std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    usable_.push_back(ok);
    bus_ids_.push_back(bus);
  }
}

int Client::RandomOrdinal() {
  std::vector<int> ok;
  for (int d = 0; d < static_cast<int>(usable_.size()); d++)
    if (usable_[d]) ok.push_back(d);
  if (ok.empty()) return 0;
  return ok[rng_() % ok.size()];
}

cudaStream_t Client::StreamOf(int ordinal, int which) {
  auto& v = streams_[ordinal];
  while (static_cast<int>(v.size()) <= which) {
    cudaStream_t s = nullptr;
    if (!Use(ordinal)) return nullptr;
    if (!Ok(cudaStreamCreate(&s), "cudaStreamCreate", ordinal)) return nullptr;
    v.push_back(s);
  }
  return v[which];
}

size_t Client::Held() const {
  size_t n = 0;
  for (const Alloc& a : allocs_) n += a.size;
  return n;
}

Alloc* Client::Pick() {
  std::vector<Alloc*> ok;
  for (Alloc& a : allocs_)
    if (!a.lost && Usable(a.ordinal)) ok.push_back(&a);
  return ok.empty() ? nullptr : ok[rng_() % ok.size()];
}

void Client::Fill(std::vector<unsigned char>& v, size_t off, size_t n) {
  uint64_t x = rng_();
  for (size_t i = 0; i < n; i++) {
    if (i % 8 == 0) x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[off + i] = static_cast<unsigned char>(x >> (8 * (i % 8)));
  }
}

void Client::OpAlloc() {
  size_t size = (rng_() % 4 == 0) ? 1 + rng_() % 4096 : 4096 + rng_() % (1 << 20);
  if (Held() + size > max_bytes_) return OpFree();
  Alloc a;
  a.ordinal = RandomOrdinal();
  a.size = size;
  a.pooled = rng_() % 4 == 0;
  if (!Use(a.ordinal)) return;
  void* p = nullptr;
  cudaStream_t s = StreamOf(a.ordinal, 0);
  if (s == nullptr) return;
  cudaError_t e = a.pooled ? cudaMallocAsync(&p, size, s) : cudaMalloc(&p, size);
  if (!Ok(e, a.pooled ? "cudaMallocAsync" : "cudaMalloc", a.ordinal)) return;
  a.dev = static_cast<unsigned char*>(p);
  unsigned char v = static_cast<unsigned char>(rng_());
  a.shadow.assign(size, v);
  allocs_.push_back(std::move(a));
  Alloc& b = allocs_.back();
  cudaError_t e2 = cudaMemsetAsync(b.dev, v, size, s);
  if (e2 == cudaSuccess) e2 = cudaStreamSynchronize(s);
  if (!Ok(e2, "cudaMemsetAsync", b.ordinal)) Resync(b);
}

void Client::OpFree() {
  if (allocs_.empty()) return;
  size_t i = rng_() % allocs_.size();
  Alloc& a = allocs_[i];
  if (a.lost || !Usable(a.ordinal)) return;  // held until the session ends
  if (rng_() % 2 == 0) Verify(a);
  if (!Use(a.ordinal)) return;
  cudaError_t e;
  if (a.pooled) {
    cudaStream_t s = StreamOf(a.ordinal, 0);
    e = cudaFreeAsync(a.dev, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  } else {
    e = cudaFree(a.dev);
  }
  if (!Ok(e, "cudaFree", a.ordinal)) return;
  allocs_.erase(allocs_.begin() + static_cast<long>(i));
}

void Client::OpWrite() {
  Alloc* a = Pick();
  if (a == nullptr) return;
  size_t off = rng_() % a->size, n = 1 + rng_() % (a->size - off);
  bool pinned = pinned_ok_ && n <= kPinnedBytes && rng_() % 2 == 0;
  bool async = rng_() % 2 == 0;
  std::vector<unsigned char> data(a->shadow);
  Fill(data, off, n);
  std::vector<unsigned char> pageable;
  const unsigned char* src;
  if (pinned) {
    std::memcpy(pinned_, data.data() + off, n);
    src = pinned_;
  } else {
    pageable.assign(data.begin() + static_cast<long>(off), data.begin() + static_cast<long>(off + n));
    src = pageable.data();
  }
  if (!Use(a->ordinal)) return;
  cudaStream_t s = StreamOf(a->ordinal, 1);
  if (s == nullptr) return;
  cudaError_t e = async ? cudaMemcpyAsync(a->dev + off, src, n, cudaMemcpyHostToDevice, s)
                        : cudaMemcpy(a->dev + off, src, n, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && async) e = cudaStreamSynchronize(s);
  if (!Ok(e, "cudaMemcpy H2D", a->ordinal)) return Resync(*a);
  std::memcpy(a->shadow.data() + off, data.data() + off, n);
}

void Client::Verify(Alloc& a) {
  if (a.lost || !Usable(a.ordinal)) return;
  std::vector<unsigned char> back(a.size);
  if (!Use(a.ordinal)) return;
  if (!Ok(cudaMemcpy(back.data(), a.dev, a.size, cudaMemcpyDeviceToHost), "cudaMemcpy D2H (verify)", a.ordinal)) {
    Resync(a);
    return;
  }
  checked_bytes_ += a.size;
  if (back != a.shadow) {
    size_t i = 0;
    while (back[i] == a.shadow[i]) i++;
    mismatches_++;
    std::fprintf(stderr, "chaos-client %d: MISMATCH in %zu-byte allocation %p on device %d at byte %zu: %u, expected %u\n",
                 getpid(), a.size, static_cast<void*>(a.dev), a.ordinal, i, back[i], a.shadow[i]);
    a.shadow = back;  // report each corruption once
  }
}

void Client::OpRead() {
  Alloc* a = Pick();
  if (a == nullptr) return;
  size_t off = rng_() % a->size, n = 1 + rng_() % (a->size - off);
  bool pinned = pinned_ok_ && n <= kPinnedBytes && rng_() % 2 == 0;
  bool async = rng_() % 2 == 0;
  std::vector<unsigned char> pageable(pinned ? 0 : n);
  unsigned char* dst = pinned ? pinned_ : pageable.data();
  if (!Use(a->ordinal)) return;
  cudaStream_t s = StreamOf(a->ordinal, 1);
  if (s == nullptr) return;
  cudaError_t e = async ? cudaMemcpyAsync(dst, a->dev + off, n, cudaMemcpyDeviceToHost, s)
                        : cudaMemcpy(dst, a->dev + off, n, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && async) e = cudaStreamSynchronize(s);
  if (!Ok(e, "cudaMemcpy D2H", a->ordinal)) return;
  checked_bytes_ += n;
  if (std::memcmp(dst, a->shadow.data() + off, n) != 0) {
    mismatches_++;
    std::fprintf(stderr, "chaos-client %d: MISMATCH reading %zu bytes at +%zu of %p (device %d, %s, %s)\n", getpid(), n,
                 off, static_cast<void*>(a->dev), a->ordinal, pinned ? "pinned" : "pageable", async ? "async" : "sync");
    Verify(*a);
  }
}

void Client::OpCopyD2D() {
  Alloc* src = Pick();
  Alloc* dst = Pick();
  if (src == nullptr || dst == nullptr || src->ordinal != dst->ordinal) return;
  size_t n = 1 + rng_() % std::min(src->size, dst->size);
  size_t so = rng_() % (src->size - n + 1), d_o = rng_() % (dst->size - n + 1);
  if (src == dst && so < d_o + n && d_o < so + n) return;  // overlapping: undefined in CUDA too
  if (!Use(dst->ordinal)) return;
  cudaStream_t s = StreamOf(dst->ordinal, 0);
  if (s == nullptr) return;
  bool async = rng_() % 2 == 0;
  cudaError_t e = async ? cudaMemcpyAsync(dst->dev + d_o, src->dev + so, n, cudaMemcpyDeviceToDevice, s)
                        : cudaMemcpy(dst->dev + d_o, src->dev + so, n, cudaMemcpyDeviceToDevice);
  if (e == cudaSuccess && async) e = cudaStreamSynchronize(s);
  if (!Ok(e, "cudaMemcpy D2D", dst->ordinal)) return Resync(*dst);
  std::memmove(dst->shadow.data() + d_o, src->shadow.data() + so, n);
}

void Client::OpMemset() {
  Alloc* a = Pick();
  if (a == nullptr) return;
  size_t off = rng_() % a->size, n = 1 + rng_() % (a->size - off);
  unsigned char v = static_cast<unsigned char>(rng_());
  if (!Use(a->ordinal)) return;
  cudaStream_t s = StreamOf(a->ordinal, 1);
  if (s == nullptr) return;
  bool async = rng_() % 2 == 0;
  cudaError_t e = async ? cudaMemsetAsync(a->dev + off, v, n, s) : cudaMemset(a->dev + off, v, n);
  if (e == cudaSuccess && async) e = cudaStreamSynchronize(s);
  if (!Ok(e, "cudaMemset", a->ordinal)) return Resync(*a);
  std::memset(a->shadow.data() + off, v, n);
}

void Client::OpLaunch() {
  Alloc* a = Pick();
  if (a == nullptr) return;
  if (!Use(a->ordinal)) return;
  cudaStream_t s = StreamOf(a->ordinal, rng_() % 2);
  if (s == nullptr) return;
  // cudaGetLastError reports the last error of any earlier call too (a refused cudaMalloc
  // before this one, say): clear it first, or a launch that ran - its module loaded and
  // charged on this GPU - would count as refused.
  (void)cudaGetLastError();
  Touch<<<1, 32, 0, s>>>(a->dev, -1);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (!Ok(e, "kernel launch", a->ordinal)) {
    // Its device detached meanwhile: the module may have been loaded (and charged) there
    // before the launch failed. The soak accepts either charge.
    if (e == cudaErrorDevicesUnavailable || e == cudaErrorNoDevice) maybe_loaded_on_.insert(bus_ids_[a->ordinal]);
    return;
  }
  launches_++;
  launched_on_.insert(bus_ids_[a->ordinal]);
}

// An asynchronous read into pinned memory, then a host function on the same stream that
// must see exactly those bytes (stream order across the client's callback).
void Client::OpCallback() {
  if (!pinned_ok_) return;
  Alloc* a = Pick();
  if (a == nullptr) return;
  size_t n = 1 + rng_() % std::min(a->size, kPinnedBytes);
  size_t off = rng_() % (a->size - n + 1);
  std::memset(pinned_, 0xEE, n);
  auto owned = std::make_unique<CallbackCheck>();
  CallbackCheck& check = *owned;
  check.pinned = pinned_;
  check.expected.assign(a->shadow.begin() + static_cast<long>(off), a->shadow.begin() + static_cast<long>(off + n));
  if (!Use(a->ordinal)) return;
  cudaStream_t s = StreamOf(a->ordinal, 1);
  if (s == nullptr) return;
  cudaError_t e = cudaMemcpyAsync(pinned_, a->dev + off, n, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaLaunchHostFunc(s, CheckCallback, &check);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (!Ok(e, "host callback", a->ordinal)) {
    // The callback may still run later, even on a detached GPU's stream (waiting for it with
    // a synchronisation cannot tell, that GPU's calls fail): keep what it reads.
    abandoned_checks_.push_back(std::move(owned));
    return;
  }
  callbacks_++;
  if (check.ran.load() != 1 || check.bad.load() != 0) {
    callback_bad_++;
    mismatches_++;
    std::fprintf(stderr, "chaos-client %d: MISMATCH host callback ran %d time(s), saw %s data\n", getpid(),
                 check.ran.load(), check.bad.load() ? "wrong" : "the right");
  }
}

void Client::OpEvent() {
  int d = RandomOrdinal();
  if (!Usable(d)) return;
  if (!Use(d)) return;
  cudaStream_t a = StreamOf(d, 0), b = StreamOf(d, 1);
  if (a == nullptr || b == nullptr) return;
  cudaEvent_t e1, e2;
  if (!Ok(cudaEventCreate(&e1), "cudaEventCreate", d)) return;
  if (!Ok(cudaEventCreate(&e2), "cudaEventCreate", d)) {
    cudaEventDestroy(e1);
    return;
  }
  cudaError_t e = cudaEventRecord(e1, a);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(b, e1, 0);
  if (e == cudaSuccess) e = cudaEventRecord(e2, b);
  if (e == cudaSuccess) e = cudaEventSynchronize(e2);
  if (e == cudaSuccess) e = cudaEventQuery(e1);
  Ok(e, "events", d);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  // Destroys are asynchronous: have their failure (a detached device) reported now, here.
  size_t free_b, total_b;
  Ok(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo", d);
}

void Client::WriteStatus(const char* phase) {
  std::string launched, maybe;
  for (const std::string& b : launched_on_) launched += (launched.empty() ? "\"" : ",\"") + b + "\"";
  for (const std::string& b : maybe_loaded_on_)
    if (!launched_on_.count(b)) maybe += (maybe.empty() ? "\"" : ",\"") + b + "\"";
  size_t lost = 0;
  for (const Alloc& a : allocs_)
    if (a.lost) lost += a.size;
  char buf[1024];
  int n = std::snprintf(buf, sizeof(buf),
                        "{\"pid\": %d, \"phase\": \"%s\", \"checkpoints\": %llu, \"held\": %zu, \"held_lost\": %zu, "
                        "\"allocations\": %zu, \"launched_gpus\": [%s], \"maybe_loaded_gpus\": [%s], \"ops\": %llu, \"checked_bytes\": %llu, "
                        "\"mismatches\": %llu, \"unexpected\": %llu, \"refused\": %llu, \"detached_seen\": %llu, "
                        "\"callbacks\": %llu, \"launches\": %llu, \"session_lost\": %s, \"last_unexpected\": \"%s\"}\n",
                        getpid(), phase, (unsigned long long)checkpoints_, Held(), lost, allocs_.size(), launched.c_str(), maybe.c_str(),
                        (unsigned long long)ops_, (unsigned long long)checked_bytes_, (unsigned long long)mismatches_,
                        (unsigned long long)unexpected_, (unsigned long long)refused_, (unsigned long long)detached_seen_,
                        (unsigned long long)callbacks_, (unsigned long long)launches_, session_lost_ ? "true" : "false",
                        last_unexpected_.c_str());
  std::string path = status_dir_ + "/" + std::to_string(getpid()) + ".json";
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::write(fd, buf, static_cast<size_t>(n));
  ::close(fd);
  ::rename(tmp.c_str(), path.c_str());
  last_status_ = time(nullptr);
}

void Client::Checkpoint(bool wait) {
  g_checkpoint = 0;
  for (int d = 0; d < static_cast<int>(usable_.size()) && !session_lost_; d++) {
    if (!usable_[d]) continue;
    if (!Use(d)) continue;
    Ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", d);
  }
  for (Alloc& a : allocs_)
    if (!session_lost_) Verify(a);
  if (session_lost_) return;
  checkpoints_++;
  WriteStatus(wait ? "checkpoint" : "final");
  if (!wait) return;
  sigset_t mask, old;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR2);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, &old);
  while (!g_resume && !g_stop) sigsuspend(&old);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  g_resume = 0;
}

int Client::Run(bool calibrate) {
  RefreshDevices();
  if (session_lost_ || usable_.empty()) return 3;
  void* p = nullptr;
  pinned_ok_ = cudaMallocHost(&p, kPinnedBytes) == cudaSuccess;
  pinned_ = static_cast<unsigned char*>(p);
  if (calibrate) {
    // Only the module: launch once on device 0 with nothing else held.
    if (!Use(0)) return 3;
    Touch<<<1, 32>>>(nullptr, -1);
    if (!Ok(cudaDeviceSynchronize(), "calibration launch", 0)) return session_lost_ ? 3 : 5;
    launched_on_.insert(bus_ids_[0]);
    WriteStatus("calibrated");
    while (!g_stop) pause();
    return 0;
  }
  WriteStatus("running");
  while (!session_lost_) {
    if (g_checkpoint) Checkpoint(true);
    if (g_stop) {
      Checkpoint(false);
      break;
    }
    if (session_lost_) break;
    switch (rng_() % 16) {
      case 0: case 1: case 2: OpAlloc(); break;
      case 3: case 4: OpFree(); break;
      case 5: case 6: OpWrite(); break;
      case 7: case 8: OpRead(); break;
      case 9: OpCopyD2D(); break;
      case 10: case 11: OpMemset(); break;
      case 12: OpLaunch(); break;
      case 13: OpCallback(); break;
      case 14: OpEvent(); break;
      case 15: RefreshDevices(); break;
    }
    ops_++;
    if (time(nullptr) != last_status_) WriteStatus("running");
  }
  WriteStatus(session_lost_ ? "lost" : "stopped");
  if (mismatches_) return 4;
  if (session_lost_) return 3;
  if (unexpected_) return 5;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  std::string status = ".";
  size_t max_bytes = 16 << 20;
  bool calibrate = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--status" && i + 1 < argc) status = argv[++i];
    else if (a == "--max-bytes" && i + 1 < argc) max_bytes = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--calibrate") calibrate = true;
    else {
      std::fprintf(stderr, "usage: %s --seed N --status DIR [--max-bytes B] [--calibrate]\n", argv[0]);
      return 2;
    }
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGUSR1, SIGUSR2, SIGTERM}) sigaction(s, &sa, nullptr);
  Client c(seed, status, max_bytes);
  return c.Run(calibrate);
}

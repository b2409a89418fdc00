#include "managed.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "callbacks.h"
#include "cuda_wire.h"
#include "client.h"
#include "process.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/api_args.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

constexpr uint64_t kMaxReadahead = 4 << 20;

struct sigaction g_previous;

void OnSignal(int sig, siginfo_t* info, void* ctx) {
  bool write = false;
#if defined(__x86_64__)
  write = (static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
  if (Process* p = Process::IfCreated(); p != nullptr && p->runtime().managed().OnFault(reinterpret_cast<uint64_t>(info->si_addr), write))
    return;
  // Not managed memory: whatever handled it before us does.
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, ctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);  // the access faults again and the process ends as it would have
  }
}

}  // namespace

void ManagedMemory::InstallHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = OnSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
  });
}

Result<uint64_t> ManagedMemory::Stream(int device) {
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second;
  // cuStreamCreateWithPriority(&h, non-blocking, 0), encoded as its generated stub does but
  // sent on this link directly: the stub's path flushes managed memory first, under mu_,
  // which the caller holds. Not in the runtime's table: the application never sees it.
  api::ArgWriter args;
  args.Put<unsigned>(cudaStreamNonBlocking);
  args.Put<int>(0);
  uint64_t h = 0;
  RETURN_IF_ERROR(client_->Call(device, [&](wire::Request::Builder& r) {
    auto a = r.initApiCall();
    a.setLibrary(gen::cuda::kLibrary);
    a.setFunction(gen::cuda::k_cuStreamCreateWithPriority);
    a.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(args.bytes().data()), args.bytes().size()));
  }, [&](wire::Reply::Reader& r) -> Status {
    if (!r.isApiResult()) return Error(Err::kUnknown, "the worker created a stream but answered no handle");
    api::ArgReader out(reinterpret_cast<const std::byte*>(r.getApiResult().begin()), r.getApiResult().size());
    h = out.Get<uint64_t>();
    return out.Finish();
  }));
  streams_[device] = h;
  return h;
}

Status ManagedMemory::Map(Client* c, Range* r, State initial) {
  client_ = c;
  int fd = static_cast<int>(::syscall(SYS_memfd_create, "remora-managed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(r->size)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    if (fd >= 0) ::close(fd);
    return ErrnoStatus(Err::kMemoryAllocation, "create the host copy of managed memory", errno);
  }
  int prot = initial == kInvalid ? PROT_NONE : initial == kClean ? PROT_READ : PROT_READ | PROT_WRITE;
  void* shadow = ::mmap(reinterpret_cast<void*>(r->base), r->size, prot, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
  if (shadow == MAP_FAILED || reinterpret_cast<uint64_t>(shadow) != r->base) {
    if (shadow != MAP_FAILED) ::munmap(shadow, r->size);
    ::close(fd);
    return Error(Err::kMemoryAllocation, "address 0x{:x} of the managed memory is taken in this process", r->base);
  }
  void* alias = ::mmap(nullptr, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (alias == MAP_FAILED) {
    ::munmap(shadow, r->size);
    ::close(fd);
    return ErrnoStatus(Err::kMemoryAllocation, "map managed memory", errno);
  }
  r->fd = fd;
  r->alias = static_cast<std::byte*>(alias);
  r->state.assign(r->size / kChunk, initial);
  // Over shm the worker maps it too: transfers are DMA to and from this memory.
  Client* link = c->LinkFor(r->device);  // its device's server (several servers)
  if (link->capabilities().shared_memory && link->capabilities().passes_fds) {
    uint64_t id = Process::Get().NextRegionId();
    Status st = link->CallWithFd(r->device, fd, [&](wire::Request::Builder& b) {
      auto h = b.initRegisterHostRegion();
      h.setId(id);
      h.setSize(r->size);
    }, [](wire::Reply::Reader&) { return Status::Ok(); });
    if (st.ok()) r->region = id;
    else LOG_INFO("managed memory cannot be shared with the worker ({}): its transfers are copied", st.ToString());
  }
  InstallHandler();
  return Status::Ok();
}

Result<std::unique_ptr<ManagedMemory::Range>> ManagedMemory::NewRange(uint64_t base, uint64_t size, int device,
                                                                       uint64_t device_base) {
  if (base % kChunk != 0) return Error(Err::kMemoryAllocation, "managed memory at 0x{:x} is not chunk aligned", base);
  auto r = std::make_unique<Range>();
  r->base = base;
  r->size = AlignUp(size, kChunk);
  r->device = device;
  r->device_base = device_base;
  r->windows.emplace_back(base, base + size);
  return r;
}

Status ManagedMemory::Add(Client* c, uint64_t base, uint64_t size, int device, uint64_t device_base) {
  ASSIGN_OR_RETURN(std::unique_ptr<Range> r, NewRange(base, size, device, device_base));
  std::lock_guard<std::mutex> lock(mu_);
  client_ = c;
  // The host copy starts as zeros: so does the device's (before anything can use it).
  ASSIGN_OR_RETURN(uint64_t stream, Stream(device));
  RETURN_IF_ERROR(c->Call(device, [&](wire::Request::Builder& b) {
    auto m = b.initMemset();
    m.setDst(base);
    m.setValue(0);
    m.setSize(size);
    m.initStream().setHandle(stream);
  }, [](wire::Reply::Reader&) { return Status::Ok(); }));
  RETURN_IF_ERROR(Map(c, r.get(), kClean));
  ranges_[base] = std::move(r);
  count_.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

Status ManagedMemory::AddPinned(Client* c, uint64_t base, uint64_t size, int device, uint64_t device_base) {
  ASSIGN_OR_RETURN(std::unique_ptr<Range> r, NewRange(base, size, device, device_base));
  r->asleep = true;
  r->pinned = true;
  std::lock_guard<std::mutex> lock(mu_);
  // Dirty: writable without faults, and all of it pushed when it wakes.
  RETURN_IF_ERROR(Map(c, r.get(), kDirty));
  if (base < asleep_lo_.load(std::memory_order_relaxed)) asleep_lo_.store(base, std::memory_order_relaxed);
  if (base + r->size > asleep_hi_.load(std::memory_order_relaxed)) asleep_hi_.store(base + r->size, std::memory_order_relaxed);
  ranges_[base] = std::move(r);
  asleep_.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

std::vector<ManagedMemory::Woken> ManagedMemory::Wake(const void* words, size_t n) {
  std::vector<Woken> woken;
  if (!any_asleep()) return woken;
  const uint64_t lo = asleep_lo_.load(std::memory_order_relaxed), hi = asleep_hi_.load(std::memory_order_relaxed);
  const auto* bytes = static_cast<const std::byte*>(words);
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  for (size_t off = 0; off + sizeof(uint64_t) <= n; off += sizeof(uint64_t)) {
    uint64_t p = 0;
    std::memcpy(&p, bytes + off, sizeof(p));
    if (p < lo || p >= hi) continue;
    if (!lock.owns_lock()) lock.lock();
    Range* r = FindAnyLocked(p);
    if (r == nullptr || !r->asleep) continue;
    r->asleep = false;
    asleep_.fetch_sub(1, std::memory_order_release);
    count_.fetch_add(1, std::memory_order_release);
    dirty_.store(true, std::memory_order_release);
    woken.push_back({r->base, r->windows[0].second - r->base, r->device});
  }
  return woken;
}

std::optional<int> ManagedMemory::DeviceOf(uint64_t base) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.find(base);
  if (it == ranges_.end() || it->second->device_base == 0) return std::nullopt;
  return it->second->device;
}

Status ManagedMemory::AddVariables(Client* c, const std::vector<std::pair<uint64_t, uint64_t>>& vars, int device) {
  if (vars.empty()) return Status::Ok();
  uint64_t lo = UINT64_MAX, hi = 0;
  for (auto [p, n] : vars) {
    lo = std::min(lo, p);
    hi = std::max(hi, p + n);
  }
  auto r = std::make_unique<Range>();
  r->base = lo & ~(kChunk - 1);
  r->size = AlignUp(hi - r->base, kChunk);
  r->device = device;
  for (auto [p, n] : vars) r->windows.emplace_back(p, p + n);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [b, other] : ranges_)
    if (b < r->base + r->size && r->base < b + other->size)
      return Error(Err::kNotSupported, "the managed variables at 0x{:x} share pages with other managed memory", lo);
  RETURN_IF_ERROR(Map(c, r.get(), kInvalid));
  ranges_[r->base] = std::move(r);
  count_.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

Status ManagedMemory::AddVariable(Client* c, uint64_t p, uint64_t n, int device) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Range* r = FindLocked(p);
    if (r != nullptr) {
      if (r->device_base != 0 || r->pinned) return Status::Ok();  // an allocation's memory, not a module's
      for (auto [b, e] : r->windows)
        if (b <= p && p + n <= e) return Status::Ok();  // adopted already
      if (p + n > r->base + r->size)
        return Error(Err::kNotSupported, "the managed variable at 0x{:x} runs past the pages of the module's other variables", p);
      // The range's host copy holds its other variables' bytes only: where it is valid
      // already, this variable's bytes are fetched now; where not, the next host access does.
      r->windows.emplace_back(p, p + n);
      const uint64_t first = (p - r->base) / kChunk, last = (p + n - 1 - r->base) / kChunk + 1;
      for (uint64_t i = first; i < last; i++)
        if (r->state[i] != kInvalid) return Pull(*r, p - r->base, n);
      return Status::Ok();
    }
  }
  return AddVariables(c, {{p, n}}, device);
}

uint64_t ManagedMemory::Remove(Client* c, uint64_t base) {
  std::unique_ptr<Range> r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranges_.find(base);
    if (it == ranges_.end()) return 0;
    r = std::move(it->second);
    ranges_.erase(it);
    (r->asleep ? asleep_ : count_).fetch_sub(1, std::memory_order_release);
  }
  if (r->region != 0 && c != nullptr) {
    (void)c->Call(r->device, [&](wire::Request::Builder& b) { b.setUnregisterHostRegion(r->region); },
                  [](wire::Reply::Reader&) { return Status::Ok(); });
  }
  ::munmap(reinterpret_cast<void*>(r->base), r->size);
  ::munmap(r->alias, r->size);
  ::close(r->fd);
  return r->device_base;
}

bool ManagedMemory::RemoveVariables(Client* c, uint64_t p) {
  uint64_t base = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Range* r = FindLocked(p);
    if (r == nullptr) return false;
    base = r->base;
  }
  (void)Remove(c, base);
  return true;
}

ManagedMemory::Range* ManagedMemory::FindAnyLocked(uint64_t p) {
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return nullptr;
  --it;
  Range* r = it->second.get();
  return p < r->base + r->size ? r : nullptr;
}

ManagedMemory::Range* ManagedMemory::FindLocked(uint64_t p) {
  Range* r = FindAnyLocked(p);
  return r != nullptr && !r->asleep ? r : nullptr;
}

bool ManagedMemory::Contains(uint64_t p) {
  if (empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return FindLocked(p) != nullptr;
}

void ManagedMemory::Protect(Range& r, uint64_t first, uint64_t count, State s) {
  int prot = s == kInvalid ? PROT_NONE : s == kClean ? PROT_READ : PROT_READ | PROT_WRITE;
  ::mprotect(reinterpret_cast<void*>(r.base + first * kChunk), count * kChunk, prot);
  std::fill(r.state.begin() + static_cast<std::ptrdiff_t>(first), r.state.begin() + static_cast<std::ptrdiff_t>(first + count), s);
}

// Moves [off, off + n) of the range between the host copy and the device, only where the
// range holds device data (its windows).
Status ManagedMemory::Push(Range& r, uint64_t off, uint64_t n) {
  ASSIGN_OR_RETURN(uint64_t stream, Stream(r.device));
  for (auto [wb, we] : r.windows) {
    uint64_t b = std::max(wb, r.base + off), e = std::min(we, r.base + off + n);
    if (b >= e) continue;
    uint64_t o = b - r.base, len = e - b;
    auto build = [&](wire::Request::Builder& req) {
      auto m = req.initMemcpyHtoD();
      m.setDst(b);
      m.setSize(len);
      auto s = m.initStream();
      s.setHandle(stream);
      if (r.region != 0) {
        m.setHostRegion(r.region);
        m.setHostOffset(o);
      }
    };
    auto none = [](wire::Reply::Reader&) { return Status::Ok(); };
    RETURN_IF_ERROR(r.region != 0 ? client_->Call(r.device, build, none)
                                  : client_->Call(r.device, build, none, AsBytes(r.alias + o, len)));
  }
  return Status::Ok();
}

Status ManagedMemory::Pull(Range& r, uint64_t off, uint64_t n) {
  ASSIGN_OR_RETURN(uint64_t stream, Stream(r.device));
  for (auto [wb, we] : r.windows) {
    uint64_t b = std::max(wb, r.base + off), e = std::min(we, r.base + off + n);
    if (b >= e) continue;
    uint64_t o = b - r.base, len = e - b;
    auto build = [&](wire::Request::Builder& req) {
      auto m = req.initMemcpyDtoH();
      m.setSrc(b);
      m.setSize(len);
      auto s = m.initStream();
      s.setHandle(stream);
      if (r.region != 0) {
        m.setHostRegion(r.region);
        m.setHostOffset(o);
      }
    };
    auto none = [](wire::Reply::Reader&) { return Status::Ok(); };
    RETURN_IF_ERROR(r.region != 0 ? client_->Call(r.device, build, none)
                                  : client_->Call(r.device, build, none, {}, AsWritableBytes(r.alias + o, len)));
  }
  return Status::Ok();
}

Status ManagedMemory::FlushLocked(Range& r, uint64_t first, uint64_t last) {
  for (uint64_t i = first; i < last;) {
    if (r.state[i] != kDirty) {
      i++;
      continue;
    }
    uint64_t j = i;
    while (j < last && r.state[j] == kDirty) j++;
    RETURN_IF_ERROR(Push(r, i * kChunk, (j - i) * kChunk));
    Protect(r, i, j - i, kClean);  // the next host write is noticed again
    i = j;
  }
  return Status::Ok();
}

Status ManagedMemory::BeforeDeviceWork() {
  if (empty()) return Status::Ok();
  work_epoch_.fetch_add(1, std::memory_order_acq_rel);
  if (!dirty_.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  dirty_.store(false, std::memory_order_release);
  for (auto& [base, r] : ranges_) {
    if (r->asleep) continue;
    Status st = FlushLocked(*r, 0, r->state.size());
    if (!st.ok()) {
      dirty_.store(true);
      return st;
    }
  }
  return Status::Ok();
}

Status ManagedMemory::Flush(uint64_t p, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  Range* r = FindLocked(p);
  if (r == nullptr) return Error(Err::kInvalidValue, "0x{:x} is not managed memory", p);
  uint64_t first = (p - r->base) / kChunk, last = std::min<uint64_t>(r->state.size(), (p - r->base + n + kChunk - 1) / kChunk);
  return FlushLocked(*r, first, last);
}

void ManagedMemory::AfterSync() {
  if (empty()) return;
  uint64_t epoch = work_epoch_.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch == invalidated_epoch_) return;  // nothing reached the device since
  invalidated_epoch_ = epoch;
  for (auto& [base, r] : ranges_) {
    for (uint64_t i = 0; i < r->state.size();) {
      if (r->state[i] != kClean) {
        i++;
        continue;
      }
      uint64_t j = i;
      while (j < r->state.size() && r->state[j] == kClean) j++;
      Protect(*r, i, j - i, kInvalid);
      i = j;
    }
  }
}

Status ManagedMemory::WaitForDeviceLocked() {
  uint64_t epoch = work_epoch_.load(std::memory_order_acquire);
  if (epoch == invalidated_epoch_) return Status::Ok();  // nothing sent since the last wait
  // A device-wide wait would break a stream capture in progress (and capture runs nothing).
  if (client_ != nullptr && client_->captures_active() > 0) return Status::Ok();
  // Every device of the session: the work may be on any of them.
  auto devs = Runtime::Get().Devices();
  if (!devs.ok()) return devs.status();
  for (const DeviceEntry& d : **devs) {
    if (d.detached || d.lost) continue;
    auto link = Runtime::Get().SessionFor(d.ordinal);
    if (!link.ok()) return link.status();
    RETURN_IF_ERROR((*link)->Call(d.ordinal, [](wire::Request::Builder& req) { req.setDeviceSynchronize(); },
                                  [](wire::Reply::Reader&) { return Status::Ok(); }));
  }
  // As AfterSync: what the host holds clean may have changed on the device.
  invalidated_epoch_ = epoch;
  for (auto& [base, range] : ranges_)
    for (uint64_t i = 0; i < range->state.size(); i++)
      if (range->state[i] == kClean) Protect(*range, i, 1, kInvalid);
  return Status::Ok();
}

bool ManagedMemory::OnFault(uint64_t addr, bool write) {
  if (empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  Range* r = FindLocked(addr);
  if (r == nullptr) return false;
  uint64_t idx = (addr - r->base) / kChunk;
  // The host touches managed memory while work it sent may still run on the device: on a GPU
  // without concurrent managed access (what Remora reports) that is an error the program
  // never sees through a real driver only because the driver faults it; here the host waits
  // until the device is done, then sees (and its writes build on) what the device wrote. A
  // program that touches managed memory from host and device at once - system-scope atomics,
  // NVIDIA's systemWideAtomics - gets the device's work and then its own: one of the orders
  // concurrent access allows. Not on the callback thread, whose stream may wait for it, nor
  // for pinned memory, which host and device may use at once (AddPinned).
  if (r->state[idx] != kDirty && !r->pinned && !HostCallbacks::OnCallbackThread()) {
    Status st = WaitForDeviceLocked();
    if (!st.ok()) {
      LOG_ERROR("managed memory at 0x{:x} was touched while the device may use it, and waiting for the device "
                "failed: {}", addr, st.ToString());
      return false;
    }
  }
  switch (r->state[idx]) {
    case kInvalid: {
      // Fetch a run of invalid chunks: one, or more while the faults are sequential.
      r->readahead = idx == r->next_expected ? std::min(r->readahead * 2, kMaxReadahead) : kChunk;
      uint64_t want = r->readahead / kChunk, end = idx;
      while (end < r->state.size() && end - idx < want && r->state[end] == kInvalid) end++;
      Status st = Pull(*r, idx * kChunk, (end - idx) * kChunk);
      if (!st.ok()) {
        // Serving stale data would be silent corruption: the access cannot complete.
        LOG_ERROR("cannot fetch managed memory at 0x{:x} from the server: {}", addr, st.ToString());
        return false;
      }
      r->next_expected = end;
      Protect(*r, idx, end - idx, kClean);
      if (write) {
        Protect(*r, idx, 1, kDirty);
        dirty_.store(true, std::memory_order_release);
      }
      return true;
    }
    case kClean:
      // A read never faults on a readable chunk: this is the first write since the flush.
      Protect(*r, idx, 1, kDirty);
      dirty_.store(true, std::memory_order_release);
      return true;
    case kDirty:
      return true;  // another thread got here first
  }
  return false;
}

Result<ManagedMemory::Advice*> ManagedMemory::AdviceFor(uint64_t p, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  Range* r = FindLocked(p);
  if (r == nullptr || p + n > r->base + r->size) return Error(Err::kInvalidValue, "0x{:x}+{} is not managed memory", p, n);
  return &r->advice;
}

}  // namespace remora::shim

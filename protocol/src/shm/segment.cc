#include "shm/segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

namespace remora::shm {
namespace {

bool PowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

Status Geometry::Validate() const {
  if (!PowerOfTwo(ring_bytes) || ring_bytes < (64 << 10) || ring_bytes > (64 << 20))
    return Error(Err::kInvalidValue, "shm ring size {} is invalid", ring_bytes);
  if (slot_bytes < (64 << 10) || slot_bytes > (64 << 20) || slot_bytes % 4096 != 0)
    return Error(Err::kInvalidValue, "shm slot size {} is invalid", slot_bytes);
  if (slots < 1 || slots > kMaxSlots) return Error(Err::kInvalidValue, "shm slot count {} is invalid", slots);
  if (inline_bulk > ring_bytes / 4 || inline_bulk % 8 != 0)
    return Error(Err::kInvalidValue, "shm inline bulk limit {} is invalid", inline_bulk);
  return Status::Ok();
}

Result<Segment> Segment::Create(const Geometry& g) {
  RETURN_IF_ERROR(g.Validate());
  Fd fd(static_cast<int>(::syscall(SYS_memfd_create, "remora-session", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!fd) return ErrnoStatus(Err::kInitializationError, "memfd_create", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(g.total_bytes())) != 0)
    return ErrnoStatus(Err::kInitializationError, "ftruncate(shm segment)", errno);
  // The executor refuses segments that could shrink under it (SIGBUS).
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return ErrnoStatus(Err::kInitializationError, "seal shm segment", errno);
  void* p = ::mmap(nullptr, g.total_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus(Err::kMemoryAllocation, "mmap(shm segment)", errno);
  Segment s;
  s.base_ = static_cast<std::byte*>(p);
  s.size_ = g.total_bytes();
  s.geometry_ = g;
  s.fd_ = std::move(fd);
  Control* c = new (p) Control();
  c->header = Header{kMagic, kVersion, g.slots, g.ring_bytes, g.slot_bytes, g.inline_bulk, g.total_bytes()};
  return s;
}

Result<Segment> Segment::Attach(Fd memfd) {
  int seals = ::fcntl(memfd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_SEAL))
    return Error(Err::kInvalidValue, "client shm segment is not sealed against shrinking");
  struct stat st;
  if (::fstat(memfd.get(), &st) != 0) return ErrnoStatus(Err::kInvalidValue, "fstat(shm segment)", errno);
  if (static_cast<uint64_t>(st.st_size) < kControlBytes)
    return Error(Err::kInvalidValue, "client shm segment is too small ({} bytes)", st.st_size);
  // Read the geometry through a private copy; the shared header may change under us.
  Header head;
  if (::pread(memfd.get(), &head, sizeof(head), 0) != static_cast<ssize_t>(sizeof(head)))
    return Error(Err::kInvalidValue, "cannot read client shm segment header");
  if (head.magic != kMagic || head.version != kVersion)
    return Error(Err::kInvalidValue, "client shm segment has a bad magic or version");
  Geometry g;
  g.ring_bytes = head.ring_bytes;
  g.slot_bytes = head.slot_bytes;
  g.slots = head.slots;
  g.inline_bulk = head.inline_bulk;
  RETURN_IF_ERROR(g.Validate());
  if (head.total_bytes != g.total_bytes() || static_cast<uint64_t>(st.st_size) < g.total_bytes())
    return Error(Err::kInvalidValue, "client shm segment size does not match its geometry");
  void* p = ::mmap(nullptr, g.total_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus(Err::kMemoryAllocation, "mmap(client shm segment)", errno);
  Segment s;
  s.base_ = static_cast<std::byte*>(p);
  s.size_ = g.total_bytes();
  s.geometry_ = g;
  s.fd_ = std::move(memfd);
  return s;
}

Segment::Segment(Segment&& o) noexcept { *this = std::move(o); }

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) ::munmap(base_, size_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    geometry_ = o.geometry_;
    fd_ = std::move(o.fd_);
  }
  return *this;
}

Segment::~Segment() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us) {
  struct timespec ts = {static_cast<time_t>(timeout_us / 1000000), static_cast<long>((timeout_us % 1000000) * 1000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void Ring(Doorbell* bell) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell->waiting.load(std::memory_order_relaxed) != 0) {
    bell->seq.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell->seq), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

}  // namespace remora::shm

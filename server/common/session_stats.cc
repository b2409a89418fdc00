#include "common/session_stats.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>

#include "remora/base/util.h"

namespace remora {
namespace {

constexpr size_t kBlockBytes = 4096;
static_assert(sizeof(SessionCounters) <= kBlockBytes);

Result<SessionCounters*> Map(int fd) {
  void* p = ::mmap(nullptr, kBlockBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(Err::kInitializationError, "mmap session counters", errno);
  return static_cast<SessionCounters*>(p);
}

}  // namespace

SessionStatsBlock::~SessionStatsBlock() { Reset(); }

SessionStatsBlock::SessionStatsBlock(SessionStatsBlock&& o) noexcept
    : fd_(std::move(o.fd_)), counters_(std::exchange(o.counters_, nullptr)) {}

SessionStatsBlock& SessionStatsBlock::operator=(SessionStatsBlock&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = std::move(o.fd_);
    counters_ = std::exchange(o.counters_, nullptr);
  }
  return *this;
}

void SessionStatsBlock::Reset() {
  if (counters_ != nullptr) ::munmap(counters_, kBlockBytes);
  counters_ = nullptr;
  fd_.reset();
}

Result<SessionStatsBlock> SessionStatsBlock::Create() {
  SessionStatsBlock b;
  b.fd_.reset(static_cast<int>(::syscall(SYS_memfd_create, "remora-session-stats", MFD_CLOEXEC)));
  if (!b.fd_) return ErrnoStatus(Err::kInitializationError, "memfd_create(session counters)", errno);
  if (::ftruncate(b.fd_.get(), kBlockBytes) != 0)
    return ErrnoStatus(Err::kInitializationError, "ftruncate(session counters)", errno);
  ASSIGN_OR_RETURN(SessionCounters * c, Map(b.fd_.get()));
  b.counters_ = new (c) SessionCounters();  // the memfd is zeroed; this starts the objects' lifetime
  return b;
}

Result<SessionStatsBlock> SessionStatsBlock::Attach(Fd fd) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(Err::kInitializationError, "fstat(session counters)", errno);
  if (static_cast<size_t>(st.st_size) < kBlockBytes)
    return Error(Err::kInitializationError, "the session counters block is {} bytes, expected {}", st.st_size, kBlockBytes);
  SessionStatsBlock b;
  b.fd_ = std::move(fd);
  ASSIGN_OR_RETURN(b.counters_, Map(b.fd_.get()));
  return b;
}

}  // namespace remora

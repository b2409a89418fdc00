#include "common/compute_region.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "remora/base/util.h"

namespace remora {
namespace {

Result<void*> Map(int fd) {
  void* p = ::mmap(nullptr, sched::ComputeBoard::RegionBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(Err::kInitializationError, "mmap the compute board", errno);
  return p;
}

}  // namespace

ComputeRegion::~ComputeRegion() { Reset(); }

ComputeRegion::ComputeRegion(ComputeRegion&& o) noexcept
    : fd_(std::move(o.fd_)), mem_(std::exchange(o.mem_, nullptr)), board_(std::move(o.board_)) {}

ComputeRegion& ComputeRegion::operator=(ComputeRegion&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = std::move(o.fd_);
    mem_ = std::exchange(o.mem_, nullptr);
    board_ = std::move(o.board_);
  }
  return *this;
}

void ComputeRegion::Reset() {
  board_.reset();
  if (mem_ != nullptr) ::munmap(mem_, sched::ComputeBoard::RegionBytes());
  mem_ = nullptr;
  fd_.reset();
}

Result<ComputeRegion> ComputeRegion::Create(const sched::Tunables& tunables) {
  ComputeRegion r;
  r.fd_.reset(static_cast<int>(::syscall(SYS_memfd_create, "remora-compute", MFD_CLOEXEC)));
  if (!r.fd_) return ErrnoStatus(Err::kInitializationError, "memfd_create(compute board)", errno);
  if (::ftruncate(r.fd_.get(), static_cast<off_t>(sched::ComputeBoard::RegionBytes())) != 0)
    return ErrnoStatus(Err::kInitializationError, "ftruncate(compute board)", errno);
  ASSIGN_OR_RETURN(r.mem_, Map(r.fd_.get()));
  ASSIGN_OR_RETURN(sched::ComputeBoard b, sched::ComputeBoard::Create(r.mem_, sched::ComputeBoard::RegionBytes(), tunables));
  r.board_ = std::make_unique<sched::ComputeBoard>(b);
  return r;
}

Result<ComputeRegion> ComputeRegion::Attach(Fd fd) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(Err::kInitializationError, "fstat(compute board)", errno);
  if (static_cast<size_t>(st.st_size) < sched::ComputeBoard::RegionBytes())
    return Error(Err::kInitializationError, "the compute board is {} bytes, expected {}", st.st_size,
                 sched::ComputeBoard::RegionBytes());
  ComputeRegion r;
  r.fd_ = std::move(fd);
  ASSIGN_OR_RETURN(r.mem_, Map(r.fd_.get()));
  ASSIGN_OR_RETURN(sched::ComputeBoard b, sched::ComputeBoard::Attach(r.mem_, sched::ComputeBoard::RegionBytes()));
  r.board_ = std::make_unique<sched::ComputeBoard>(b);
  return r;
}

}  // namespace remora

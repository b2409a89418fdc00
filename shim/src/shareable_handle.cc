#include "shareable_handle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "remora/base/fd.h"
#include "remora/base/util.h"

namespace remora::shim {
namespace {

// The file: "REMORA" kind '1', then the capability.
constexpr char kMagic[6] = {'R', 'E', 'M', 'O', 'R', 'A'};
constexpr size_t kHeader = sizeof(kMagic) + 2;
constexpr size_t kBytes = kHeader + sizeof(CUipcMemHandle);

}  // namespace

Result<int> WriteShareableHandle(ShareableKind kind, const CUipcMemHandle& capability) {
  char bytes[kBytes];
  std::memcpy(bytes, kMagic, sizeof(kMagic));
  bytes[sizeof(kMagic)] = static_cast<char>(kind);
  bytes[sizeof(kMagic) + 1] = '1';
  std::memcpy(bytes + kHeader, &capability, sizeof(capability));
  Fd fd(static_cast<int>(::syscall(SYS_memfd_create, "remora-shareable-handle", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!fd) return ErrnoStatus(Err::kMemoryAllocation, "memfd_create for a shareable handle", errno);
  if (::pwrite(fd.get(), bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes)))
    return ErrnoStatus(Err::kMemoryAllocation, "writing a shareable handle", errno);
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return ErrnoStatus(Err::kMemoryAllocation, "sealing a shareable handle", errno);
  return fd.release();
}

Result<CUipcMemHandle> ReadShareableHandle(ShareableKind kind, int fd) {
  char bytes[kBytes + 1];
  struct stat info;
  if (::fstat(fd, &info) != 0 || info.st_size != static_cast<off_t>(kBytes) ||
      ::pread(fd, bytes, sizeof(bytes), 0) != static_cast<ssize_t>(kBytes) ||
      std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0 || bytes[sizeof(kMagic) + 1] != '1')
    return Error(Err::kInvalidValue, "descriptor {} is not a shareable handle made by Remora", fd);
  if (bytes[sizeof(kMagic)] != static_cast<char>(kind))
    return Error(Err::kInvalidValue, "descriptor {} is the shareable handle of {}", fd,
                 bytes[sizeof(kMagic)] == static_cast<char>(ShareableKind::kPool) ? "a memory pool" : "physical memory");
  CUipcMemHandle capability;
  std::memcpy(&capability, bytes + kHeader, sizeof(capability));
  return capability;
}

}  // namespace remora::shim

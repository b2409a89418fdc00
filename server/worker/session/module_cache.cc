#include "worker/session/module_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "remora/base/log.h"
#include "remora/protocol/auth.h"

namespace remora::worker {
namespace {

constexpr char kSuffix[] = ".fatbin";

bool IsEntryName(const char* name) {
  size_t n = std::strlen(name);
  if (n != kModuleHashBytes * 2 + sizeof(kSuffix) - 1) return false;
  for (size_t i = 0; i < kModuleHashBytes * 2; i++)
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  return std::strcmp(name + kModuleHashBytes * 2, kSuffix) == 0;
}

struct Entry {
  std::string name;
  uint64_t bytes;
  struct timespec used;
};

// Regular files of the directory (entries and leftovers of interrupted writes).
std::vector<Entry> List(int dir) {
  std::vector<Entry> out;
  int copy = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return out;
  DIR* d = ::fdopendir(copy);
  if (d == nullptr) {
    ::close(copy);
    return out;
  }
  ::rewinddir(d);
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    if (::fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({e->d_name, static_cast<uint64_t>(st.st_size), st.st_mtim});
  }
  ::closedir(d);
  return out;
}

}  // namespace

std::string ModuleHashHex(const void* data, size_t size) {
  uint8_t h[kModuleHashBytes];
  crypto_generichash(h, sizeof(h), static_cast<const unsigned char*>(data), size, nullptr, 0);
  return ToHex(h, sizeof(h));
}

std::vector<std::byte> ModuleCache::Read(const std::string& hash_hex, uint64_t size) {
  if (!dir_) return {};
  std::string name = hash_hex + kSuffix;
  if (!IsEntryName(name.c_str())) return {};
  Fd f(::openat(dir_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!f) return {};
  struct stat st;
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != size) return {};
  std::vector<std::byte> image(size);
  uint64_t got = 0;
  while (got < size) {
    ssize_t r = ::read(f.get(), image.data() + got, size - got);
    if (r <= 0) return {};
    got += static_cast<uint64_t>(r);
  }
  if (ModuleHashHex(image.data(), image.size()) != hash_hex) {
    // Damaged (or altered): never served; the next upload of these bytes replaces it.
    LOG_WARN("module cache entry {} does not match its hash: removed", name);
    ::unlinkat(dir_.get(), name.c_str(), 0);
    return {};
  }
  ::futimens(f.get(), nullptr);  // recently used: evicted last
  return image;
}

uint64_t ModuleCache::UsedBytes() {
  uint64_t sum = 0;
  for (const Entry& e : List(dir_.get())) sum += e.bytes;
  return sum;
}

void ModuleCache::MakeRoom(uint64_t incoming) {
  std::vector<Entry> entries = List(dir_.get());
  uint64_t used = 0;
  for (const Entry& e : entries) used += e.bytes;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec : a.used.tv_nsec < b.used.tv_nsec;
  });
  for (const Entry& e : entries) {
    if (used + incoming <= budget_) break;
    if (::unlinkat(dir_.get(), e.name.c_str(), 0) == 0) used -= std::min(used, e.bytes);
  }
}

void ModuleCache::Store(const std::string& hash_hex, const std::vector<std::byte>& image) {
  if (!dir_ || image.size() > budget_) return;
  std::string name = hash_hex + kSuffix;
  if (!IsEntryName(name.c_str())) return;
  struct stat st;
  if (::fstatat(dir_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return;  // never replaced
  MakeRoom(image.size());
  std::string tmp = ".tmp." + std::to_string(::getpid()) + "." + hash_hex.substr(0, 16);
  Fd f(::openat(dir_.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!f) {
    LOG_WARN("cannot write to the module cache: {}", std::strerror(errno));
    return;
  }
  uint64_t put = 0;
  while (put < image.size()) {
    ssize_t w = ::write(f.get(), image.data() + put, image.size() - put);
    if (w <= 0) {
      LOG_WARN("cannot write to the module cache: {}", std::strerror(errno));
      ::unlinkat(dir_.get(), tmp.c_str(), 0);
      return;
    }
    put += static_cast<uint64_t>(w);
  }
  f.reset();
  // link(2) fails if the name exists: an entry is never replaced, even in a race.
  if (::linkat(dir_.get(), tmp.c_str(), dir_.get(), name.c_str(), 0) != 0 && errno != EEXIST)
    LOG_WARN("cannot add {} to the module cache: {}", name, std::strerror(errno));
  ::unlinkat(dir_.get(), tmp.c_str(), 0);
}

}  // namespace remora::worker

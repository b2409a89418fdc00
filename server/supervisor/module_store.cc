#include "supervisor/module_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/auth.h"

namespace remora::server {
namespace {

// Calls fn(name, stat) for each entry of `dir` but "." and "..".
void ForEachEntry(int dir, const std::function<void(const char*, const struct stat&)>& fn) {
  int copy = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return;
  DIR* d = ::fdopendir(copy);
  if (d == nullptr) {
    ::close(copy);
    return;
  }
  ::rewinddir(d);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& n : names) {
    struct stat st;
    if (::fstatat(dir, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) fn(n.c_str(), st);
  }
}

// Removes `name` in `dir`, recursively if it is a directory (never following links).
void RemoveTree(int dir, const char* name) {
  Fd sub(::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (sub) {
    ForEachEntry(sub.get(), [&](const char* n, const struct stat&) { RemoveTree(sub.get(), n); });
    ::unlinkat(dir, name, AT_REMOVEDIR);
  } else {
    ::unlinkat(dir, name, 0);
  }
}

}  // namespace

Result<ModuleStore> ModuleStore::Open(const std::string& root, uint64_t budget) {
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus(Err::kInitializationError, "create the module cache directory " + root, errno);
  Fd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoStatus(Err::kInitializationError, "open the module cache directory " + root, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(Err::kInitializationError, "stat " + root, errno);
  if (st.st_uid != ::geteuid())
    return Error(Err::kInitializationError, "the module cache directory {} belongs to uid {}, not to this server (uid {})",
                 root, st.st_uid, ::geteuid());
  if ((st.st_mode & 077) != 0) {
    LOG_WARN("module cache directory {} had mode {:o}: set to 0700", root, st.st_mode & 0777);
    if (::fchmod(fd.get(), 0700) != 0) return ErrnoStatus(Err::kInitializationError, "chmod " + root, errno);
  }
  // Files directly in the root are the shared cache of servers before per-tenant caches:
  // entries any tenant could have written. They are never served: remove them.
  int legacy = 0;
  ForEachEntry(fd.get(), [&](const char* name, const struct stat& e) {
    if (S_ISDIR(e.st_mode) && ValidateTenantName(name).ok()) return;
    RemoveTree(fd.get(), name);
    legacy++;
  });
  if (legacy > 0) LOG_INFO("module cache: removed {} entr{} of the old shared cache in {}", legacy, legacy == 1 ? "y" : "ies", root);
  ModuleStore s(root, std::move(fd), budget);
  s.Trim();
  return s;
}

Result<Fd> ModuleStore::TenantDir(const std::string& tenant, uid_t uid, gid_t gid, bool share_by_group) {
  RETURN_IF_ERROR(ValidateTenantName(tenant));
  if (::mkdirat(fd_.get(), tenant.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus(Err::kUnknown, "create the module cache of tenant " + tenant, errno);
  Fd d(::openat(fd_.get(), tenant.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d) return ErrnoStatus(Err::kUnknown, "open the module cache of tenant " + tenant, errno);
  struct stat st;
  if (share_by_group) {
    if (::fstat(d.get(), &st) != 0) return ErrnoStatus(Err::kUnknown, "stat the module cache of tenant " + tenant, errno);
    if (st.st_uid != ::geteuid())
      return Error(Err::kInitializationError,
                   "the module cache of tenant {} belongs to uid {} (a server that ran as root made it): as root, "
                   "chown {}:{} it and chmod 0770 it, or remove it",
                   tenant, st.st_uid, ::geteuid(), gid);
    if ((st.st_gid != gid || (st.st_mode & 0777) != 0770) && (::fchown(d.get(), static_cast<uid_t>(-1), gid) != 0 ||
                                                                ::fchmod(d.get(), 0770) != 0))
      return ErrnoStatus(Err::kUnknown, "share the module cache of tenant " + tenant + " with the workers' group", errno);
    return d;
  }
  if (::fstat(d.get(), &st) == 0 && (st.st_uid != uid || st.st_gid != gid || (st.st_mode & 0777) != 0700)) {
    if (::fchown(d.get(), uid, gid) != 0 || ::fchmod(d.get(), 0700) != 0)
      return ErrnoStatus(Err::kUnknown, "give the module cache of tenant " + tenant + " to the worker user", errno);
  }
  return d;
}

void ModuleStore::RemoveTenant(const std::string& tenant) {
  if (!ValidateTenantName(tenant).ok()) return;
  RemoveTree(fd_.get(), tenant.c_str());
}

uint64_t ModuleStore::UsedBytes() const {
  uint64_t sum = 0;
  ForEachEntry(fd_.get(), [&](const char* name, const struct stat& st) {
    if (!S_ISDIR(st.st_mode)) return;
    Fd sub(::openat(fd_.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (sub)
      ForEachEntry(sub.get(), [&](const char*, const struct stat& f) {
        if (S_ISREG(f.st_mode)) sum += static_cast<uint64_t>(f.st_size);
      });
  });
  return sum;
}

void ModuleStore::Trim() {
  struct Item {
    std::string tenant, name;
    uint64_t bytes;
    struct timespec used;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  ForEachEntry(fd_.get(), [&](const char* tenant, const struct stat& st) {
    if (!S_ISDIR(st.st_mode)) return;
    Fd sub(::openat(fd_.get(), tenant, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return;
    ForEachEntry(sub.get(), [&](const char* name, const struct stat& f) {
      if (!S_ISREG(f.st_mode)) return;
      items.push_back({tenant, name, static_cast<uint64_t>(f.st_size), f.st_mtim});
      total += static_cast<uint64_t>(f.st_size);
    });
  });
  if (total <= budget_) return;
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec : a.used.tv_nsec < b.used.tv_nsec;
  });
  uint64_t before = total;
  for (const Item& it : items) {
    if (total <= budget_) break;
    Fd sub(::openat(fd_.get(), it.tenant.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (sub && ::unlinkat(sub.get(), it.name.c_str(), 0) == 0) total -= it.bytes;
  }
  LOG_INFO("module cache: {} over its budget of {}: evicted {}", root_, FormatSize(budget_), FormatSize(before - total));
}

}  // namespace remora::server

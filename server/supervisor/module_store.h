// The module image caches of all tenants: one directory per tenant under a root
// (<state-dir>/modules by default, or --module-cache-dir). Workers get only their tenant's
// directory, as a descriptor (worker/session/module_cache.h fills it); the supervisor creates,
// bounds and removes them. Loop thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "remora/base/fd.h"
#include "remora/base/status.h"

namespace remora::server {

class ModuleStore {
 public:
  // Creates the root (mode 0700) if needed and removes what an older server left there (the
  // shared cache of files named by a non-cryptographic hash).
  static Result<ModuleStore> Open(const std::string& root, uint64_t budget_bytes);

  // The tenant's directory, created if missing and opened without following links, for a
  // worker (uid:gid) to inherit: owned by uid:gid, mode 0700 (a root server); or, with
  // `share_by_group` (a server that is not root, which cannot give files away), the server's
  // own, group gid, mode 0770.
  Result<Fd> TenantDir(const std::string& tenant, uid_t uid, gid_t gid, bool share_by_group = false);
  // Deletes a tenant's directory and everything in it.
  void RemoveTenant(const std::string& tenant);
  // Evicts the least recently used entries of all tenants until the total fits the budget.
  void Trim();
  uint64_t UsedBytes() const;

  const std::string& root() const { return root_; }

 private:
  ModuleStore(std::string root, Fd fd, uint64_t budget) : root_(std::move(root)), fd_(std::move(fd)), budget_(budget) {}
  std::string root_;
  Fd fd_;
  uint64_t budget_;
};

}  // namespace remora::server

// Administration of a pool's shared state (tenants, GPU assignments), as the admin API of any
// of its servers does it: each change is one store transaction, so two administrators (or
// two servers' admin APIs) never half-apply theirs. Reads are fresh from the store, never
// from a server's mirror. Blocking (each call a few store round trips); thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pool/kv_store.h"
#include "pool/placement.h"
#include "pool/records.h"

namespace remora::pool {

class PoolAdmin {
 public:
  PoolAdmin(KvStore& store, PoolKeys keys) : store_(store), keys_(std::move(keys)) {}

  // The whole pool as the store has it now.
  Result<PoolView> View();
  // kInvalidValue if the tenant exists. Returns the store's revision of the change.
  Result<int64_t> CreateTenant(const PoolTenant& t);
  // The tenant, its assignments and the shares servers hold for it. kInvalidValue if absent.
  Result<int64_t> DeleteTenant(const std::string& name);
  // Read-modify-write of a tenant's record (retried if it changed meanwhile).
  Result<int64_t> UpdateTenant(const std::string& name, const std::function<Status(PoolTenant&)>& change);
  // One GPU of one server (by the server's GPU index) to the tenant; Ok if it already is.
  Result<int64_t> Attach(const std::string& tenant, const std::string& server, int gpu);
  // One GPU of one server (by index), or every GPU of the tenant on `server` when gpu < 0,
  // or every GPU of the tenant when server is empty. Returns how many were detached.
  Result<std::pair<int64_t, int>> Detach(const std::string& tenant, const std::string& server, int gpu);
  // Chooses and assigns request.count GPUs (placement.h) in one transaction; retried when
  // the pool changed meanwhile.
  Result<std::pair<int64_t, std::vector<Assignment>>> Place(const PlacementRequest& request);
  // Waits until every live server (or those named) applied `revision` (records.h, applied/),
  // for at most timeout_ms. kTimeout naming the servers that have not.
  Status WaitApplied(int64_t revision, const std::vector<std::string>& servers, int timeout_ms);

 private:
  KvStore& store_;
  PoolKeys keys_;
};

}  // namespace remora::pool

#include "pool/pool_admin.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/ranges.h>

#include "remora/base/util.h"

namespace remora::pool {
namespace {

constexpr int kTries = 8;  // transactions lost to a concurrent change are tried again

Compare Exists(const std::string& key) {
  return Compare{Compare::Target::kVersion, Compare::Op::kGreater, key, "", 0, ""};
}
Compare Absent(const std::string& key) {
  return Compare{Compare::Target::kVersion, Compare::Op::kEqual, key, "", 0, ""};
}
Compare Unchanged(const std::string& key, int64_t mod_revision) {
  return Compare{Compare::Target::kMod, Compare::Op::kEqual, key, "", mod_revision, ""};
}
TxnOp Put(std::string key, std::string value) { return TxnOp{TxnOp::Kind::kPut, std::move(key), "", std::move(value), 0}; }
TxnOp DeletePrefix(const std::string& prefix) { return TxnOp{TxnOp::Kind::kDelete, prefix, PrefixEnd(prefix), "", 0}; }
TxnOp Delete(std::string key) { return TxnOp{TxnOp::Kind::kDelete, std::move(key), "", "", 0}; }

Status NoTenant(const std::string& name) { return Error(Err::kInvalidValue, "no such tenant '{}' in the pool", name); }

}  // namespace

Result<PoolView> PoolAdmin::View() {
  ASSIGN_OR_RETURN(RangeResult r, store_.Range(keys_.prefix(), PrefixEnd(keys_.prefix())));
  std::map<std::string, KeyValue> kvs;
  for (KeyValue& kv : r.kvs) kvs.emplace(kv.key, std::move(kv));
  return BuildView(keys_, kvs, r.revision);
}

Result<int64_t> PoolAdmin::CreateTenant(const PoolTenant& t) {
  RETURN_IF_ERROR(ValidateTenantName(t.name));
  std::string key = keys_.Tenant(t.name);
  // A leftover of an earlier tenant of that name (assignments, shares) goes with the create.
  ASSIGN_OR_RETURN(TxnResult r, store_.Txn({Absent(key)},
                                           {DeletePrefix(keys_.TenantAssignments(t.name)), Put(key, EncodeTenant(t))}, {}));
  if (!r.succeeded) return Error(Err::kInvalidValue, "tenant '{}' already exists in the pool", t.name);
  return r.revision;
}

Result<int64_t> PoolAdmin::DeleteTenant(const std::string& name) {
  std::string key = keys_.Tenant(name);
  ASSIGN_OR_RETURN(TxnResult r, store_.Txn({Exists(key)},
                                           {Delete(key), DeletePrefix(keys_.TenantAssignments(name)),
                                            DeletePrefix(keys_.TenantShares(name))},
                                           {}));
  if (!r.succeeded) return NoTenant(name);
  return r.revision;
}

Result<int64_t> PoolAdmin::UpdateTenant(const std::string& name, const std::function<Status(PoolTenant&)>& change) {
  std::string key = keys_.Tenant(name);
  for (int i = 0; i < kTries; i++) {
    ASSIGN_OR_RETURN(RangeResult got, store_.Range(key, ""));
    if (got.kvs.empty()) return NoTenant(name);
    ASSIGN_OR_RETURN(PoolTenant t, DecodeTenant(got.kvs[0].value));
    RETURN_IF_ERROR(change(t));
    ASSIGN_OR_RETURN(TxnResult r, store_.Txn({Unchanged(key, got.kvs[0].mod_revision)}, {Put(key, EncodeTenant(t))}, {}));
    if (r.succeeded) return r.revision;
  }
  return Error(Err::kNotReady, "tenant '{}' kept changing: try again", name);
}

Result<int64_t> PoolAdmin::Attach(const std::string& tenant, const std::string& server, int gpu) {
  ASSIGN_OR_RETURN(PoolView v, View());
  if (!v.tenants.count(tenant)) return NoTenant(tenant);
  auto s = v.servers.find(server);
  if (s == v.servers.end()) return Error(Err::kInvalidValue, "no live server '{}' in the pool", server);
  auto g = std::find_if(s->second.gpus.begin(), s->second.gpus.end(), [&](const PoolGpu& x) { return x.index == gpu; });
  if (g == s->second.gpus.end())
    return Error(Err::kInvalidValue, "no GPU {} on server '{}' (it has {})", gpu, server, s->second.gpus.size());
  std::string key = keys_.Assign(tenant, server, g->uuid);
  ASSIGN_OR_RETURN(TxnResult r, store_.Txn({Exists(keys_.Tenant(tenant)), Absent(key)},
                                           {Put(key, EncodeAssignment({tenant, server, g->uuid, gpu, 0}))},
                                           {TxnOp{TxnOp::Kind::kRange, keys_.Tenant(tenant), "", "", 0}}));
  if (!r.succeeded && (r.ranges.empty() || r.ranges[0].kvs.empty())) return NoTenant(tenant);
  return r.revision;  // not succeeded with the tenant there: it was attached already
}

Result<std::pair<int64_t, int>> PoolAdmin::Detach(const std::string& tenant, const std::string& server, int gpu) {
  ASSIGN_OR_RETURN(PoolView v, View());
  if (!v.tenants.count(tenant)) return NoTenant(tenant);
  std::vector<TxnOp> ops;
  for (const Assignment& a : v.AssignmentsOf(tenant))
    if ((server.empty() || a.server == server) && (gpu < 0 || a.gpu == gpu)) ops.push_back(Delete(keys_.Assign(tenant, a.server, a.uuid)));
  if (ops.empty()) {
    if (server.empty()) return std::pair<int64_t, int>{v.revision, 0};
    return Error(Err::kInvalidValue, "tenant '{}' has no GPU {}on server '{}'", tenant,
                 gpu >= 0 ? fmt::format("{} ", gpu) : std::string(), server);
  }
  int n = static_cast<int>(ops.size());
  ASSIGN_OR_RETURN(TxnResult r, store_.Txn({}, ops, {}));
  return std::pair<int64_t, int>{r.revision, n};
}

Result<std::pair<int64_t, std::vector<Assignment>>> PoolAdmin::Place(const PlacementRequest& request) {
  for (int i = 0; i < kTries; i++) {
    ASSIGN_OR_RETURN(PoolView v, View());
    if (!v.tenants.count(request.tenant)) return NoTenant(request.tenant);
    ASSIGN_OR_RETURN(std::vector<Assignment> chosen, pool::Place(v, request));
    // Nothing under assign/ may have changed since the view: another placement's choice
    // would change what is least loaded.
    std::string all = keys_.prefix() + "assign/";
    std::vector<Compare> guard = {Exists(keys_.Tenant(request.tenant)),
                                  Compare{Compare::Target::kMod, Compare::Op::kLess, all, PrefixEnd(all), v.revision + 1, ""}};
    std::vector<TxnOp> puts;
    for (const Assignment& a : chosen) {
      guard.push_back(Exists(keys_.Server(a.server)));
      puts.push_back(Put(keys_.Assign(a.tenant, a.server, a.uuid), EncodeAssignment(a)));
    }
    ASSIGN_OR_RETURN(TxnResult r, store_.Txn(guard, puts, {}));
    if (r.succeeded) return std::pair<int64_t, std::vector<Assignment>>{r.revision, std::move(chosen)};
  }
  return Error(Err::kNotReady, "the pool kept changing while placing tenant '{}''s GPUs: try again", request.tenant);
}

Status PoolAdmin::WaitApplied(int64_t revision, const std::vector<std::string>& servers, int timeout_ms) {
  uint64_t deadline = MonotonicNanos() + uint64_t(timeout_ms) * 1'000'000;
  for (;;) {
    ASSIGN_OR_RETURN(PoolView v, View());
    std::vector<std::string> behind;
    for (const auto& [name, s] : v.servers) {
      if (!servers.empty() && std::find(servers.begin(), servers.end(), name) == servers.end()) continue;
      auto a = v.applied.find(name);
      if (a == v.applied.end() || a->second < revision) behind.push_back(name);
    }
    if (behind.empty()) return Status::Ok();
    if (MonotonicNanos() > deadline)
      return Error(Err::kTimeout, "server(s) {} have not applied the change within {} ms (it takes effect there once "
                   "they reach the pool's store)", fmt::join(behind, ", "), timeout_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace remora::pool

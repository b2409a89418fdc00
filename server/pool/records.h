// What a pool keeps in its store, where, and in what form (JSON values; docs/ARCHITECTURE.md,
// "A pool of servers"). Under the pool's prefix P (default "/remora/"):
//
//   P servers/<server>                  ServerRecord, under the server's lease
//   P tenants/<tenant>                  PoolTenant (the token's verifier, never the token)
//   P assign/<tenant>/<server>/<uuid>   Assignment: that GPU of that server is the tenant's
//   P shares/<tenant>/<server>          decimal bytes of the tenant's pool limit the server
//                                       holds, under the server's lease
//   P applied/<server>                  decimal revision up to which the server applied the
//                                       pool's tenants and assignments, under its lease
//
// PoolView is all of it parsed, as one server's mirror holds it. Pure code: no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pool/kv_store.h"
#include "supervisor/state_store.h"

namespace remora::pool {

using PoolTenant = server::TenantRecord;  // gpu_uuids unused: assignments are keys of their own

struct PoolGpu {
  int index = 0;              // the server's GPU index
  std::string uuid;
  std::string name;
  uint64_t total_memory = 0;
  uint64_t used = 0;          // charged to tenants (the server's ledger)
};

struct ServerRecord {
  std::string name;
  std::vector<std::string> urls;  // where clients reach it (its tcp:// listeners)
  std::vector<PoolGpu> gpus;
  std::string backend;            // "cuda" or "host-emulated"
  bool emulated = false;
  std::string version;
  std::string health = "ok";      // "ok", "draining" (shutting down)
  int64_t started_at = 0;         // unix seconds
  int64_t updated_at = 0;         // unix seconds of this record
  uint32_t sessions = 0;
  struct TenantHere {
    uint64_t used = 0;        // bytes charged on this server
    uint32_t sessions = 0;
  };
  std::map<std::string, TenantHere> tenants;  // tenants with sessions or memory here
};

struct Assignment {
  std::string tenant;
  std::string server;
  std::string uuid;
  int gpu = 0;            // the server's index of it
  int64_t revision = 0;   // when it was made (the store's revision; orders a tenant's GPUs)
};

struct PoolView {
  int64_t revision = 0;
  std::map<std::string, ServerRecord> servers;  // registered, i.e. alive (their lease holds)
  std::map<std::string, PoolTenant> tenants;
  std::vector<Assignment> assignments;          // by tenant, then revision
  std::map<std::string, std::map<std::string, uint64_t>> shares;  // tenant -> server -> bytes
  std::map<std::string, int64_t> applied;       // server -> revision applied

  // The tenant's GPUs in the order its clients number them (assignment order).
  std::vector<Assignment> AssignmentsOf(const std::string& tenant) const;
  uint64_t SharesOf(const std::string& tenant) const;
};

class PoolKeys {
 public:
  explicit PoolKeys(std::string prefix) : p_(std::move(prefix)) {}
  const std::string& prefix() const { return p_; }
  std::string Server(const std::string& s) const { return p_ + "servers/" + s; }
  std::string Tenant(const std::string& t) const { return p_ + "tenants/" + t; }
  std::string TenantAssignments(const std::string& t) const { return p_ + "assign/" + t + "/"; }
  std::string Assign(const std::string& t, const std::string& s, const std::string& uuid) const {
    return p_ + "assign/" + t + "/" + s + "/" + uuid;
  }
  std::string TenantShares(const std::string& t) const { return p_ + "shares/" + t + "/"; }
  std::string Share(const std::string& t, const std::string& s) const { return p_ + "shares/" + t + "/" + s; }
  std::string Applied(const std::string& s) const { return p_ + "applied/" + s; }

 private:
  std::string p_;
};

// Server names: 1 to 63 of [A-Za-z0-9._-], not starting with '.' or '-'.
Status ValidateServerName(std::string_view name);

std::string EncodeServer(const ServerRecord& r);
Result<ServerRecord> DecodeServer(std::string_view json);
std::string EncodeTenant(const PoolTenant& t);
Result<PoolTenant> DecodeTenant(std::string_view json);
std::string EncodeAssignment(const Assignment& a);

// The view of the raw keys under `keys.prefix()`. Keys or values that do not parse are left
// out and counted in *skipped (with the first one's reason in *why) - a newer server's
// records, say - rather than failing the whole view.
PoolView BuildView(const PoolKeys& keys, const std::map<std::string, KeyValue>& kvs, int64_t revision,
                   size_t* skipped = nullptr, std::string* why = nullptr);

}  // namespace remora::pool

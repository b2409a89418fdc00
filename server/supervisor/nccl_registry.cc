// NcclRegistry (nccl_registry.h).
#include "supervisor/nccl_registry.h"

#include <sodium.h>

#include <cstring>

#include "remora/base/log.h"

namespace remora::server {
namespace {

constexpr char kMagic[8] = {'R', 'M', 'N', 'C', 'C', 'L', '1', '\0'};
constexpr size_t kMaxPerTenant = 4096;
constexpr size_t kMaxCliques = 65536;
constexpr size_t kAddressAt = 40;  // magic, server, number, nonce; then the address, NUL-ended

}  // namespace

NcclRegistry::NcclRegistry(uint64_t server_id, std::string advertise)
    : server_id_(server_id), advertise_(std::move(advertise)) {
  if (advertise_.size() >= kNcclIdBytes - kAddressAt) advertise_.clear();  // (checked by the options)
}

Result<NcclIdBytes> NcclRegistry::Register(const NcclMember& creator, const std::string& tenant, const NcclIdBytes& real,
                                           NcclClique* clique) {
  if (cliques_.size() >= kMaxCliques || per_tenant_[tenant] >= kMaxPerTenant)
    return Error(Err::kMemoryAllocation, "tenant '{}' holds {} NCCL unique ids, the most it may", tenant, per_tenant_[tenant]);
  uint64_t number = next_++;
  Clique c;
  randombytes_buf(c.nonce.data(), c.nonce.size());
  c.tenant = tenant;
  c.real = real;
  c.members.insert(creator);
  NcclIdBytes cap{};
  std::memcpy(cap.data(), kMagic, sizeof(kMagic));
  std::memcpy(cap.data() + 8, &server_id_, 8);
  std::memcpy(cap.data() + 16, &number, 8);
  std::memcpy(cap.data() + 24, c.nonce.data(), c.nonce.size());
  std::memcpy(cap.data() + kAddressAt, advertise_.data(), advertise_.size());
  cliques_.emplace(number, std::move(c));
  per_tenant_[tenant]++;
  *clique = NcclClique{server_id_, number};
  return cap;
}

std::optional<NcclCapability> NcclRegistry::Parse(const NcclIdBytes& capability) {
  if (std::memcmp(capability.data(), kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  NcclCapability c;
  std::memcpy(&c.server, capability.data() + 8, 8);
  std::memcpy(&c.number, capability.data() + 16, 8);
  std::memcpy(c.nonce.data(), capability.data() + 24, c.nonce.size());
  const char* a = reinterpret_cast<const char*>(capability.data() + kAddressAt);
  size_t n = ::strnlen(a, kNcclIdBytes - kAddressAt);
  if (n == kNcclIdBytes - kAddressAt) return std::nullopt;  // not NUL-ended
  c.address.assign(a, n);
  return c;
}

std::optional<NcclIdBytes> NcclRegistry::Resolve(const NcclCapability& cap, const std::string& tenant,
                                                 const NcclMember& member, std::string* why) {
  if (cap.server != server_id_) {
    *why = "it names another server (or this server before a restart)";
    return std::nullopt;
  }
  auto it = cliques_.find(cap.number);
  if (it == cliques_.end()) {
    *why = "no such unique id (its session ended)";
    return std::nullopt;
  }
  Clique& c = it->second;
  if (sodium_memcmp(c.nonce.data(), cap.nonce.data(), c.nonce.size()) != 0) {
    *why = "a forged capability (its nonce does not match)";
    return std::nullopt;
  }
  if (c.tenant != tenant) {
    *why = "it belongs to another tenant";
    return std::nullopt;
  }
  if (c.dead) {
    *why = "a member of its communicator is gone";
    return std::nullopt;
  }
  c.members.insert(member);
  return c.real;
}

std::vector<NcclNotice> NcclRegistry::Lost(uint64_t number, Clique& c, const NcclMember& gone, const std::string& reason) {
  std::vector<NcclNotice> out;
  if (c.dead) return out;
  c.dead = true;
  LOG_INFO("NCCL clique {} of tenant '{}' lost a member (session {} of server {:x}): {}; telling {} other member(s)",
           number, c.tenant, gone.session, gone.server, reason, c.members.size());
  for (const NcclMember& m : c.members) out.push_back(NcclNotice{m, NcclClique{server_id_, number}, reason});
  return out;
}

std::vector<NcclNotice> NcclRegistry::MemberEnded(const NcclMember& member, const NcclClique* only, bool left,
                                                  const std::string& reason) {
  std::vector<NcclNotice> out;
  for (auto it = cliques_.begin(); it != cliques_.end();) {
    Clique& c = it->second;
    bool mine = only == nullptr || (only->server == server_id_ && only->id == it->first);
    if (!mine || c.members.erase(member) == 0) {
      ++it;
      continue;
    }
    if (!left) {
      auto n = Lost(it->first, c, member, reason);
      out.insert(out.end(), n.begin(), n.end());
    }
    if (c.members.empty()) {
      if (--per_tenant_[c.tenant] == 0) per_tenant_.erase(c.tenant);
      it = cliques_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void NcclRegistry::JoinedRemote(uint64_t link, const NcclClique& clique, pid_t pid, uint64_t session) {
  remote_[{link, clique}].insert({pid, session});
}

std::vector<std::pair<uint64_t, NcclClique>> NcclRegistry::LocalEndedRemote(pid_t pid, const NcclClique* only) {
  std::vector<std::pair<uint64_t, NcclClique>> out;
  for (auto it = remote_.begin(); it != remote_.end();) {
    bool match = only == nullptr || it->first.second == *only;
    size_t before = it->second.size();
    if (match) std::erase_if(it->second, [pid](const std::pair<pid_t, uint64_t>& m) { return m.first == pid; });
    if (it->second.size() != before) out.push_back(it->first);
    it = it->second.empty() ? remote_.erase(it) : std::next(it);
  }
  return out;
}

std::vector<pid_t> NcclRegistry::RemoteLost(const NcclClique& clique) {
  std::vector<pid_t> out;
  for (auto it = remote_.begin(); it != remote_.end();) {
    if (!(it->first.second == clique)) {
      ++it;
      continue;
    }
    for (const auto& [pid, session] : it->second) out.push_back(pid);
    it = remote_.erase(it);
  }
  return out;
}

std::vector<NcclNotice> NcclRegistry::LinkLost(uint64_t link, const std::string& reason) {
  std::vector<NcclNotice> out;
  // Origin side: the link's members of this server's cliques are gone.
  std::set<NcclMember> gone;
  for (const auto& [number, c] : cliques_)
    for (const NcclMember& m : c.members)
      if (m.link == link) gone.insert(m);
  for (const NcclMember& m : gone) {
    auto n = MemberEnded(m, nullptr, false, reason);
    out.insert(out.end(), n.begin(), n.end());
  }
  // Member side: the cliques resolved through it are lost to their local members.
  for (auto it = remote_.begin(); it != remote_.end();) {
    if (it->first.first != link) {
      ++it;
      continue;
    }
    for (const auto& [pid, session] : it->second)
      out.push_back(NcclNotice{NcclMember{server_id_, session, pid, 0}, it->first.second, reason});
    it = remote_.erase(it);
  }
  return out;
}

}  // namespace remora::server

#include "supervisor/ipc_registry.h"

#include <sys/random.h>

#include <algorithm>
#include <cstring>

#include "remora/base/log.h"

namespace remora::server {
namespace {

// The handle's layout: magic, server id, export id (little-endian), nonce, kind; zeros after.
constexpr char kMagic[8] = {'R', 'E', 'M', 'O', 'R', 'A', 'I', 'P'};
constexpr size_t kServerAt = 8, kIdAt = 24, kNonceAt = 32, kKindAt = 48;

void Random(uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t got = ::getrandom(p, n, 0);
    if (got <= 0) continue;  // EINTR; getrandom(2) never fails otherwise once the pool is ready
    p += got;
    n -= static_cast<size_t>(got);
  }
}

// Compares without an early exit, so the time taken says nothing about how much matched.
bool SameBytes(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; i++) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

Status Refused() { return Status(Domain::kCuda, kCuInvalidHandle, "not an IPC handle this session may open"); }

}  // namespace

IpcRegistry::IpcRegistry() { Random(server_id_.data(), server_id_.size()); }

Result<IpcHandle> IpcRegistry::Export(const IpcParty& exporter, IpcExportRequest req, uint64_t* export_id,
                                      std::string* why) {
  const bool fd = static_cast<bool>(req.fd);
  uint64_t& session = per_session_[exporter.pid];
  uint64_t& tenant = per_tenant_[exporter.tenant];
  uint64_t& tenant_fds = tenant_descriptors_[exporter.tenant];
  const uint64_t tenant_fd_share = std::max<uint64_t>(limits_.descriptors / 2, 1);
  std::string refusal;
  if (session >= limits_.per_session)
    refusal = fmt::format("the session holds {} IPC exports, its limit (remora-server --session-limit ipc-exports=N)",
                          session);
  else if (tenant >= limits_.per_tenant)
    refusal = fmt::format("tenant '{}' holds {} IPC exports, its limit (remora-server --ipc-exports-per-tenant)",
                          exporter.tenant, tenant);
  else if (fd && tenant_fds >= tenant_fd_share)
    refusal = fmt::format("tenant '{}' holds {} IPC exports that keep a descriptor open in the server, its share of "
                          "the server's descriptor limit", exporter.tenant, tenant_fds);
  else if (fd && descriptors_ >= limits_.descriptors)
    refusal = fmt::format("the server holds {} IPC exports that keep a descriptor open, its share of the descriptor "
                          "limit", descriptors_);
  if (!refusal.empty()) {
    *why = refusal;
    return Status(Domain::kCuda, kCuOutOfMemory, "too many IPC exports: " + refusal);
  }
  session++;
  tenant++;
  if (fd) {
    tenant_fds++;
    descriptors_++;
  }
  uint64_t id = next_id_++;
  Entry e;
  e.kind = req.kind;
  e.exporter = exporter;
  Random(e.nonce.data(), e.nonce.size());
  e.gpu = req.gpu;
  e.size = req.size;
  e.real = std::move(req.real);
  e.fd = std::move(req.fd);
  e.local_id = req.local_id;
  IpcHandle h{};
  std::memcpy(h.data(), kMagic, sizeof(kMagic));
  std::memcpy(h.data() + kServerAt, server_id_.data(), server_id_.size());
  for (int i = 0; i < 8; i++) h[kIdAt + static_cast<size_t>(i)] = static_cast<uint8_t>(id >> (8 * i));
  std::memcpy(h.data() + kNonceAt, e.nonce.data(), e.nonce.size());
  h[kKindAt] = static_cast<uint8_t>(req.kind);
  exports_.emplace(id, std::move(e));
  *export_id = id;
  return h;
}

void IpcRegistry::Erase(std::map<uint64_t, Entry>::iterator it) {
  const Entry& e = it->second;
  auto down = [](auto& map, const auto& key) {
    auto c = map.find(key);
    if (c == map.end()) return;
    if (--c->second == 0) map.erase(c);
  };
  if (!e.exporter_gone) down(per_session_, e.exporter.pid);
  down(per_tenant_, e.exporter.tenant);
  if (e.fd) {
    down(tenant_descriptors_, e.exporter.tenant);
    descriptors_--;
  }
  exports_.erase(it);
}

uint64_t IpcRegistry::TenantExports(const std::string& tenant) const {
  auto it = per_tenant_.find(tenant);
  return it == per_tenant_.end() ? 0 : it->second;
}

std::optional<IpcKind> IpcKindOf(uint32_t wire) {
  switch (wire) {
    case 0: return IpcKind::kMemory;
    case 1: return IpcKind::kEvent;
    case 2: return IpcKind::kPhysical;
    case 3: return IpcKind::kPool;
    case 4: return IpcKind::kPoolPointer;
    default: return std::nullopt;
  }
}

Result<IpcOpened> IpcRegistry::Open(const IpcParty& importer, IpcKind kind, std::span<const uint8_t> handle,
                                    std::string* why) {
  if (handle.size() != kIpcHandleBytes || std::memcmp(handle.data(), kMagic, sizeof(kMagic)) != 0) {
    *why = "not a Remora IPC handle";
    return Refused();
  }
  if (!SameBytes(handle.data() + kServerAt, server_id_.data(), server_id_.size())) {
    *why = "a handle of another Remora server (or of an earlier run of this one)";
    return Refused();
  }
  uint64_t id = 0;
  for (int i = 0; i < 8; i++) id |= uint64_t{handle[kIdAt + static_cast<size_t>(i)]} << (8 * i);
  auto it = exports_.find(id);
  if (it == exports_.end()) {
    *why = fmt::format("export {} does not exist (never made, or freed and closed)", id);
    return Refused();
  }
  Entry& e = it->second;
  if (!SameBytes(handle.data() + kNonceAt, e.nonce.data(), e.nonce.size())) {
    *why = fmt::format("export {}: the nonce does not match (a forged or guessed handle)", id);
    return Refused();
  }
  if (handle[kKindAt] != static_cast<uint8_t>(kind) || e.kind != kind) {
    *why = fmt::format("export {} is not of the kind asked for", id);
    return Refused();
  }
  if (e.exporter.tenant != importer.tenant) {
    *why = fmt::format("export {} belongs to tenant '{}' (session {}), not to tenant '{}'", id, e.exporter.tenant,
                       e.exporter.session, importer.tenant);
    return Refused();
  }
  if (e.revoked || e.exporter_gone) {
    *why = fmt::format("export {} was freed by its exporter (session {})", id, e.exporter.session);
    return Refused();
  }
  // (A process may import its own shareable handle, as the driver allows.)
  if (e.exporter.pid == importer.pid && kind != IpcKind::kPhysical) {
    *why = fmt::format("export {} is the session's own (CUDA lets no process open its own handles)", id);
    return Status(Domain::kCuda, kCuInvalidContext, "a process cannot open its own IPC handle");
  }
  e.importers[importer.pid]++;
  IpcOpened o;
  o.export_id = id;
  o.real = &e.real;
  o.fd = e.fd.get();
  o.size = e.size;
  o.gpu = e.gpu;
  return o;
}

void IpcRegistry::Settle(std::map<uint64_t, Entry>::iterator it, std::vector<IpcAction>* out) {
  Entry& e = it->second;
  if (!e.importers.empty() || (!e.revoked && !e.exporter_gone)) return;
  if (e.exporter_gone) {
    if (e.kept_charged) {
      IpcAction a;
      a.kind = IpcAction::Kind::kUncharge;
      a.export_id = it->first;
      a.ledger_slot = e.exporter.ledger_slot;
      a.gpu = e.gpu;
      a.bytes = e.size;
      a.slot_empty = true;
      for (auto& [id, other] : exports_)
        if (id != it->first && other.exporter.pid == e.exporter.pid && other.kept_charged)
          a.slot_empty = false;
      out->push_back(a);
    }
  } else {
    IpcAction a;
    a.kind = IpcAction::Kind::kRelease;
    a.pid = e.exporter.pid;
    a.export_id = it->first;
    out->push_back(a);
  }
  Erase(it);
}

std::vector<IpcAction> IpcRegistry::Close(pid_t importer, uint64_t export_id) {
  std::vector<IpcAction> out;
  auto it = exports_.find(export_id);
  if (it == exports_.end()) return out;
  auto imp = it->second.importers.find(importer);
  if (imp == it->second.importers.end()) return out;
  if (--imp->second == 0) it->second.importers.erase(imp);
  Settle(it, &out);
  return out;
}

int IpcRegistry::Unexport(pid_t exporter, uint64_t export_id) {
  auto it = exports_.find(export_id);
  if (it == exports_.end() || it->second.exporter.pid != exporter) return -1;
  it->second.revoked = true;
  uint32_t opens = 0;
  for (auto& [pid, n] : it->second.importers) opens += n;
  if (opens == 0) Erase(it);
  return static_cast<int>(opens);
}

std::vector<IpcAction> IpcRegistry::SessionEnded(pid_t pid) {
  std::vector<IpcAction> out;
  std::vector<uint64_t> ids;
  for (auto& [id, e] : exports_) {
    e.importers.erase(pid);
    if (e.exporter.pid == pid) {
      e.exporter_gone = true;  // (no longer counted for the session: its pid may be reused)
      e.kept_charged = HoldsMemory(e.kind) && e.size > 0 && !e.importers.empty();
    }
    ids.push_back(id);
  }
  per_session_.erase(pid);
  for (uint64_t id : ids) {
    auto it = exports_.find(id);
    if (it != exports_.end()) Settle(it, &out);
  }
  return out;
}

std::map<int, uint64_t> IpcRegistry::OpenBytesOf(pid_t pid) const {
  std::map<int, uint64_t> bytes;
  for (const auto& [id, e] : exports_)
    if (e.exporter.pid == pid && HoldsMemory(e.kind) && !e.importers.empty()) bytes[e.gpu] += e.size;
  return bytes;
}

}  // namespace remora::server

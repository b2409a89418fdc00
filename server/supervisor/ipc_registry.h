// IpcRegistry: the server's record of CUDA IPC exports between its sessions (cudaIpc*,
// cuIpc*). Workers are separate processes, so an export is registered here by the exporter's
// worker and every open is checked here before the importer's worker touches the driver.
//
// A client sees only a Remora handle, 64 opaque bytes {magic, server id, export id, 128-bit
// random nonce, kind}: an unforgeable capability. Opening one needs this server, a live
// export, the nonce, the exporter's tenant, and another session (CUDA lets no process open
// its own handles). Anything else gets the same answer (CUDA_ERROR_INVALID_HANDLE), so a
// refusal says nothing about other tenants' exports; the reason is logged on the server.
//
// Lifetime (docs/ARCHITECTURE.md, "IPC between processes"): memory freed by its exporter
// while open elsewhere is revoked (no new opens) but kept, and charged to the exporter, until
// the last importer closes it; then the exporter's worker is told to free it (Action
// release_to). An importer that ends, however it ends, closes its opens. An exporter that
// ends while some of its memory is open leaves those bytes charged in its ledger slot (the
// supervisor keeps the slot open) until the importers close them (Action uncharge).
//
// Bounds (docs/SECURITY.md, N1): every export holds something of the supervisor's (a
// descriptor on the host backend and for pools and physical memory, heap for the others), so
// a session may hold at most `per_session` live exports, a tenant `per_tenant` (all its
// sessions, ended exporters' kept exports included), and exports holding a descriptor are
// bounded for all tenants together (`descriptors`, a share of the supervisor's descriptor
// limit), a tenant getting at most half of that. Past a bound Export refuses with
// CUDA_ERROR_OUT_OF_MEMORY, as the driver does when it cannot make a handle.
//
// Pure bookkeeping: no sockets, no ledger. The supervisor's loop thread only.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/status.h"

namespace remora::server {

inline constexpr size_t kIpcHandleBytes = 64;
using IpcHandle = std::array<uint8_t, kIpcHandleBytes>;

// CUresult values the registry answers (the supervisor never includes CUDA's headers).
inline constexpr uint32_t kCuSuccess = 0;
inline constexpr uint32_t kCuOutOfMemory = 2;       // CUDA_ERROR_OUT_OF_MEMORY
inline constexpr uint32_t kCuInvalidContext = 201;  // CUDA_ERROR_INVALID_CONTEXT
inline constexpr uint32_t kCuInvalidHandle = 400;   // CUDA_ERROR_INVALID_HANDLE

// What an export shares (the worker's kIpcKind* values, worker/session/ipc_link.h).
enum class IpcKind : uint8_t {
  kMemory = 0,    // cudaMalloc'd memory (cudaIpcGetMemHandle)
  kEvent = 1,     // an interprocess event (cudaIpcGetEventHandle)
  kPhysical = 2,  // physical memory of cuMemCreate (cuMemExportToShareableHandle)
  kPool = 3,      // a memory pool (cudaMemPoolExportToShareableHandle)
  kPoolPointer = 4,  // an allocation of a shared pool (cudaMemPoolExportPointer)
};
// The kind a worker's message names, if it is one.
std::optional<IpcKind> IpcKindOf(uint32_t wire);
// Whether an export of `kind` holds memory charged to its exporter.
inline bool HoldsMemory(IpcKind kind) {
  return kind == IpcKind::kMemory || kind == IpcKind::kPhysical || kind == IpcKind::kPoolPointer;
}

// Who a session is, as the registry needs it.
struct IpcParty {
  pid_t pid = -1;          // its worker
  uint64_t session = 0;
  std::string tenant;
  uint32_t ledger_slot = 0;
};

struct IpcExportRequest {
  IpcKind kind = IpcKind::kMemory;
  int gpu = 0;
  uint64_t size = 0;
  std::vector<uint8_t> real;  // the driver's handle (cuda backend), or empty
  Fd fd;                      // the memory or event state (host-emulated backend), or none
  uint64_t local_id = 0;
};

// What an importer's worker needs to open an export (valid until the next registry call).
struct IpcOpened {
  uint64_t export_id = 0;
  const std::vector<uint8_t>* real = nullptr;
  int fd = -1;
  uint64_t size = 0;
  int gpu = 0;
};

// Something the supervisor must do after a close or a session's end.
struct IpcAction {
  enum class Kind { kRelease, kUncharge } kind = Kind::kRelease;
  pid_t pid = -1;          // kRelease: the exporter's worker, to free export_id now
  uint64_t export_id = 0;
  uint32_t ledger_slot = 0;  // kUncharge: the gone exporter's slot, `bytes` on `gpu`
  int gpu = 0;
  uint64_t bytes = 0;
  bool slot_empty = false;   // kUncharge: nothing of that slot is held any more (close it)
};

struct IpcLimits {
  uint64_t per_session = 4096;  // --session-limit ipc-exports
  uint64_t per_tenant = 16384;  // --ipc-exports-per-tenant
  uint64_t descriptors = 1024;  // exports holding a descriptor, all tenants together
};

class IpcRegistry {
 public:
  IpcRegistry();

  void SetLimits(const IpcLimits& limits) { limits_ = limits; }
  const IpcLimits& limits() const { return limits_; }

  // Registers an export of `exporter`; returns the client's handle. Past a bound (above):
  // CUDA_ERROR_OUT_OF_MEMORY, with the bound named in *why (for the log and the client).
  Result<IpcHandle> Export(const IpcParty& exporter, IpcExportRequest req, uint64_t* export_id, std::string* why);
  // Checks `handle` for `importer` and counts the open. On refusal returns
  // CUDA_ERROR_INVALID_HANDLE and says why in *why (for the log, never for the client).
  Result<IpcOpened> Open(const IpcParty& importer, IpcKind kind, std::span<const uint8_t> handle, std::string* why);
  // The importer's worker closed its open of `export_id`.
  std::vector<IpcAction> Close(pid_t importer, uint64_t export_id);
  // The exporter freed `export_id`: revoked, and erased once no open is left. Returns the
  // opens left (the exporter defers its free until told to release), or -1 if `exporter`
  // has no such export.
  int Unexport(pid_t exporter, uint64_t export_id);
  // The worker `pid` ended: its opens are closed, its exports revoked (those still open are
  // kept, charged to its slot).
  std::vector<IpcAction> SessionEnded(pid_t pid);
  // Bytes of `pid`'s memory exports still open elsewhere, per server GPU.
  std::map<int, uint64_t> OpenBytesOf(pid_t pid) const;

  size_t size() const { return exports_.size(); }
  // Live exports of a tenant (its ended sessions' kept ones included), and exports holding a
  // descriptor, all tenants.
  uint64_t TenantExports(const std::string& tenant) const;
  uint64_t DescriptorExports() const { return descriptors_; }

 private:
  struct Entry {
    IpcKind kind;
    IpcParty exporter;
    bool exporter_gone = false;
    bool revoked = false;
    bool kept_charged = false;  // still open when its exporter ended: its bytes stay in the slot
    std::array<uint8_t, 16> nonce{};
    int gpu = 0;
    uint64_t size = 0;
    std::vector<uint8_t> real;
    Fd fd;
    uint64_t local_id = 0;
    std::map<pid_t, uint32_t> importers;  // worker -> opens
  };
  // Erases `it` if nothing holds it any more, adding the actions that follows.
  void Settle(std::map<uint64_t, Entry>::iterator it, std::vector<IpcAction>* out);
  // Erases `it`, uncounting it.
  void Erase(std::map<uint64_t, Entry>::iterator it);

  std::array<uint8_t, 16> server_id_{};
  uint64_t next_id_ = 1;
  std::map<uint64_t, Entry> exports_;
  IpcLimits limits_;
  std::map<pid_t, uint64_t> per_session_;         // live exporters only
  std::map<std::string, uint64_t> per_tenant_;
  std::map<std::string, uint64_t> tenant_descriptors_;
  uint64_t descriptors_ = 0;
};

}  // namespace remora::server

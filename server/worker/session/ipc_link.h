// What a worker asks the supervisor about CUDA IPC (server/supervisor/ipc_registry.h), over
// its control socket (worker/loop/supervisor_link.h), and the answers. Plain data.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "remora/base/fd.h"

namespace remora::worker {

inline constexpr size_t kIpcHandleBytes = 64;  // CUipcMemHandle, CUipcEventHandle

// What is shared (IpcQuestion::kind; the supervisor's IpcKind has the same values).
inline constexpr uint8_t kIpcKindMemory = 0;    // cudaIpcGetMemHandle
inline constexpr uint8_t kIpcKindEvent = 1;     // cudaIpcGetEventHandle
inline constexpr uint8_t kIpcKindPhysical = 2;  // cuMemExportToShareableHandle
inline constexpr uint8_t kIpcKindPool = 3;      // cudaMemPoolExportToShareableHandle
inline constexpr uint8_t kIpcKindPoolPointer = 4;  // cudaMemPoolExportPointer

struct IpcQuestion {
  // kBorrow is not IPC: more of a pool tenant's memory limit for this server (size bytes).
  enum class Op { kExport, kOpen, kUnexport, kBorrow } op = Op::kExport;
  uint8_t kind = 0;            // kIpcKind*
  int gpu = 0;                 // kExport
  uint64_t size = 0;           // kExport
  std::vector<uint8_t> bytes;  // kExport: the driver's handle; kOpen: the client's handle
  uint64_t id = 0;             // kExport: the exporter's own name; kUnexport: the export id
};

struct IpcAnswer {
  uint32_t status = 0;         // CUresult
  std::array<uint8_t, kIpcHandleBytes> handle{};  // kExport: the client's handle
  uint64_t export_id = 0;
  std::vector<uint8_t> real;   // kOpen: the exporter's driver handle
  Fd fd;                       // kOpen: the exporter's memory or event state, if it has one
  uint64_t size = 0;
  int gpu = 0;
  uint32_t importers = 0;      // kUnexport: opens left elsewhere
};

}  // namespace remora::worker

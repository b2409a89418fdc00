// cuGetExportTable: the lookup of the driver's private tables by id (export_tables.h), the
// log lines of ids nobody serves and of slots the runtime was not seen calling.
#include "driver/export_tables.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "export.h"
#include "process.h"
#include "remora/base/log.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace exports = remora::shim::driver::exports;

namespace {

const exports::Table* const kServed[] = {
    &exports::kIntegrityCheck, &exports::kToolsTls,      &exports::kCallbackHooks,
    &exports::kCudartInterface, &exports::kContextChecks, &exports::kContextLocalStorage,
};

// Ids seen asked for by NVIDIA's libraries (which carry their own static runtime), keyed by
// their first four bytes: research/LIBRARIES.md §2.1 and §5 R3. Remora replaces cuBLAS, cuDNN
// and the other math libraries on the client, so these mean a real one was loaded (by path,
// or without remora-run's preload).
struct Private {
  uint8_t prefix[4];
  const char* who;
  bool math_library;
};
const Private kPrivate[] = {
    // The runtime's first request: a variadic log hook (slot 1) that it stores and calls only
    // when the driver gave one; refused, the runtime goes on without it (observed, 13.0).
    {{0xf8, 0xcf, 0xf9, 0x51}, "the runtime's optional log hook", false},
    {{0x21, 0x31, 0x8c, 0x60}, "cuBLAS/cuDNN's private table", true},
    {{0x6e, 0x16, 0x3f, 0xbe}, "cuBLAS/cuDNN's private module iterator", true},
    {{0x17, 0x34, 0xdc, 0x26}, "cuBLAS(Lt)'s private table", true},
    {{0x69, 0xa2, 0x8e, 0x9f}, "a private table of PyTorch's NVIDIA libraries", true},
    {{0xda, 0x91, 0x51, 0xd3}, "NVRTC's private table", false},
    {{0x0c, 0xa5, 0x0b, 0x8c}, "CTX_CREATE_BYPASS", false},
    {{0x19, 0x5b, 0xcb, 0xf4}, "HEAP_ACCESS", false},
    {{0xb1, 0x05, 0x41, 0xe1}, "DEVICE_EXTENDED_RT", false},
};

const Private* FindPrivate(const CUuuid& id) {
  for (const Private& p : kPrivate)
    if (std::memcmp(p.prefix, id.bytes, sizeof(p.prefix)) == 0) return &p;
  return nullptr;
}

// The shared object the call came from, for the log.
std::string Caller(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) != 0 && info.dli_fname != nullptr && *info.dli_fname) return info.dli_fname;
  return "the program";
}

}  // namespace

namespace remora::shim::driver::exports {

const Table* Find(const CUuuid& id) {
  for (const Table* t : kServed)
    if (std::memcmp(t->id.bytes, id.bytes, sizeof(id.bytes)) == 0) return t;
  return nullptr;
}

const char* KnownUnserved(const CUuuid& id) {
  const Private* p = FindPrivate(id);
  return p != nullptr ? p->who : nullptr;
}

void FormatId(const CUuuid& id, char out[37]) {
  const auto* b = reinterpret_cast<const uint8_t*>(id.bytes);
  std::snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

void LogUnserved(const char* table, int slot, const uint64_t (&a)[6]) {
  std::string what = fmt::format("export table {} slot {}", table, slot);
  if (Process::Get().FirstTime(what))
    LOG_WARN("{} called (args {:#x} {:#x} {:#x} {:#x} {:#x} {:#x}): not served by Remora (CUDA_ERROR_NOT_SUPPORTED)",
             what, a[0], a[1], a[2], a[3], a[4], a[5]);
  else
    LOG_DEBUG("{} called again: CUDA_ERROR_NOT_SUPPORTED", what);
}

void LogDeclined(const char* table, int slot) {
  std::string what = fmt::format("export table {} slot {}", table, slot);
  if (Process::Get().FirstTime(what)) LOG_INFO("{} declined: no profiling tool is attached in a Remora client", what);
}

}  // namespace remora::shim::driver::exports

REMORA_API CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *table = nullptr;
  char hex[37];
  exports::FormatId(*id, hex);
  if (const exports::Table* t = exports::Find(*id)) {
    LOG_DEBUG("cuGetExportTable({}): {}", hex, t->name);
    *table = t->slots;
    return CUDA_SUCCESS;
  }
  std::string who = Caller(__builtin_return_address(0));
  const Private* p = FindPrivate(*id);
  if (p == &kPrivate[0]) {
    LOG_DEBUG("cuGetExportTable({}): {}, not served", hex, p->who);
  } else if (Process::Get().FirstTime(std::string("export table ") + hex)) {
    if (p != nullptr && p->math_library)
      LOG_ERROR("cuGetExportTable({}), {}, asked by {}: a real NVIDIA library is loaded in this client; Remora replaces "
                "the math libraries (run under remora-run, and do not load NVIDIA's cuBLAS/cuDNN by path) and "
                "does not serve their private tables",
                hex, p->who, who);
    else
      LOG_WARN("cuGetExportTable({}){}{}, asked by {}: not a table Remora serves (CUDA_ERROR_NOT_FOUND)", hex,
               p != nullptr ? ", " : "", p != nullptr ? p->who : "", who);
  }
  return CUDA_ERROR_NOT_FOUND;
}

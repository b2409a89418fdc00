// The driver's private function tables (cuGetExportTable), as the CUDA runtime linked
// statically into a program (nvcc's default, CuPy) asks for them before its first call.
//
// A table is an array of slots: most start with their own size in bytes (slot 0), the rest
// are functions whose contracts were learned by observing libcudart_static.a 13.0 calling
// them (each table's file states every slot's contract as observed). Slots the runtime was
// never seen calling are Unserved<>: they log their table, index and arguments and return
// CUDA_ERROR_NOT_SUPPORTED, so a toolkit that starts calling one says so instead of crashing.
// Ids nobody serves get CUDA_ERROR_NOT_FOUND and a log line naming the id and the library that
// asked; the ids NVIDIA's math libraries ask for privately get an error-level line (Remora
// replaces those libraries, so a real one was loaded by path).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace remora::shim::driver {

struct Context;

namespace exports {

struct Table {
  const char* name;
  CUuuid id;
  const void* const* slots;
  size_t count;  // slots, for the tests and the logs
};

// The tables served, in the order the 13.0 runtime asks for them.
extern const Table kIntegrityCheck, kToolsTls, kCallbackHooks, kCudartInterface, kContextChecks,
    kContextLocalStorage;

// The served table with this id, or nullptr.
const Table* Find(const CUuuid& id);
// The name of a table id known but not served (the math libraries' and NVRTC's), or nullptr.
const char* KnownUnserved(const CUuuid& id);
// "6bd5fb6c-5bf4-e74a-8987-d93912fd9df9".
void FormatId(const CUuuid& id, char out[37]);

// Context-local storage ends with its context: the destructors the runtime registered run.
void ContextStorageEnded(Context* c);

// An unserved slot: logs (once at warn, then at debug) and returns CUDA_ERROR_NOT_SUPPORTED.
// Six integer arguments are logged whatever the slot takes (the x86-64 and AArch64 ABIs pass
// them in registers, so reading more than were passed is harmless).
void LogUnserved(const char* table, int slot, const uint64_t (&args)[6]);
template <const Table& T, int Slot>
uint64_t Unserved(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f) {
  LogUnserved(T.name, Slot, {a, b, c, d, e, f});
  return CUDA_ERROR_NOT_SUPPORTED;
}

// A slot seen called whose contract is not known, where the runtime carries on correctly when
// refused (the tools slots its host-function thread calls to tell a profiler; none is
// attached): logs once at info and returns CUDA_ERROR_NOT_SUPPORTED.
void LogDeclined(const char* table, int slot);
template <const Table& T, int Slot>
uint64_t Declined(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t) {
  LogDeclined(T.name, Slot);
  return CUDA_ERROR_NOT_SUPPORTED;
}

// A table id from its 32 hex digits, as the logs print it (without the dashes).
constexpr CUuuid MakeId(const char (&hex)[33]) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  CUuuid id{};
  for (int i = 0; i < 16; i++) id.bytes[i] = static_cast<char>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
  return id;
}

// A table's slot 0: its size in bytes.
inline const void* SizeSlot(size_t slots) { return reinterpret_cast<const void*>(slots * sizeof(void*)); }
template <typename F>
const void* Fn(F* f) {
  return reinterpret_cast<const void*>(f);
}

}  // namespace exports
}  // namespace remora::shim::driver

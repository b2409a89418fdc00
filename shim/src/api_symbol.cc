// __device__ and __constant__ variables: resolved by name in the kernel's module on first
// use, then copied to and from like any device memory.
#include <cuda_runtime_api.h>

#include "export.h"
#include "memops.h"
#include "modules.h"
#include "runtime.h"

namespace remora::shim {
namespace {

// The variable's device address on the current device, checked against [offset, offset+count).
Result<std::pair<char*, uint64_t>> Symbol(const void* symbol, size_t count, size_t offset) {
  VariableRecord* v = Registry::Get().FindVariable(symbol);
  if (v == nullptr) return Error(Err::kInvalidSymbol, "{} is not a registered device variable", symbol);
  ASSIGN_OR_RETURN(int device, Runtime::Get().CurrentDevice());
  ASSIGN_OR_RETURN(auto g, GlobalOn(v, device));
  if (offset > g.second || count > g.second - offset)
    return Error(Err::kInvalidValue, "{} bytes at offset {} do not fit the {}-byte variable {}", count, offset, g.second, v->device_name);
  return std::make_pair(reinterpret_cast<char*>(g.first), g.second);
}

cudaError_t ToSymbol(const void* symbol, const void* src, size_t count, size_t offset, cudaMemcpyKind kind,
                     cudaStream_t stream, bool per_thread, bool async, const char* call) {
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
    return Finish(Error(Err::kInvalidMemcpyDirection, "invalid direction for a copy to a symbol"), call);
  auto s = Symbol(symbol, count, offset);
  if (!s.ok()) return Finish(s.status(), call);
  return Memcpy(s->first + offset, src, count, kind, stream, per_thread, async, call);
}

cudaError_t FromSymbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind kind, cudaStream_t stream,
                       bool per_thread, bool async, const char* call) {
  if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
    return Finish(Error(Err::kInvalidMemcpyDirection, "invalid direction for a copy from a symbol"), call);
  auto s = Symbol(symbol, count, offset);
  if (!s.ok()) return Finish(s.status(), call);
  return Memcpy(dst, s->first + offset, count, kind, stream, per_thread, async, call);
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset, cudaMemcpyKind kind) {
  return ToSymbol(symbol, src, count, offset, kind, nullptr, false, false, "cudaMemcpyToSymbol");
}
REMORA_API cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count, size_t offset,
                                               cudaMemcpyKind kind) {
  return ToSymbol(symbol, src, count, offset, kind, nullptr, true, false, "cudaMemcpyToSymbol");
}
REMORA_API cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                               cudaMemcpyKind kind, cudaStream_t stream) {
  return ToSymbol(symbol, src, count, offset, kind, stream, false, true, "cudaMemcpyToSymbolAsync");
}
REMORA_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count, size_t offset,
                                                    cudaMemcpyKind kind, cudaStream_t stream) {
  return ToSymbol(symbol, src, count, offset, kind, stream, true, true, "cudaMemcpyToSymbolAsync");
}
REMORA_API cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind kind) {
  return FromSymbol(dst, symbol, count, offset, kind, nullptr, false, false, "cudaMemcpyFromSymbol");
}
REMORA_API cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                                 cudaMemcpyKind kind) {
  return FromSymbol(dst, symbol, count, offset, kind, nullptr, true, false, "cudaMemcpyFromSymbol");
}
REMORA_API cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                                 cudaMemcpyKind kind, cudaStream_t stream) {
  return FromSymbol(dst, symbol, count, offset, kind, stream, false, true, "cudaMemcpyFromSymbolAsync");
}
REMORA_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count, size_t offset,
                                                      cudaMemcpyKind kind, cudaStream_t stream) {
  return FromSymbol(dst, symbol, count, offset, kind, stream, true, true, "cudaMemcpyFromSymbolAsync");
}

REMORA_API cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  if (devPtr == nullptr) return Finish(Error(Err::kInvalidValue, "devPtr is NULL"), "cudaGetSymbolAddress");
  auto s = Symbol(symbol, 0, 0);
  if (!s.ok()) return Finish(s.status(), "cudaGetSymbolAddress");
  *devPtr = s->first;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  if (size == nullptr) return Finish(Error(Err::kInvalidValue, "size is NULL"), "cudaGetSymbolSize");
  auto s = Symbol(symbol, 0, 0);
  if (!s.ok()) return Finish(s.status(), "cudaGetSymbolSize");
  *size = s->second;
  return cudaSuccess;
}

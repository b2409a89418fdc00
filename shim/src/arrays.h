// The client's view of the CUDA arrays, mipmapped arrays, texture and surface objects this
// process created (issue 14): descriptors kept so copies are bounds-checked before anything
// travels and the descriptor queries (cudaArrayGetInfo, cudaGetTextureObjectTextureDesc,
// cuArray3DGetDescriptor...) are answered without a round trip. Arrays are the worker's
// session handles; texture and surface objects are the driver's real values (kernels use
// them). The worker checks every handle again. Thread-safe.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "remora/base/status.h"

namespace remora::shim {

struct ArrayEntry {
  CUDA_ARRAY3D_DESCRIPTOR desc = {};
  uint32_t elem = 0;      // bytes per element
  int device = 0;
  uint64_t mipmap = 0;    // the mipmapped array it is a level of, or 0

  uint64_t row_bytes() const { return desc.Width * elem; }
  uint64_t rows() const { return desc.Height == 0 ? 1 : desc.Height; }
  uint64_t slices() const { return desc.Depth == 0 ? 1 : desc.Depth; }
};

struct MipmapEntry {
  CUDA_ARRAY3D_DESCRIPTOR desc = {};
  unsigned levels = 0;
  int device = 0;
};

// A texture or surface object's descriptors, in the driver's form (the runtime's are
// converted back when asked).
struct ObjectEntry {
  bool surface = false;
  CUDA_RESOURCE_DESC res = {};
  CUDA_TEXTURE_DESC tex = {};
  bool has_view = false;
  CUDA_RESOURCE_VIEW_DESC view = {};
};

class ClientArrays {
 public:
  static ClientArrays& Get();

  void AddArray(uint64_t handle, const ArrayEntry& a);
  void RemoveArray(uint64_t handle);
  std::optional<ArrayEntry> FindArray(uint64_t handle) const;
  void AddMipmap(uint64_t handle, const MipmapEntry& m);
  void RemoveMipmap(uint64_t handle);  // and its levels
  std::optional<MipmapEntry> FindMipmap(uint64_t handle) const;
  // Texture and surface objects are keyed by kind too: the driver numbers each kind apart.
  void AddObject(uint64_t value, const ObjectEntry& o);
  void RemoveObject(bool surface, uint64_t value);
  std::optional<ObjectEntry> FindObject(bool surface, uint64_t value) const;

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, ArrayEntry> arrays_;
  std::map<uint64_t, MipmapEntry> mipmaps_;
  std::map<std::pair<bool, uint64_t>, ObjectEntry> objects_;
};

// Bytes per element of an array format (0: not one Remora handles).
uint32_t ArrayFormatBytes(CUarray_format format);
// The level `level` of a mipmapped array of `desc`.
CUDA_ARRAY3D_DESCRIPTOR LevelDesc(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned level);

// ---- runtime <-> driver descriptors --------------------------------------------------------
// A channel descriptor as an array format and channel count (kInvalidChannelDescriptor-like
// kInvalidValue for what no CUDA array can hold).
Status ChannelToFormat(const cudaChannelFormatDesc& d, CUarray_format* format, unsigned* channels);
cudaChannelFormatDesc FormatToChannel(CUarray_format format, unsigned channels);
Status ToDriver(const cudaResourceDesc& in, CUDA_RESOURCE_DESC* out);
cudaResourceDesc ToRuntime(const CUDA_RESOURCE_DESC& in);
CUDA_TEXTURE_DESC ToDriver(const cudaTextureDesc& in);
cudaTextureDesc ToRuntime(const CUDA_TEXTURE_DESC& in);
CUDA_RESOURCE_VIEW_DESC ToDriver(const cudaResourceViewDesc& in);
cudaResourceViewDesc ToRuntime(const CUDA_RESOURCE_VIEW_DESC& in);

// One side of an array copy as the application names it.
struct ArraySide {
  enum Kind { kHost, kDevice, kArray } kind = kHost;
  char* ptr = nullptr;    // host or device memory: the copy's first byte
  uint64_t pitch = 0;     // bytes between rows
  uint64_t rows = 0;      // rows per slice
  uint64_t array = 0;     // kArray: the session handle
  uint64_t x = 0, y = 0, z = 0;  // kArray: the origin, x in bytes
};
// A copy of `depth` slices of `height` rows of `width` bytes where at least one side is an
// array: checked against the arrays' extents and the client's allocations, then one Copy3D
// request (host bytes travel packed). `kind` is the application's cudaMemcpyKind: it decides
// whether a pointer side is host or device memory.
cudaError_t ArrayCopy(ArraySide dst, ArraySide src, uint64_t width, uint64_t height, uint64_t depth,
                      cudaMemcpyKind kind, cudaStream_t stream, bool per_thread, bool async, const char* call);
// Operations shared by the runtime's and the driver facade's entry points (api_array.cc):
// each travels as its generated driver call and keeps ClientArrays in step.
Status CreateArray(const CUDA_ARRAY3D_DESCRIPTOR& d, CUarray* out, const char* call);
Status DestroyArray(CUarray a, const char* call);
Status CreateMipmap(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels, CUmipmappedArray* out, const char* call);
Status DestroyMipmap(CUmipmappedArray m, const char* call);
Status MipmapLevel(CUmipmappedArray m, unsigned level, CUarray* out, const char* call);
// A texture (tex non-NULL) or surface object on `res`.
Status CreateObject(bool surface, const CUDA_RESOURCE_DESC& res, const CUDA_TEXTURE_DESC* tex,
                    const CUDA_RESOURCE_VIEW_DESC* view, uint64_t* out, const char* call);
Status DestroyObject(bool surface, uint64_t value, const char* call);
Result<ObjectEntry> FindObjectOf(bool surface, uint64_t value);

// cudaMemcpy3D[Async] with srcArray or dstArray set.
cudaError_t ArrayCopy3DParms(const cudaMemcpy3DParms* p, cudaStream_t stream, bool per_thread, bool async,
                             const char* call);

}  // namespace remora::shim

#include "worker/array_state.h"

#include <algorithm>

#include "cuda_api.h"
#include "cuda_hooks.h"

namespace remora::worker {

uint32_t FormatBytes(CUarray_format format) { return api::cuda::ArrayFormatBytes(format); }

Status CheckArrayDesc(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels, uint32_t* elem, uint64_t* bytes) {
  constexpr uint64_t kMaxDim = 1 << 17;
  constexpr unsigned kKnownFlags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
                                   CUDA_ARRAY3D_TEXTURE_GATHER;
  uint32_t f = FormatBytes(d.Format);
  if (f == 0) return Error(Err::kNotSupported, "array format {} is not supported by Remora", static_cast<int>(d.Format));
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4)
    return Error(Err::kInvalidValue, "an array has 1, 2 or 4 channels, not {}", d.NumChannels);
  if ((d.Flags & ~kKnownFlags) != 0)
    return Error(Err::kNotSupported, "array flags 0x{:x} are not supported by Remora", d.Flags & ~kKnownFlags);
  if (d.Width == 0 || d.Width > kMaxDim || d.Height > kMaxDim || d.Depth > kMaxDim)
    return Error(Err::kInvalidValue, "array extent {}x{}x{} is out of range", d.Width, d.Height, d.Depth);
  bool layered = (d.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  if (d.Height == 0 && d.Depth != 0 && !layered)
    return Error(Err::kInvalidValue, "a 3D array needs a height (extent {}x0x{})", d.Width, d.Depth);
  if ((d.Flags & CUDA_ARRAY3D_CUBEMAP) != 0 && (d.Width != d.Height || (layered ? d.Depth % 6 != 0 : d.Depth != 6)))
    return Error(Err::kInvalidValue, "a cubemap array is square with 6 faces (per layer)");
  uint64_t max_dim = std::max<uint64_t>({d.Width, d.Height, layered ? 0 : d.Depth});
  unsigned max_levels = 1;
  while ((max_dim >> max_levels) != 0) max_levels++;
  if (levels == 0 || levels > max_levels)
    return Error(Err::kInvalidValue, "{} mipmap levels for an extent of {} (at most {})", levels, max_dim, max_levels);
  *elem = f * d.NumChannels;
  uint64_t total = 0;
  for (unsigned l = 0; l < levels; l++) {
    uint64_t w = std::max<uint64_t>(d.Width >> l, 1);
    uint64_t h = d.Height == 0 ? 1 : std::max<uint64_t>(d.Height >> l, 1);
    uint64_t z = d.Depth == 0 ? 1 : (layered ? d.Depth : std::max<uint64_t>(d.Depth >> l, 1));
    total += w * h * z * *elem;
  }
  if (total > (1ull << 40)) return Error(Err::kMemoryAllocation, "an array of {} bytes is too large", total);
  *bytes = total;
  return Status::Ok();
}

Result<ArrayInfo*> ArrayTables::CheckCopy(uint64_t handle, uint64_t x, uint64_t y, uint64_t z, uint64_t width,
                                          uint64_t height, uint64_t depth) {
  ArrayInfo* a = arrays_.Find(handle);
  if (a == nullptr) return Error(Err::kInvalidResourceHandle, "0x{:x} is not an array of this session", handle);
  if (width % a->elem != 0 || x % a->elem != 0)
    return Error(Err::kInvalidValue, "a copy of {} bytes at byte {} is not made of whole {}-byte elements", width, x,
                 a->elem);
  if (x > a->row_bytes() || width > a->row_bytes() - x || y > a->rows() || height > a->rows() - y ||
      z > a->slices() || depth > a->slices() - z)
    return Error(Err::kInvalidValue,
                 "a copy of {}x{}x{} at ({}, {}, {}) runs past the array's {} bytes x {} rows x {} slices", width, height,
                 depth, x, y, z, a->row_bytes(), a->rows(), a->slices());
  return a;
}

void ArrayTables::ReleaseAll(gen::cuda::Api& api, const std::function<bool(int)>& set_device,
                             const std::function<void(int, uint64_t)>& release_charge) {
  for (auto& [key, o] : objects_) {
    if (!set_device(o.gpu)) continue;
    if (key.first) (void)api.cuSurfObjectDestroy(key.second);
    else (void)api.cuTexObjectDestroy(key.second);
  }
  objects_.clear();
  arrays_.ForEach([&](uint64_t, ArrayInfo& a) {
    if (a.mipmap == 0 && set_device(a.gpu)) (void)api.cuArrayDestroy(static_cast<CUarray>(a.array));
    release_charge(a.gpu, a.charged);
  });
  arrays_.Clear();
  mipmaps_.ForEach([&](uint64_t, MipmapInfo& m) {
    if (set_device(m.gpu)) (void)api.cuMipmappedArrayDestroy(static_cast<CUmipmappedArray>(m.mipmap));
    release_charge(m.gpu, m.charged);
  });
  mipmaps_.Clear();
}

}  // namespace remora::worker

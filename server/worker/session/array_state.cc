#include "worker/session/array_state.h"

#include <algorithm>

#include "cuda_api.h"
#include "cuda_hooks.h"

namespace remora::worker {

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

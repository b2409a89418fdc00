// CUDA arrays, mipmapped arrays, texture and surface objects a session created (issue 14).
// Arrays are session handles (a forged one is refused, never handed to the driver); texture
// and surface objects are the driver's own 64-bit values (kernels receive them), registered
// here so only the session's own are destroyed or named. Owned by SessionState; used by the
// executor's single thread.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "remora/base/status.h"
#include "remora/memmgr/handle_table.h"
#include "worker/backend/array_desc.h"

namespace remora::worker {

namespace gen::cuda {
class Api;
}

struct ArrayInfo {
  void* array = nullptr;  // the driver's CUarray
  int gpu = 0;
  CUDA_ARRAY3D_DESCRIPTOR desc = {};
  uint32_t elem = 0;      // bytes per element: the format's size times the channels
  uint64_t charged = 0;   // bytes charged to the tenant for it (0 for a mipmap level)
  uint64_t mipmap = 0;    // the mipmapped array it is a level of (ends with it), or 0

  uint64_t row_bytes() const { return desc.Width * elem; }
  uint64_t rows() const { return desc.Height == 0 ? 1 : desc.Height; }
  uint64_t slices() const { return desc.Depth == 0 ? 1 : desc.Depth; }
};

struct MipmapInfo {
  void* mipmap = nullptr;  // the driver's CUmipmappedArray
  int gpu = 0;
  CUDA_ARRAY3D_DESCRIPTOR desc = {};
  unsigned levels = 0;
  uint64_t charged = 0;
  std::map<unsigned, uint64_t> level_arrays;  // level -> session array handle
};

struct TexSurfInfo {
  int gpu = 0;
};
// A texture or surface object: the driver numbers each kind apart.
using ObjectKey = std::pair<bool, uint64_t>;  // {surface, driver value}

class ArrayTables {
 public:
  HandleTable<ArrayInfo>& arrays() { return arrays_; }
  HandleTable<MipmapInfo>& mipmaps() { return mipmaps_; }
  // Mints later handles in the session's window (handle_table.h).
  void SetWindow(uint8_t window) {
    arrays_.SetWindow(window);
    mipmaps_.SetWindow(window);
  }
  std::map<ObjectKey, TexSurfInfo>& objects() { return objects_; }

  // The array `handle`, after checking that a copy of `width` bytes x `height` rows x `depth`
  // slices at (x bytes, y, z) stays inside it and is made of whole elements.
  Result<ArrayInfo*> CheckCopy(uint64_t handle, uint64_t x, uint64_t y, uint64_t z, uint64_t width, uint64_t height,
                               uint64_t depth);

  // Ends every texture and surface object, array and mipmapped array (objects first: they
  // name the arrays), returning their charges. `set_device(gpu)` makes a GPU current.
  void ReleaseAll(gen::cuda::Api& api, const std::function<bool(int)>& set_device,
                  const std::function<void(int, uint64_t)>& release_charge);

 private:
  HandleTable<ArrayInfo> arrays_{HandleKind::kArray};
  HandleTable<MipmapInfo> mipmaps_{HandleKind::kMipmappedArray};
  std::map<ObjectKey, TexSurfInfo> objects_;
};

}  // namespace remora::worker

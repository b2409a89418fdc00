// CUDA arrays on the host-emulated backend: an array is a block of emulated device memory
// holding its elements packed (rows of width x element size bytes, `rows` rows per slice),
// with its descriptor; the CUarray the worker receives is an EmuArray*. Copies reach an array
// through LinearSide (host_driver_memory.cc), so every copy form runs on the same strided copy as
// linear memory. Texture and surface objects are created and described, never sampled
// (kernels do not run here).
#pragma once

#include <cuda.h>

#include "cuda_api.h"
#include "worker/backend/driver.h"
#include "worker/backend/host/host_graph_api.h"

namespace remora::worker {

namespace host {

struct EmuArray {
  DevPtr base = 0;
  uint64_t row_bytes = 0, rows = 1, slices = 1;
  CUDA_ARRAY3D_DESCRIPTOR desc = {};
  bool level = false;  // a mipmap level: ends with its mipmapped array
};

// A side of a copy that names an array, as the memory holding it.
inline CopySide LinearSide(const CopySide& s) {
  if (s.array == nullptr) return s;
  const auto* a = static_cast<const EmuArray*>(s.array);
  return CopySide{false, a->base + (s.z * a->rows + s.y) * a->row_bytes + s.x, a->row_bytes, a->rows};
}

}  // namespace host

// The array, mipmap, texture and surface functions of the host backend's driver table; a
// base of HostCudaApi (host_cuda_api.cc).
class HostArrayApi : public HostGraphApi {
 public:
  HostArrayApi(Driver& driver, HostGraphs& graphs);
  ~HostArrayApi() override;

  CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* desc) override;
  CUresult cuArrayDestroy(CUarray a) override;
  CUresult cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels) override;
  CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) override;
  CUresult cuMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray m, unsigned int level) override;
  CUresult cuTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                             const CUDA_RESOURCE_VIEW_DESC* view) override;
  CUresult cuTexObjectDestroy(CUtexObject t) override;
  CUresult cuSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* res) override;
  CUresult cuSurfObjectDestroy(CUsurfObject s) override;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace remora::worker

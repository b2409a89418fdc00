#include "worker/backend/host/host_array.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "worker/backend/array_desc.h"

namespace remora::worker {

using host::EmuArray;

struct HostArrayApi::Impl {
  Driver& d;
  std::map<const EmuArray*, std::unique_ptr<EmuArray>> arrays;
  struct Mipmap {
    std::vector<std::unique_ptr<EmuArray>> levels;
  };
  std::map<const Mipmap*, std::unique_ptr<Mipmap>> mipmaps;
  struct Object {
    bool surface;
    CUDA_RESOURCE_DESC res;
  };
  std::map<uint64_t, Object> objects;
  uint64_t next_object = 1;

  explicit Impl(Driver& driver) : d(driver) {}

  // A level (or plain array) of `desc`'s extent, its memory allocated.
  Result<std::unique_ptr<EmuArray>> Make(const CUDA_ARRAY3D_DESCRIPTOR& desc, bool level) {
    uint32_t elem = 0;
    uint64_t bytes = 0;
    RETURN_IF_ERROR(CheckArrayDesc(desc, 1, &elem, &bytes));
    auto a = std::make_unique<EmuArray>();
    a->desc = desc;
    a->row_bytes = desc.Width * elem;
    a->rows = desc.Height == 0 ? 1 : desc.Height;
    a->slices = desc.Depth == 0 ? 1 : desc.Depth;
    a->level = level;
    ASSIGN_OR_RETURN(a->base, d.MemAlloc(bytes));
    return a;
  }
  bool Known(CUarray a) const { return arrays.count(reinterpret_cast<const EmuArray*>(a)) > 0; }
  bool KnownLevel(CUarray a) const {
    for (auto& [p, m] : mipmaps)
      for (auto& l : m->levels)
        if (l.get() == reinterpret_cast<const EmuArray*>(a)) return true;
    return false;
  }
  CUresult CheckResource(const CUDA_RESOURCE_DESC* res, bool surface) const {
    if (res == nullptr) return CUDA_ERROR_INVALID_VALUE;
    switch (res->resType) {
      case CU_RESOURCE_TYPE_ARRAY:
        if (!Known(res->res.array.hArray) && !KnownLevel(res->res.array.hArray)) return CUDA_ERROR_INVALID_HANDLE;
        if (surface && (reinterpret_cast<const EmuArray*>(res->res.array.hArray)->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST) == 0)
          return CUDA_ERROR_INVALID_VALUE;  // as CUDA: a surface needs cudaArraySurfaceLoadStore
        return CUDA_SUCCESS;
      case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        if (surface) return CUDA_ERROR_INVALID_VALUE;
        return mipmaps.count(reinterpret_cast<const Mipmap*>(res->res.mipmap.hMipmappedArray)) ? CUDA_SUCCESS
                                                                                                : CUDA_ERROR_INVALID_HANDLE;
      case CU_RESOURCE_TYPE_LINEAR:
      case CU_RESOURCE_TYPE_PITCH2D:
        return surface ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;  // the worker checked the range
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
};

namespace {
CUresult R(const Status& st) { return st.ok() ? CUDA_SUCCESS : static_cast<CUresult>(st.raw()); }
}  // namespace

HostArrayApi::HostArrayApi(Driver& driver, HostGraphs& graphs) : HostGraphApi(graphs), impl_(new Impl(driver)) {}

HostArrayApi::~HostArrayApi() { delete impl_; }

CUresult HostArrayApi::cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (out == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto a = impl_->Make(*desc, false);
  if (!a.ok()) return R(a.status());
  *out = reinterpret_cast<CUarray>(a->get());
  impl_->arrays.emplace(a->get(), std::move(*a));
  return CUDA_SUCCESS;
}

CUresult HostArrayApi::cuArrayDestroy(CUarray a) {
  auto it = impl_->arrays.find(reinterpret_cast<const EmuArray*>(a));
  if (it == impl_->arrays.end()) return CUDA_ERROR_INVALID_HANDLE;
  (void)impl_->d.MemFree(it->second->base);
  impl_->arrays.erase(it);
  return CUDA_SUCCESS;
}

CUresult HostArrayApi::cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels) {
  if (out == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint32_t elem = 0;
  uint64_t bytes = 0;
  Status st = CheckArrayDesc(*desc, levels, &elem, &bytes);
  if (!st.ok()) return R(st);
  auto m = std::make_unique<Impl::Mipmap>();
  bool layered = (desc->Flags & CUDA_ARRAY3D_LAYERED) != 0;
  for (unsigned l = 0; l < levels; l++) {
    CUDA_ARRAY3D_DESCRIPTOR ld = *desc;
    ld.Width = std::max<size_t>(desc->Width >> l, 1);
    if (ld.Height != 0) ld.Height = std::max<size_t>(desc->Height >> l, 1);
    if (ld.Depth != 0 && !layered) ld.Depth = std::max<size_t>(desc->Depth >> l, 1);
    auto a = impl_->Make(ld, true);
    if (!a.ok()) {
      for (auto& made : m->levels) (void)impl_->d.MemFree(made->base);
      return R(a.status());
    }
    m->levels.push_back(std::move(*a));
  }
  *out = reinterpret_cast<CUmipmappedArray>(m.get());
  impl_->mipmaps.emplace(m.get(), std::move(m));
  return CUDA_SUCCESS;
}

CUresult HostArrayApi::cuMipmappedArrayDestroy(CUmipmappedArray m) {
  auto it = impl_->mipmaps.find(reinterpret_cast<const Impl::Mipmap*>(m));
  if (it == impl_->mipmaps.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& l : it->second->levels) (void)impl_->d.MemFree(l->base);
  impl_->mipmaps.erase(it);
  return CUDA_SUCCESS;
}

CUresult HostArrayApi::cuMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray m, unsigned int level) {
  auto it = impl_->mipmaps.find(reinterpret_cast<const Impl::Mipmap*>(m));
  if (it == impl_->mipmaps.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (out == nullptr || level >= it->second->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUarray>(it->second->levels[level].get());
  return CUDA_SUCCESS;
}

CUresult HostArrayApi::cuTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                                         const CUDA_RESOURCE_VIEW_DESC* view) {
  (void)view;
  if (out == nullptr || tex == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = impl_->CheckResource(res, false);
  if (r != CUDA_SUCCESS) return r;
  *out = impl_->next_object++;
  impl_->objects[*out] = Impl::Object{false, *res};
  return CUDA_SUCCESS;
}

CUresult HostArrayApi::cuTexObjectDestroy(CUtexObject t) {
  auto it = impl_->objects.find(t);
  if (it == impl_->objects.end() || it->second.surface) return CUDA_ERROR_INVALID_VALUE;
  impl_->objects.erase(it);
  return CUDA_SUCCESS;
}

CUresult HostArrayApi::cuSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* res) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = impl_->CheckResource(res, true);
  if (r != CUDA_SUCCESS) return r;
  *out = impl_->next_object++;
  impl_->objects[*out] = Impl::Object{true, *res};
  return CUDA_SUCCESS;
}

CUresult HostArrayApi::cuSurfObjectDestroy(CUsurfObject s) {
  auto it = impl_->objects.find(s);
  if (it == impl_->objects.end() || !it->second.surface) return CUDA_ERROR_INVALID_VALUE;
  impl_->objects.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace remora::worker

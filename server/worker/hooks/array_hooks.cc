#include "worker/hooks/array_hooks.h"

#include <algorithm>

#include "cuda_api.h"
#include "remora/base/log.h"
#include "worker/calls/generated_call.h"
#include "worker/session/peer_log.h"

namespace remora::worker {
namespace {

gen::cuda::Api& Api(OpContext& x) { return x.Library<gen::cuda::Api>(); }
ArrayTables& Tables(OpContext& x) { return x.executor().session().array_objects(); }

CUresult Refuse(const Status& st, const char* call) {
  LOG_PEER(PeerLog(), Info, "{} refused: {}", call, st.message());
  return static_cast<CUresult>(st.raw());
}

// New array storage of `estimate` bytes: charged before the driver call, like every
// allocation, so the ledger stays exact. Where the backend can measure what this process
// holds on the GPU (a real driver), what the driver reserved beyond the estimate is charged
// too once the array exists (the driver pads rows and tiles arrays; the host backend charges
// the documented size, width x height x depth x element size over all levels).
class StorageCharge {
 public:
  StorageCharge(OpContext& x, uint64_t estimate) : x_(x), charged_(estimate) {
    ok_ = x.executor().Charge(x.gpu(), estimate);
    if (ok_.ok() && x.executor().ledger() != nullptr) {
      auto used = x.executor().driver().ProcessMemory(x.gpu());
      if (used.ok()) before_ = *used;
    }
  }
  const Status& status() const { return ok_; }
  // The driver call failed: nothing stays charged.
  void Undo() { x_.executor().ReleaseCharge(x_.gpu(), charged_); }
  // After a successful create: charges the measured excess; false if the quota refuses it
  // (the caller destroys the array; nothing stays charged).
  bool Settle() {
    if (before_ == 0) return true;
    auto after = x_.executor().driver().ProcessMemory(x_.gpu());
    if (!after.ok() || *after <= before_ || *after - before_ <= charged_) return true;
    uint64_t extra = *after - before_ - charged_;
    Status st = x_.executor().Charge(x_.gpu(), extra);
    if (!st.ok()) {
      LOG_PEER(PeerLog(), Info, "an array the driver gave {} more bytes than its size is refused: {}", extra,
               st.message());
      Undo();
      return false;
    }
    charged_ += extra;
    return true;
  }
  uint64_t charged() const { return charged_; }

 private:
  OpContext& x_;
  uint64_t charged_;
  uint64_t before_ = 0;
  Status ok_;
};

// The resource a texture or surface object names, as the driver takes it: a session array
// (or mipmapped array) translated, or a range of the session's device memory checked.
CUresult FixResource(OpContext& x, const CUDA_RESOURCE_DESC* in, CUDA_RESOURCE_DESC* out, bool surface,
                     const char* call) {
  if (in == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = *in;
  switch (in->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      ArrayInfo* a = Tables(x).arrays().Find(reinterpret_cast<uint64_t>(in->res.array.hArray));
      if (a == nullptr) return Refuse(Error(Err::kInvalidResourceHandle, "not an array of this session"), call);
      if (a->gpu != x.gpu()) return Refuse(Error(Err::kInvalidResourceHandle, "the array is another device's"), call);
      out->res.array.hArray = static_cast<CUarray>(a->array);
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
      if (surface) return Refuse(Error(Err::kInvalidValue, "a surface cannot name a mipmapped array"), call);
      MipmapInfo* m = Tables(x).mipmaps().Find(reinterpret_cast<uint64_t>(in->res.mipmap.hMipmappedArray));
      if (m == nullptr) return Refuse(Error(Err::kInvalidResourceHandle, "not a mipmapped array of this session"), call);
      if (m->gpu != x.gpu()) return Refuse(Error(Err::kInvalidResourceHandle, "the array is another device's"), call);
      out->res.mipmap.hMipmappedArray = static_cast<CUmipmappedArray>(m->mipmap);
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_LINEAR: {
      if (surface) return Refuse(Error(Err::kInvalidValue, "a surface names an array"), call);
      uint64_t elem = FormatBytes(in->res.linear.format) * in->res.linear.numChannels;
      if (elem == 0 || in->res.linear.sizeInBytes == 0) return Refuse(Error(Err::kInvalidValue, "bad linear resource"), call);
      // Where it starts: CUDA lets it extend past its allocation, into this session's context.
      auto r = x.executor().session().CheckRange(in->res.linear.devPtr, 1);
      if (!r.ok()) return Refuse(r.status(), call);
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
      if (surface) return Refuse(Error(Err::kInvalidValue, "a surface names an array"), call);
      const auto& p = in->res.pitch2D;
      uint64_t elem = FormatBytes(p.format) * p.numChannels;
      if (elem == 0 || p.width == 0 || p.height == 0 || p.width > (1u << 20) || p.height > (1u << 20) ||
          p.pitchInBytes < p.width * elem)
        return Refuse(Error(Err::kInvalidValue, "bad pitched resource {}x{} pitch {}", p.width, p.height, p.pitchInBytes), call);
      auto r = x.executor().session().CheckRange(p.devPtr, 1);  // (as a linear resource's)
      if (!r.ok()) return Refuse(r.status(), call);
      return CUDA_SUCCESS;
    }
    default:
      return Refuse(Error(Err::kInvalidValue, "unknown resource type {}", static_cast<int>(in->resType)), call);
  }
}

}  // namespace

CUresult ArrayCreate(OpContext& x, CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint32_t elem = 0;
  uint64_t bytes = 0;
  Status st = CheckArrayDesc(*desc, 1, &elem, &bytes);
  if (!st.ok()) return Refuse(st, "cuArray3DCreate");
  StorageCharge charge(x, bytes);
  if (!charge.status().ok()) return Refuse(charge.status(), "cuArray3DCreate");
  CUarray real = nullptr;
  CUresult r = Api(x).cuArray3DCreate_v2(&real, desc);
  if (r != CUDA_SUCCESS) {
    charge.Undo();
    return r;
  }
  if (!charge.Settle()) {
    (void)Api(x).cuArrayDestroy(real);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = reinterpret_cast<CUarray>(
      Tables(x).arrays().Insert(ArrayInfo{real, x.gpu(), *desc, elem, charge.charged(), 0}));
  return CUDA_SUCCESS;
}

CUresult ArrayDestroy(OpContext& x, CUarray handle) {
  uint64_t id = reinterpret_cast<uint64_t>(handle);
  ArrayInfo* a = Tables(x).arrays().Find(id);
  if (a == nullptr) return Refuse(Error(Err::kInvalidResourceHandle, "0x{:x} is not an array of this session", id), "cuArrayDestroy");
  if (a->mipmap != 0) return Refuse(Error(Err::kInvalidValue, "a mipmap level ends with its mipmapped array"), "cuArrayDestroy");
  if (!x.ChooseGpu(a->gpu).ok()) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = Api(x).cuArrayDestroy(static_cast<CUarray>(a->array));
  if (r != CUDA_SUCCESS) return r;
  x.executor().ReleaseCharge(a->gpu, a->charged);
  Tables(x).arrays().Erase(id);
  return CUDA_SUCCESS;
}

CUresult MipmapCreate(OpContext& x, CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint32_t elem = 0;
  uint64_t bytes = 0;
  Status st = CheckArrayDesc(*desc, levels, &elem, &bytes);
  if (!st.ok()) return Refuse(st, "cuMipmappedArrayCreate");
  StorageCharge charge(x, bytes);
  if (!charge.status().ok()) return Refuse(charge.status(), "cuMipmappedArrayCreate");
  CUmipmappedArray real = nullptr;
  CUresult r = Api(x).cuMipmappedArrayCreate(&real, desc, levels);
  if (r != CUDA_SUCCESS) {
    charge.Undo();
    return r;
  }
  if (!charge.Settle()) {
    (void)Api(x).cuMipmappedArrayDestroy(real);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = reinterpret_cast<CUmipmappedArray>(
      Tables(x).mipmaps().Insert(MipmapInfo{real, x.gpu(), *desc, levels, charge.charged(), {}}));
  return CUDA_SUCCESS;
}

CUresult MipmapDestroy(OpContext& x, CUmipmappedArray handle) {
  uint64_t id = reinterpret_cast<uint64_t>(handle);
  MipmapInfo* m = Tables(x).mipmaps().Find(id);
  if (m == nullptr)
    return Refuse(Error(Err::kInvalidResourceHandle, "0x{:x} is not a mipmapped array of this session", id), "cuMipmappedArrayDestroy");
  if (!x.ChooseGpu(m->gpu).ok()) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = Api(x).cuMipmappedArrayDestroy(static_cast<CUmipmappedArray>(m->mipmap));
  if (r != CUDA_SUCCESS) return r;
  for (auto& [level, array] : m->level_arrays) Tables(x).arrays().Erase(array);
  x.executor().ReleaseCharge(m->gpu, m->charged);
  Tables(x).mipmaps().Erase(id);
  return CUDA_SUCCESS;
}

CUresult MipmapGetLevel(OpContext& x, CUarray* level_array, CUmipmappedArray handle, unsigned int level) {
  uint64_t id = reinterpret_cast<uint64_t>(handle);
  MipmapInfo* m = Tables(x).mipmaps().Find(id);
  if (m == nullptr)
    return Refuse(Error(Err::kInvalidResourceHandle, "0x{:x} is not a mipmapped array of this session", id), "cuMipmappedArrayGetLevel");
  if (level >= m->levels) return CUDA_ERROR_INVALID_VALUE;
  if (auto it = m->level_arrays.find(level); it != m->level_arrays.end()) {
    *level_array = reinterpret_cast<CUarray>(it->second);
    return CUDA_SUCCESS;
  }
  if (!x.ChooseGpu(m->gpu).ok()) return CUDA_ERROR_INVALID_CONTEXT;
  CUarray real = nullptr;
  CUresult r = Api(x).cuMipmappedArrayGetLevel(&real, static_cast<CUmipmappedArray>(m->mipmap), level);
  if (r != CUDA_SUCCESS) return r;
  ArrayInfo a{real, m->gpu, m->desc, 0, 0, id};
  bool layered = (m->desc.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  a.desc.Width = std::max<size_t>(m->desc.Width >> level, 1);
  if (a.desc.Height != 0) a.desc.Height = std::max<size_t>(m->desc.Height >> level, 1);
  if (a.desc.Depth != 0 && !layered) a.desc.Depth = std::max<size_t>(m->desc.Depth >> level, 1);
  a.elem = FormatBytes(a.desc.Format) * a.desc.NumChannels;
  uint64_t h = Tables(x).arrays().Insert(a);
  m->level_arrays[level] = h;
  *level_array = reinterpret_cast<CUarray>(h);
  return CUDA_SUCCESS;
}

CUresult TexCreate(OpContext& x, CUtexObject* object, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                   const CUDA_RESOURCE_VIEW_DESC* view) {
  if (tex == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_RESOURCE_DESC fixed;
  CUresult r = FixResource(x, res, &fixed, false, "cuTexObjectCreate");
  if (r != CUDA_SUCCESS) return r;
  if (view != nullptr && res->resType != CU_RESOURCE_TYPE_ARRAY && res->resType != CU_RESOURCE_TYPE_MIPMAPPED_ARRAY)
    return CUDA_ERROR_INVALID_VALUE;  // a view needs an array, as in CUDA
  r = Api(x).cuTexObjectCreate(object, &fixed, tex, view);
  if (r != CUDA_SUCCESS) return r;
  Tables(x).objects()[{false, *object}] = TexSurfInfo{x.gpu()};
  return CUDA_SUCCESS;
}

CUresult TexDestroy(OpContext& x, CUtexObject object) {
  auto& objects = Tables(x).objects();
  auto it = objects.find({false, object});
  if (it == objects.end())
    return Refuse(Error(Err::kInvalidValue, "0x{:x} is not a texture object of this session", object), "cuTexObjectDestroy");
  if (!x.ChooseGpu(it->second.gpu).ok()) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = Api(x).cuTexObjectDestroy(object);
  if (r != CUDA_SUCCESS) return r;
  objects.erase(it);
  return CUDA_SUCCESS;
}

CUresult SurfCreate(OpContext& x, CUsurfObject* object, const CUDA_RESOURCE_DESC* res) {
  CUDA_RESOURCE_DESC fixed;
  CUresult r = FixResource(x, res, &fixed, true, "cuSurfObjectCreate");
  if (r != CUDA_SUCCESS) return r;
  r = Api(x).cuSurfObjectCreate(object, &fixed);
  if (r != CUDA_SUCCESS) return r;
  Tables(x).objects()[{true, *object}] = TexSurfInfo{x.gpu()};
  return CUDA_SUCCESS;
}

CUresult SurfDestroy(OpContext& x, CUsurfObject object) {
  auto& objects = Tables(x).objects();
  auto it = objects.find({true, object});
  if (it == objects.end())
    return Refuse(Error(Err::kInvalidValue, "0x{:x} is not a surface object of this session", object), "cuSurfObjectDestroy");
  if (!x.ChooseGpu(it->second.gpu).ok()) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = Api(x).cuSurfObjectDestroy(object);
  if (r != CUDA_SUCCESS) return r;
  objects.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace remora::worker

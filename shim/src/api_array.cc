// CUDA arrays, mipmapped arrays, texture and surface objects of the runtime API (issue 14),
// and the operations the driver facade's entry points share with it (shim/src/driver/
// array.cc). Creation and destruction travel as the driver API's generated calls (the worker
// charges array storage to the tenant and checks every handle and range); descriptors are
// kept in ClientArrays, so the queries are answered here.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "arrays.h"
#include "cuda_client.h"
#include "export.h"
#include "remote_call.h"
#include "runtime.h"

namespace remora::shim {
namespace {

uint64_t U64(const void* p) { return reinterpret_cast<uint64_t>(p); }

// The resource a texture or surface object names, checked against this process's arrays and
// allocations before it travels (the worker checks it again). Memory is checked by where it
// starts: CUDA lets a linear or pitched resource extend past its allocation (NVIDIA's
// convolutionFFT2D reads a padded spectrum through a texture over an unpadded one), and what
// lies beyond is still this session's context.
Status CheckResource(const CUDA_RESOURCE_DESC& r) {
  ClientArrays& t = ClientArrays::Get();
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      if (!t.FindArray(U64(r.res.array.hArray)))
        return Error(Err::kInvalidResourceHandle, "the resource's array is not one of this process");
      return Status::Ok();
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      if (!t.FindMipmap(U64(r.res.mipmap.hMipmappedArray)))
        return Error(Err::kInvalidResourceHandle, "the resource's mipmapped array is not one of this process");
      return Status::Ok();
    case CU_RESOURCE_TYPE_LINEAR:
      if (r.res.linear.sizeInBytes == 0) return Error(Err::kInvalidValue, "an empty linear resource");
      return Runtime::Get().CheckDeviceRange(r.res.linear.devPtr, 1);
    case CU_RESOURCE_TYPE_PITCH2D: {
      const auto& p = r.res.pitch2D;
      uint64_t elem = ArrayFormatBytes(p.format) * p.numChannels;
      if (elem == 0 || p.height == 0 || p.width == 0) return Error(Err::kInvalidValue, "an empty pitched resource");
      if (p.pitchInBytes < p.width * elem) return Error(Err::kInvalidValue, "the resource's pitch is smaller than a row");
      return Runtime::Get().CheckDeviceRange(p.devPtr, 1);
    }
    default:
      return Error(Err::kInvalidValue, "unknown resource type {}", static_cast<int>(r.resType));
  }
}

cudaError_t Done(const Status& st, const char* call) {
  return static_cast<cudaError_t>(FinishApi(Domain::kCudart, st, call));
}

}  // namespace

Status CreateArray(const CUDA_ARRAY3D_DESCRIPTOR& d, CUarray* out, const char* call) {
  CUarray a = nullptr;
  RETURN_IF_ERROR(gen::cuda::cuArray3DCreate_v2(CallCtx{false, call}, &a, &d));
  ClientArrays::Get().AddArray(U64(a), ArrayEntry{d, ArrayFormatBytes(d.Format) * d.NumChannels, Thread().device, 0});
  *out = a;
  return Status::Ok();
}

Status DestroyArray(CUarray a, const char* call) {
  RETURN_IF_ERROR(gen::cuda::cuArrayDestroy(CallCtx{false, call}, a));
  ClientArrays::Get().RemoveArray(U64(a));
  return Status::Ok();
}

Status CreateMipmap(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels, CUmipmappedArray* out, const char* call) {
  CUmipmappedArray m = nullptr;
  RETURN_IF_ERROR(gen::cuda::cuMipmappedArrayCreate(CallCtx{false, call}, &m, &d, levels));
  ClientArrays::Get().AddMipmap(U64(m), MipmapEntry{d, levels, Thread().device});
  *out = m;
  return Status::Ok();
}

Status DestroyMipmap(CUmipmappedArray m, const char* call) {
  RETURN_IF_ERROR(gen::cuda::cuMipmappedArrayDestroy(CallCtx{false, call}, m));
  ClientArrays::Get().RemoveMipmap(U64(m));
  return Status::Ok();
}

Status MipmapLevel(CUmipmappedArray m, unsigned level, CUarray* out, const char* call) {
  auto entry = ClientArrays::Get().FindMipmap(U64(m));
  if (!entry) return Error(Err::kInvalidResourceHandle, "not a mipmapped array of this process");
  if (level >= entry->levels) return Error(Err::kInvalidValue, "level {} of a mipmapped array of {}", level, entry->levels);
  CUarray a = nullptr;
  RETURN_IF_ERROR(gen::cuda::cuMipmappedArrayGetLevel(CallCtx{false, call}, &a, m, level));
  CUDA_ARRAY3D_DESCRIPTOR d = LevelDesc(entry->desc, level);
  ClientArrays::Get().AddArray(U64(a), ArrayEntry{d, ArrayFormatBytes(d.Format) * d.NumChannels, entry->device, U64(m)});
  *out = a;
  return Status::Ok();
}

Status CreateObject(bool surface, const CUDA_RESOURCE_DESC& res, const CUDA_TEXTURE_DESC* tex,
                    const CUDA_RESOURCE_VIEW_DESC* view, uint64_t* out, const char* call) {
  RETURN_IF_ERROR(CheckResource(res));
  ObjectEntry o;
  o.surface = surface;
  o.res = res;
  if (surface) {
    CUsurfObject s = 0;
    RETURN_IF_ERROR(gen::cuda::cuSurfObjectCreate(CallCtx{false, call}, &s, &res));
    *out = s;
  } else {
    if (tex == nullptr) return Error(Err::kInvalidValue, "the texture descriptor is NULL");
    CUtexObject t = 0;
    RETURN_IF_ERROR(gen::cuda::cuTexObjectCreate(CallCtx{false, call}, &t, &res, tex, view));
    o.tex = *tex;
    if (view != nullptr) {
      o.has_view = true;
      o.view = *view;
    }
    *out = t;
  }
  ClientArrays::Get().AddObject(*out, o);
  return Status::Ok();
}

Status DestroyObject(bool surface, uint64_t value, const char* call) {
  if (surface) RETURN_IF_ERROR(gen::cuda::cuSurfObjectDestroy(CallCtx{false, call}, value));
  else RETURN_IF_ERROR(gen::cuda::cuTexObjectDestroy(CallCtx{false, call}, value));
  ClientArrays::Get().RemoveObject(surface, value);
  return Status::Ok();
}

// A live object of the kind asked for, for the descriptor queries.
Result<ObjectEntry> FindObjectOf(bool surface, uint64_t value) {
  auto o = ClientArrays::Get().FindObject(surface, value);
  if (!o)
    return Error(Err::kInvalidValue, "0x{:x} is not a {} object of this process", value, surface ? "surface" : "texture");
  return *o;
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

namespace {

Status Desc3D(const cudaChannelFormatDesc* desc, size_t w, size_t h, size_t d, unsigned flags, CUDA_ARRAY3D_DESCRIPTOR* out) {
  if (desc == nullptr) return Error(Err::kInvalidValue, "desc is NULL");
  *out = {};
  unsigned channels = 0;
  RETURN_IF_ERROR(ChannelToFormat(*desc, &out->Format, &channels));
  out->NumChannels = channels;
  out->Width = w;
  out->Height = h;
  out->Depth = d;
  out->Flags = flags;  // cudaArray* flags are the driver's CUDA_ARRAY3D_* values
  return Status::Ok();
}

cudaError_t MallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t w, size_t h, size_t d,
                        unsigned flags, const char* call) {
  if (array == nullptr) return Done(Error(Err::kInvalidValue, "array is NULL"), call);
  CUDA_ARRAY3D_DESCRIPTOR d3;
  Status st = Desc3D(desc, w, h, d, flags, &d3);
  CUarray a = nullptr;
  if (st.ok()) st = CreateArray(d3, &a, call);
  if (st.ok()) *array = reinterpret_cast<cudaArray_t>(a);
  return Done(st, call);
}

}  // namespace

REMORA_API cudaError_t cudaMallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t width, size_t height,
                                       unsigned int flags) {
  return MallocArray(array, desc, width, height, 0, flags, "cudaMallocArray");
}

REMORA_API cudaError_t cudaMalloc3DArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, cudaExtent extent,
                                         unsigned int flags) {
  return MallocArray(array, desc, extent.width, extent.height, extent.depth, flags, "cudaMalloc3DArray");
}

REMORA_API cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* mipmappedArray, const cudaChannelFormatDesc* desc,
                                                cudaExtent extent, unsigned int numLevels, unsigned int flags) {
  const char* call = "cudaMallocMipmappedArray";
  if (mipmappedArray == nullptr) return Done(Error(Err::kInvalidValue, "mipmappedArray is NULL"), call);
  CUDA_ARRAY3D_DESCRIPTOR d3;
  Status st = Desc3D(desc, extent.width, extent.height, extent.depth, flags, &d3);
  CUmipmappedArray m = nullptr;
  if (st.ok()) st = CreateMipmap(d3, numLevels, &m, call);
  if (st.ok()) *mipmappedArray = reinterpret_cast<cudaMipmappedArray_t>(m);
  return Done(st, call);
}

REMORA_API cudaError_t cudaFreeArray(cudaArray_t array) {
  if (array == nullptr) return cudaSuccess;  // as CUDA
  return Done(DestroyArray(reinterpret_cast<CUarray>(array), "cudaFreeArray"), "cudaFreeArray");
}

REMORA_API cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray) {
  if (mipmappedArray == nullptr) return cudaSuccess;
  return Done(DestroyMipmap(reinterpret_cast<CUmipmappedArray>(mipmappedArray), "cudaFreeMipmappedArray"),
              "cudaFreeMipmappedArray");
}

REMORA_API cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t* levelArray, cudaMipmappedArray_const_t mipmappedArray,
                                                  unsigned int level) {
  const char* call = "cudaGetMipmappedArrayLevel";
  if (levelArray == nullptr) return Done(Error(Err::kInvalidValue, "levelArray is NULL"), call);
  CUarray a = nullptr;
  Status st = MipmapLevel(reinterpret_cast<CUmipmappedArray>(const_cast<cudaMipmappedArray*>(mipmappedArray)), level, &a, call);
  if (st.ok()) *levelArray = reinterpret_cast<cudaArray_t>(a);
  return Done(st, call);
}

REMORA_API cudaError_t cudaArrayGetInfo(cudaChannelFormatDesc* desc, cudaExtent* extent, unsigned int* flags,
                                        cudaArray_t array) {
  auto a = ClientArrays::Get().FindArray(reinterpret_cast<uint64_t>(array));
  if (!a) return Done(Error(Err::kInvalidResourceHandle, "not an array of this process"), "cudaArrayGetInfo");
  if (desc != nullptr) *desc = FormatToChannel(a->desc.Format, a->desc.NumChannels);
  if (extent != nullptr) *extent = cudaExtent{a->desc.Width, a->desc.Height, a->desc.Depth};
  if (flags != nullptr) *flags = a->desc.Flags;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGetChannelDesc(cudaChannelFormatDesc* desc, cudaArray_const_t array) {
  if (desc == nullptr) return Done(Error(Err::kInvalidValue, "desc is NULL"), "cudaGetChannelDesc");
  auto a = ClientArrays::Get().FindArray(reinterpret_cast<uint64_t>(array));
  if (!a) return Done(Error(Err::kInvalidResourceHandle, "not an array of this process"), "cudaGetChannelDesc");
  *desc = FormatToChannel(a->desc.Format, a->desc.NumChannels);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaCreateTextureObject(cudaTextureObject_t* pTexObject, const cudaResourceDesc* pResDesc,
                                               const cudaTextureDesc* pTexDesc, const cudaResourceViewDesc* pResViewDesc) {
  const char* call = "cudaCreateTextureObject";
  if (pTexObject == nullptr || pResDesc == nullptr || pTexDesc == nullptr)
    return Done(Error(Err::kInvalidValue, "a NULL argument"), call);
  CUDA_RESOURCE_DESC res;
  Status st = ToDriver(*pResDesc, &res);
  CUDA_TEXTURE_DESC tex = ToDriver(*pTexDesc);
  CUDA_RESOURCE_VIEW_DESC view = {};
  if (pResViewDesc != nullptr) view = ToDriver(*pResViewDesc);
  uint64_t value = 0;
  if (st.ok()) st = CreateObject(false, res, &tex, pResViewDesc != nullptr ? &view : nullptr, &value, call);
  if (st.ok()) *pTexObject = value;
  return Done(st, call);
}

REMORA_API cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject) {
  if (texObject == 0) return cudaSuccess;
  return Done(DestroyObject(false, texObject, "cudaDestroyTextureObject"), "cudaDestroyTextureObject");
}

REMORA_API cudaError_t cudaGetTextureObjectResourceDesc(cudaResourceDesc* pResDesc, cudaTextureObject_t texObject) {
  const char* call = "cudaGetTextureObjectResourceDesc";
  auto o = FindObjectOf(false, texObject);
  if (!o.ok()) return Done(o.status(), call);
  if (pResDesc == nullptr) return Done(Error(Err::kInvalidValue, "pResDesc is NULL"), call);
  *pResDesc = ToRuntime(o->res);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGetTextureObjectTextureDesc(cudaTextureDesc* pTexDesc, cudaTextureObject_t texObject) {
  const char* call = "cudaGetTextureObjectTextureDesc";
  auto o = FindObjectOf(false, texObject);
  if (!o.ok()) return Done(o.status(), call);
  if (pTexDesc == nullptr) return Done(Error(Err::kInvalidValue, "pTexDesc is NULL"), call);
  *pTexDesc = ToRuntime(o->tex);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGetTextureObjectResourceViewDesc(cudaResourceViewDesc* pResViewDesc, cudaTextureObject_t texObject) {
  const char* call = "cudaGetTextureObjectResourceViewDesc";
  auto o = FindObjectOf(false, texObject);
  if (!o.ok()) return Done(o.status(), call);
  if (pResViewDesc == nullptr) return Done(Error(Err::kInvalidValue, "pResViewDesc is NULL"), call);
  *pResViewDesc = o->has_view ? ToRuntime(o->view) : cudaResourceViewDesc{};
  return cudaSuccess;
}

REMORA_API cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* pSurfObject, const cudaResourceDesc* pResDesc) {
  const char* call = "cudaCreateSurfaceObject";
  if (pSurfObject == nullptr || pResDesc == nullptr) return Done(Error(Err::kInvalidValue, "a NULL argument"), call);
  if (pResDesc->resType != cudaResourceTypeArray)
    return Done(Error(Err::kInvalidValue, "a surface object names a CUDA array"), call);
  CUDA_RESOURCE_DESC res;
  Status st = ToDriver(*pResDesc, &res);
  uint64_t value = 0;
  if (st.ok()) st = CreateObject(true, res, nullptr, nullptr, &value, call);
  if (st.ok()) *pSurfObject = value;
  return Done(st, call);
}

REMORA_API cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject) {
  if (surfObject == 0) return cudaSuccess;
  return Done(DestroyObject(true, surfObject, "cudaDestroySurfaceObject"), "cudaDestroySurfaceObject");
}

REMORA_API cudaError_t cudaGetSurfaceObjectResourceDesc(cudaResourceDesc* pResDesc, cudaSurfaceObject_t surfObject) {
  const char* call = "cudaGetSurfaceObjectResourceDesc";
  auto o = FindObjectOf(true, surfObject);
  if (!o.ok()) return Done(o.status(), call);
  if (pResDesc == nullptr) return Done(Error(Err::kInvalidValue, "pResDesc is NULL"), call);
  *pResDesc = ToRuntime(o->res);
  return cudaSuccess;
}

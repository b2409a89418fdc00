// The driver API's CUDA arrays, mipmapped arrays, texture and surface objects: the same
// operations as the runtime's (shim/src/api_array.cc), with the driver's descriptors; the
// descriptor queries are answered from the client's tables (ClientArrays).
#include <cuda.h>

#include "arrays.h"
#include "driver/driver.h"
#include "export.h"
#include "remote_call.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

Result<ArrayEntry> FindArray(CUarray a) {
  auto e = ClientArrays::Get().FindArray(reinterpret_cast<uint64_t>(a));
  if (!e) return Error(Err::kInvalidResourceHandle, "not an array of this process");
  return *e;
}

}  // namespace

REMORA_API CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  if (pHandle == nullptr || pAllocateArray == nullptr) return Invalid("cuArray3DCreate", "a NULL argument");
  return Done(CreateArray(*pAllocateArray, pHandle, "cuArray3DCreate"), "cuArray3DCreate");
}

REMORA_API CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  if (pHandle == nullptr || pAllocateArray == nullptr) return Invalid("cuArrayCreate", "a NULL argument");
  CUDA_ARRAY3D_DESCRIPTOR d = {};
  d.Width = pAllocateArray->Width;
  d.Height = pAllocateArray->Height;
  d.Format = pAllocateArray->Format;
  d.NumChannels = pAllocateArray->NumChannels;
  return Done(CreateArray(d, pHandle, "cuArrayCreate"), "cuArrayCreate");
}

REMORA_API CUresult cuArrayDestroy(CUarray hArray) { return Done(DestroyArray(hArray, "cuArrayDestroy"), "cuArrayDestroy"); }

REMORA_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  if (pArrayDescriptor == nullptr) return Invalid("cuArrayGetDescriptor", "pArrayDescriptor is NULL");
  auto a = FindArray(hArray);
  if (!a.ok()) return Done(a.status(), "cuArrayGetDescriptor");
  pArrayDescriptor->Width = a->desc.Width;
  pArrayDescriptor->Height = a->desc.Height;
  pArrayDescriptor->Format = a->desc.Format;
  pArrayDescriptor->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  if (pArrayDescriptor == nullptr) return Invalid("cuArray3DGetDescriptor", "pArrayDescriptor is NULL");
  auto a = FindArray(hArray);
  if (!a.ok()) return Done(a.status(), "cuArray3DGetDescriptor");
  *pArrayDescriptor = a->desc;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                           unsigned int numMipmapLevels) {
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr) return Invalid("cuMipmappedArrayCreate", "a NULL argument");
  return Done(CreateMipmap(*pMipmappedArrayDesc, numMipmapLevels, pHandle, "cuMipmappedArrayCreate"), "cuMipmappedArrayCreate");
}

REMORA_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  return Done(DestroyMipmap(hMipmappedArray, "cuMipmappedArrayDestroy"), "cuMipmappedArrayDestroy");
}

REMORA_API CUresult cuMipmappedArrayGetLevel(CUarray* pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level) {
  if (pLevelArray == nullptr) return Invalid("cuMipmappedArrayGetLevel", "pLevelArray is NULL");
  return Done(MipmapLevel(hMipmappedArray, level, pLevelArray, "cuMipmappedArrayGetLevel"), "cuMipmappedArrayGetLevel");
}

REMORA_API CUresult cuTexObjectCreate(CUtexObject* pTexObject, const CUDA_RESOURCE_DESC* pResDesc,
                                      const CUDA_TEXTURE_DESC* pTexDesc, const CUDA_RESOURCE_VIEW_DESC* pResViewDesc) {
  if (pTexObject == nullptr || pResDesc == nullptr || pTexDesc == nullptr) return Invalid("cuTexObjectCreate", "a NULL argument");
  uint64_t v = 0;
  Status st = CreateObject(false, *pResDesc, pTexDesc, pResViewDesc, &v, "cuTexObjectCreate");
  if (st.ok()) *pTexObject = v;
  return Done(st, "cuTexObjectCreate");
}

REMORA_API CUresult cuTexObjectDestroy(CUtexObject texObject) {
  return Done(DestroyObject(false, texObject, "cuTexObjectDestroy"), "cuTexObjectDestroy");
}

REMORA_API CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc, CUtexObject texObject) {
  if (pResDesc == nullptr) return Invalid("cuTexObjectGetResourceDesc", "pResDesc is NULL");
  auto o = FindObjectOf(false, texObject);
  if (!o.ok()) return Done(o.status(), "cuTexObjectGetResourceDesc");
  *pResDesc = o->res;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* pTexDesc, CUtexObject texObject) {
  if (pTexDesc == nullptr) return Invalid("cuTexObjectGetTextureDesc", "pTexDesc is NULL");
  auto o = FindObjectOf(false, texObject);
  if (!o.ok()) return Done(o.status(), "cuTexObjectGetTextureDesc");
  *pTexDesc = o->tex;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* pResViewDesc, CUtexObject texObject) {
  if (pResViewDesc == nullptr) return Invalid("cuTexObjectGetResourceViewDesc", "pResViewDesc is NULL");
  auto o = FindObjectOf(false, texObject);
  if (!o.ok()) return Done(o.status(), "cuTexObjectGetResourceViewDesc");
  *pResViewDesc = o->has_view ? o->view : CUDA_RESOURCE_VIEW_DESC{};
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuSurfObjectCreate(CUsurfObject* pSurfObject, const CUDA_RESOURCE_DESC* pResDesc) {
  if (pSurfObject == nullptr || pResDesc == nullptr) return Invalid("cuSurfObjectCreate", "a NULL argument");
  if (pResDesc->resType != CU_RESOURCE_TYPE_ARRAY) return Invalid("cuSurfObjectCreate", "a surface object names an array");
  uint64_t v = 0;
  Status st = CreateObject(true, *pResDesc, nullptr, nullptr, &v, "cuSurfObjectCreate");
  if (st.ok()) *pSurfObject = v;
  return Done(st, "cuSurfObjectCreate");
}

REMORA_API CUresult cuSurfObjectDestroy(CUsurfObject surfObject) {
  return Done(DestroyObject(true, surfObject, "cuSurfObjectDestroy"), "cuSurfObjectDestroy");
}

REMORA_API CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc, CUsurfObject surfObject) {
  if (pResDesc == nullptr) return Invalid("cuSurfObjectGetResourceDesc", "pResDesc is NULL");
  auto o = FindObjectOf(true, surfObject);
  if (!o.ok()) return Done(o.status(), "cuSurfObjectGetResourceDesc");
  *pResDesc = o->res;
  return CUDA_SUCCESS;
}

// Sparse, deferred-mapping and multi-planar (NV12) arrays cannot be created through Remora
// (creation answers CUDA_ERROR_NOT_SUPPORTED, server/worker/session/array_state.cc): for every array
// that can, these answer as CUDA does for an array of another kind.
namespace {

// `out` checked, then the (mipmapped) array `handle`, then CUDA's answer for its kind.
CUresult OtherKind(const void* out, uint64_t handle, bool mipmap, const char* call, const char* why) {
  if (out == nullptr) return Invalid(call, "the output is NULL");
  ClientArrays& arrays = ClientArrays::Get();
  if (mipmap ? !arrays.FindMipmap(handle) : !arrays.FindArray(handle))
    return Done(Error(Err::kInvalidResourceHandle, "not an array of this process"), call);
  return Invalid(call, why);
}

uint64_t H(const void* p) { return reinterpret_cast<uint64_t>(p); }

}  // namespace

REMORA_API CUresult cuArrayGetPlane(CUarray* pPlaneArray, CUarray hArray, unsigned int) {
  return OtherKind(pPlaneArray, H(hArray), false, "cuArrayGetPlane", "the array does not have a multi-planar format");
}
REMORA_API CUresult cuArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES* sparseProperties, CUarray array) {
  return OtherKind(sparseProperties, H(array), false, "cuArrayGetSparseProperties",
                   "the array was not created with CUDA_ARRAY3D_SPARSE");
}
REMORA_API CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements, CUarray array,
                                                 CUdevice) {
  return OtherKind(memoryRequirements, H(array), false, "cuArrayGetMemoryRequirements",
                   "the array was not created with CUDA_ARRAY3D_DEFERRED_MAPPING");
}
REMORA_API CUresult cuMipmappedArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES* sparseProperties,
                                                        CUmipmappedArray mipmap) {
  return OtherKind(sparseProperties, H(mipmap), true, "cuMipmappedArrayGetSparseProperties",
                   "the array was not created with CUDA_ARRAY3D_SPARSE");
}
REMORA_API CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements,
                                                          CUmipmappedArray mipmap, CUdevice) {
  return OtherKind(memoryRequirements, H(mipmap), true, "cuMipmappedArrayGetMemoryRequirements",
                   "the array was not created with CUDA_ARRAY3D_DEFERRED_MAPPING");
}

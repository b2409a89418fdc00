#include "arrays.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "cuda_hooks.h"
#include "process.h"

namespace remora::shim {
namespace {

// cudaErrorInvalidChannelDescriptor (20), which Remora's Err does not name.
template <typename... Args>
Status BadChannel(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Domain::kCudart, 20, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace

ClientArrays& ClientArrays::Get() { return Process::Get().arrays(); }

void ClientArrays::AddArray(uint64_t handle, const ArrayEntry& a) {
  std::lock_guard<std::mutex> l(mu_);
  arrays_[handle] = a;
}
void ClientArrays::RemoveArray(uint64_t handle) {
  std::lock_guard<std::mutex> l(mu_);
  arrays_.erase(handle);
}
std::optional<ArrayEntry> ClientArrays::FindArray(uint64_t handle) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = arrays_.find(handle);
  if (it == arrays_.end()) return std::nullopt;
  return it->second;
}
void ClientArrays::AddMipmap(uint64_t handle, const MipmapEntry& m) {
  std::lock_guard<std::mutex> l(mu_);
  mipmaps_[handle] = m;
}
void ClientArrays::RemoveMipmap(uint64_t handle) {
  std::lock_guard<std::mutex> l(mu_);
  mipmaps_.erase(handle);
  for (auto it = arrays_.begin(); it != arrays_.end();) it = it->second.mipmap == handle ? arrays_.erase(it) : std::next(it);
}
std::optional<MipmapEntry> ClientArrays::FindMipmap(uint64_t handle) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = mipmaps_.find(handle);
  if (it == mipmaps_.end()) return std::nullopt;
  return it->second;
}
void ClientArrays::AddObject(uint64_t value, const ObjectEntry& o) {
  std::lock_guard<std::mutex> l(mu_);
  objects_[{o.surface, value}] = o;
}
void ClientArrays::RemoveObject(bool surface, uint64_t value) {
  std::lock_guard<std::mutex> l(mu_);
  objects_.erase({surface, value});
}
std::optional<ObjectEntry> ClientArrays::FindObject(bool surface, uint64_t value) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = objects_.find({surface, value});
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

uint32_t ArrayFormatBytes(CUarray_format format) { return api::cuda::ArrayFormatBytes(format); }

CUDA_ARRAY3D_DESCRIPTOR LevelDesc(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned level) {
  CUDA_ARRAY3D_DESCRIPTOR d = desc;
  d.Width = std::max<size_t>(desc.Width >> level, 1);
  if (d.Height != 0) d.Height = std::max<size_t>(desc.Height >> level, 1);
  if (d.Depth != 0 && (desc.Flags & CUDA_ARRAY3D_LAYERED) == 0) d.Depth = std::max<size_t>(desc.Depth >> level, 1);
  return d;
}

Status ChannelToFormat(const cudaChannelFormatDesc& d, CUarray_format* format, unsigned* channels) {
  int bits[4] = {d.x, d.y, d.z, d.w};
  unsigned n = 0;
  while (n < 4 && bits[n] != 0) n++;
  for (unsigned i = n; i < 4; i++)
    if (bits[i] != 0) return BadChannel("channel bits {},{},{},{} have a gap", d.x, d.y, d.z, d.w);
  if (n == 0 || n == 3) return BadChannel("an array has 1, 2 or 4 channels, not {}", n);
  for (unsigned i = 1; i < n; i++)
    if (bits[i] != bits[0]) return BadChannel("channels of different sizes");
  switch (d.f) {
    case cudaChannelFormatKindSigned:
      if (bits[0] == 8) *format = CU_AD_FORMAT_SIGNED_INT8;
      else if (bits[0] == 16) *format = CU_AD_FORMAT_SIGNED_INT16;
      else if (bits[0] == 32) *format = CU_AD_FORMAT_SIGNED_INT32;
      else return BadChannel("{}-bit signed channels", bits[0]);
      break;
    case cudaChannelFormatKindUnsigned:
      if (bits[0] == 8) *format = CU_AD_FORMAT_UNSIGNED_INT8;
      else if (bits[0] == 16) *format = CU_AD_FORMAT_UNSIGNED_INT16;
      else if (bits[0] == 32) *format = CU_AD_FORMAT_UNSIGNED_INT32;
      else return BadChannel("{}-bit unsigned channels", bits[0]);
      break;
    case cudaChannelFormatKindFloat:
      if (bits[0] == 16) *format = CU_AD_FORMAT_HALF;
      else if (bits[0] == 32) *format = CU_AD_FORMAT_FLOAT;
      else return BadChannel("{}-bit float channels", bits[0]);
      break;
    default:
      return Error(Err::kNotSupported, "channel format kind {} is not supported by Remora", static_cast<int>(d.f));
  }
  *channels = n;
  return Status::Ok();
}

cudaChannelFormatDesc FormatToChannel(CUarray_format format, unsigned channels) {
  cudaChannelFormatDesc d = {};
  int bits = static_cast<int>(ArrayFormatBytes(format)) * 8;
  switch (format) {
    case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT32:
      d.f = cudaChannelFormatKindSigned;
      break;
    case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_FLOAT:
      d.f = cudaChannelFormatKindFloat;
      break;
    default:
      d.f = cudaChannelFormatKindUnsigned;
  }
  d.x = bits;
  d.y = channels > 1 ? bits : 0;
  d.z = channels > 2 ? bits : 0;
  d.w = channels > 3 ? bits : 0;
  return d;
}

Status ToDriver(const cudaResourceDesc& in, CUDA_RESOURCE_DESC* out) {
  *out = {};
  out->resType = static_cast<CUresourcetype>(in.resType);
  unsigned channels = 0;
  switch (in.resType) {
    case cudaResourceTypeArray:
      out->res.array.hArray = reinterpret_cast<CUarray>(in.res.array.array);
      return Status::Ok();
    case cudaResourceTypeMipmappedArray:
      out->res.mipmap.hMipmappedArray = reinterpret_cast<CUmipmappedArray>(in.res.mipmap.mipmap);
      return Status::Ok();
    case cudaResourceTypeLinear:
      RETURN_IF_ERROR(ChannelToFormat(in.res.linear.desc, &out->res.linear.format, &channels));
      out->res.linear.devPtr = reinterpret_cast<CUdeviceptr>(in.res.linear.devPtr);
      out->res.linear.numChannels = channels;
      out->res.linear.sizeInBytes = in.res.linear.sizeInBytes;
      return Status::Ok();
    case cudaResourceTypePitch2D:
      RETURN_IF_ERROR(ChannelToFormat(in.res.pitch2D.desc, &out->res.pitch2D.format, &channels));
      out->res.pitch2D.devPtr = reinterpret_cast<CUdeviceptr>(in.res.pitch2D.devPtr);
      out->res.pitch2D.numChannels = channels;
      out->res.pitch2D.width = in.res.pitch2D.width;
      out->res.pitch2D.height = in.res.pitch2D.height;
      out->res.pitch2D.pitchInBytes = in.res.pitch2D.pitchInBytes;
      return Status::Ok();
    default:
      return Error(Err::kInvalidValue, "unknown resource type {}", static_cast<int>(in.resType));
  }
}

cudaResourceDesc ToRuntime(const CUDA_RESOURCE_DESC& in) {
  cudaResourceDesc out = {};
  out.resType = static_cast<cudaResourceType>(in.resType);
  switch (in.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      out.res.array.array = reinterpret_cast<cudaArray_t>(in.res.array.hArray);
      break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      out.res.mipmap.mipmap = reinterpret_cast<cudaMipmappedArray_t>(in.res.mipmap.hMipmappedArray);
      break;
    case CU_RESOURCE_TYPE_LINEAR:
      out.res.linear.devPtr = reinterpret_cast<void*>(in.res.linear.devPtr);
      out.res.linear.desc = FormatToChannel(in.res.linear.format, in.res.linear.numChannels);
      out.res.linear.sizeInBytes = in.res.linear.sizeInBytes;
      break;
    case CU_RESOURCE_TYPE_PITCH2D:
      out.res.pitch2D.devPtr = reinterpret_cast<void*>(in.res.pitch2D.devPtr);
      out.res.pitch2D.desc = FormatToChannel(in.res.pitch2D.format, in.res.pitch2D.numChannels);
      out.res.pitch2D.width = in.res.pitch2D.width;
      out.res.pitch2D.height = in.res.pitch2D.height;
      out.res.pitch2D.pitchInBytes = in.res.pitch2D.pitchInBytes;
      break;
  }
  return out;
}

CUDA_TEXTURE_DESC ToDriver(const cudaTextureDesc& in) {
  CUDA_TEXTURE_DESC out = {};
  for (int i = 0; i < 3; i++) out.addressMode[i] = static_cast<CUaddress_mode>(in.addressMode[i]);
  out.filterMode = static_cast<CUfilter_mode>(in.filterMode);
  // cudaReadModeElementType: values as stored (the driver's "read as integer").
  if (in.readMode == cudaReadModeElementType) out.flags |= CU_TRSF_READ_AS_INTEGER;
  if (in.normalizedCoords) out.flags |= CU_TRSF_NORMALIZED_COORDINATES;
  if (in.sRGB) out.flags |= CU_TRSF_SRGB;
  if (in.disableTrilinearOptimization) out.flags |= CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
  if (in.seamlessCubemap) out.flags |= CU_TRSF_SEAMLESS_CUBEMAP;
  out.maxAnisotropy = in.maxAnisotropy;
  out.mipmapFilterMode = static_cast<CUfilter_mode>(in.mipmapFilterMode);
  out.mipmapLevelBias = in.mipmapLevelBias;
  out.minMipmapLevelClamp = in.minMipmapLevelClamp;
  out.maxMipmapLevelClamp = in.maxMipmapLevelClamp;
  for (int i = 0; i < 4; i++) out.borderColor[i] = in.borderColor[i];
  return out;
}

cudaTextureDesc ToRuntime(const CUDA_TEXTURE_DESC& in) {
  cudaTextureDesc out = {};
  for (int i = 0; i < 3; i++) out.addressMode[i] = static_cast<cudaTextureAddressMode>(in.addressMode[i]);
  out.filterMode = static_cast<cudaTextureFilterMode>(in.filterMode);
  out.readMode = (in.flags & CU_TRSF_READ_AS_INTEGER) ? cudaReadModeElementType : cudaReadModeNormalizedFloat;
  out.normalizedCoords = (in.flags & CU_TRSF_NORMALIZED_COORDINATES) ? 1 : 0;
  out.sRGB = (in.flags & CU_TRSF_SRGB) ? 1 : 0;
  out.disableTrilinearOptimization = (in.flags & CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION) ? 1 : 0;
  out.seamlessCubemap = (in.flags & CU_TRSF_SEAMLESS_CUBEMAP) ? 1 : 0;
  out.maxAnisotropy = in.maxAnisotropy;
  out.mipmapFilterMode = static_cast<cudaTextureFilterMode>(in.mipmapFilterMode);
  out.mipmapLevelBias = in.mipmapLevelBias;
  out.minMipmapLevelClamp = in.minMipmapLevelClamp;
  out.maxMipmapLevelClamp = in.maxMipmapLevelClamp;
  for (int i = 0; i < 4; i++) out.borderColor[i] = in.borderColor[i];
  return out;
}

CUDA_RESOURCE_VIEW_DESC ToDriver(const cudaResourceViewDesc& in) {
  CUDA_RESOURCE_VIEW_DESC out = {};
  out.format = static_cast<CUresourceViewFormat>(in.format);
  out.width = in.width;
  out.height = in.height;
  out.depth = in.depth;
  out.firstMipmapLevel = in.firstMipmapLevel;
  out.lastMipmapLevel = in.lastMipmapLevel;
  out.firstLayer = in.firstLayer;
  out.lastLayer = in.lastLayer;
  return out;
}

cudaResourceViewDesc ToRuntime(const CUDA_RESOURCE_VIEW_DESC& in) {
  cudaResourceViewDesc out = {};
  out.format = static_cast<cudaResourceViewFormat>(in.format);
  out.width = in.width;
  out.height = in.height;
  out.depth = in.depth;
  out.firstMipmapLevel = in.firstMipmapLevel;
  out.lastMipmapLevel = in.lastMipmapLevel;
  out.firstLayer = in.firstLayer;
  out.lastLayer = in.lastLayer;
  return out;
}

}  // namespace remora::shim

// The worker's end of CUDA arrays, mipmapped arrays, texture and surface objects
// (protocol/api/cuda.api, `worker=Array*|Mipmap*|Tex*|Surf*`): arrays travel as session
// handles, checked here and translated before the driver sees them; their storage is charged
// to the tenant; the resources a texture or surface object names (an array, or a range of the
// session's device memory) are checked; the objects' driver values are registered in the
// session. Executor thread only.
#pragma once

#include <cuda.h>

namespace remora::worker {

class OpContext;

CUresult ArrayCreate(OpContext& x, CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc);
CUresult ArrayDestroy(OpContext& x, CUarray handle);
CUresult MipmapCreate(OpContext& x, CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels);
CUresult MipmapDestroy(OpContext& x, CUmipmappedArray handle);
CUresult MipmapGetLevel(OpContext& x, CUarray* level_array, CUmipmappedArray handle, unsigned int level);
CUresult TexCreate(OpContext& x, CUtexObject* object, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                   const CUDA_RESOURCE_VIEW_DESC* view);
CUresult TexDestroy(OpContext& x, CUtexObject object);
CUresult SurfCreate(OpContext& x, CUsurfObject* object, const CUDA_RESOURCE_DESC* res);
CUresult SurfDestroy(OpContext& x, CUsurfObject object);

}  // namespace remora::worker

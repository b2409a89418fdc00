// cuDNN on the worker: the hooks protocol/api/cudnn.api names. The extents of a legacy
// operation's tensors are what their descriptors say as the real library holds them
// (cudnnGetTensorSizeInBytes, cudnnGetFilterSizeInBytes). The backend API's attribute values
// arrive as bytes: descriptor and handle ids among them are translated into the library's
// objects of this session (a foreign id, or an object of another kind, is refused) and every
// device pointer is checked against the session's allocations; a variant pack is checked
// again, with the plan's workspace size, at every cudnnBackendExecute, so a pointer freed in
// between never reaches the library. Used by the executor's single thread.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::cudnn {

// Bytes of device memory a tensor (filter) of `desc` spans (0 if it cannot be read: the
// pointer's start is still checked, and the library refuses the descriptor).
uint64_t TensorBytes(OpContext& x, const LibObject* desc);
uint64_t FilterBytes(OpContext& x, const LibObject* desc);

// versions[0..2]: cudnnGetVersion, cudnnGetMaxDeviceVersion, cudnnGetCudartVersion.
Status DnnVersions(OpContext& x, size_t* versions);
Status DnnLastError(OpContext& x, char* message, size_t max_size);
Status BackendSetAttribute(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t count, const void* elements);
// `elements` (nullable) holds the caller's bytes on entry and the reply's on return; descriptor
// elements stay the caller's ids (the library filled the objects they name).
Status BackendGetAttribute(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t requested, int64_t* count, void* elements);
Status BackendExecute(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack);

}  // namespace remora::worker::gen::cudnn

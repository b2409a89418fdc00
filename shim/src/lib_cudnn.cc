// cuDNN entry points written by hand (protocol/api/cudnn.api: local) and the mirror hooks
// (lib_cudnn.h).
#include "lib_cudnn.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cudnn_client.h"
#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::cudnn {
namespace {

constexpr size_t kDataType = 0;  // LibObjectView::aux slot of a tensor or filter descriptor
constexpr size_t kStream = 1;    // of a handle

size_t BytesOf(uint64_t id) {
  auto v = shim::Process::Get().lib_objects().Find(id);
  // A descriptor never set: the library refuses the call; a float's worth is read meanwhile.
  if (!v) return sizeof(float);
  return v->aux[kDataType] == CUDNN_DATA_DOUBLE ? sizeof(double) : sizeof(float);
}

void SetType(uint64_t id, cudnnDataType_t type) { shim::Process::Get().lib_objects().SetAux(id, kDataType, type); }
uint64_t Id(cudnnTensorDescriptor_t d) { return shim::HandleBits(HandleKind::kCudnnTensorDescriptor, d); }
uint64_t Id(cudnnFilterDescriptor_t d) { return shim::HandleBits(HandleKind::kCudnnFilterDescriptor, d); }

}  // namespace

size_t ScalarBytes(cudnnTensorDescriptor_t desc) { return BytesOf(Id(desc)); }
size_t ScalarBytes(cudnnFilterDescriptor_t desc) { return BytesOf(Id(desc)); }

void MirrorStream(cudnnHandle_t h, cudaStream_t s) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCudnnHandle, h), kStream,
                                            static_cast<int64_t>(reinterpret_cast<uintptr_t>(s)));
}
void MirrorTensor4d(cudnnTensorDescriptor_t d, cudnnTensorFormat_t, cudnnDataType_t t, int, int, int, int) { SetType(Id(d), t); }
void MirrorTensor4dEx(cudnnTensorDescriptor_t d, cudnnDataType_t t, int, int, int, int, int, int, int, int) { SetType(Id(d), t); }
void MirrorTensorNd(cudnnTensorDescriptor_t d, cudnnDataType_t t, int, const int*, const int*) { SetType(Id(d), t); }
void MirrorTensorNdEx(cudnnTensorDescriptor_t d, cudnnTensorFormat_t, cudnnDataType_t t, int, const int*) { SetType(Id(d), t); }
void MirrorFilter4d(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t, int, int, int, int) { SetType(Id(d), t); }
void MirrorDeriveBN(cudnnTensorDescriptor_t derived, cudnnTensorDescriptor_t x, cudnnBatchNormMode_t) {
  SetType(Id(derived), BytesOf(Id(x)) == sizeof(double) ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT);
}
void MirrorFilterNd(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t, int, const int*) { SetType(Id(d), t); }

}  // namespace remora::gen::cudnn

namespace {

// The server's cuDNN version, the newest device architecture it supports and the CUDA runtime
// it was built with (memoised: asked once per process); zeros when the server cannot answer.
size_t Version(int which) {
  size_t v[3] = {};
  remora::Status st = remora::gen::cudnn::remoraCudnnGetVersions(remora::shim::CallCtx{false, "cudnnGetVersion"}, v);
  return st.ok() ? v[which] : 0;
}

}  // namespace

#define REMORA_EXPORT extern "C"

REMORA_EXPORT size_t cudnnGetVersion() { return Version(0); }
REMORA_EXPORT size_t cudnnGetMaxDeviceVersion() { return Version(1); }
REMORA_EXPORT size_t cudnnGetCudartVersion() { return Version(2); }

REMORA_EXPORT cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  auto v = remora::shim::Process::Get().lib_objects().Get(remora::shim::HandleBits(remora::HandleKind::kCudnnHandle, handle),
                                                         remora::HandleKind::kCudnnHandle);
  if (!v.ok()) return CUDNN_STATUS_BAD_PARAM;
  if (stream == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(v->aux[1]));
  return CUDNN_STATUS_SUCCESS;
}

// The worker's last error message (cuDNN keeps it per thread; the worker runs one session).
REMORA_EXPORT void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  message[0] = '\0';
  remora::Status st = remora::gen::cudnn::remoraCudnnGetLastErrorString(remora::shim::CallCtx{false, "cudnnGetLastErrorString"},
                                                                        message, std::min<size_t>(max_size, 4096));
  if (!st.ok()) std::snprintf(message, max_size, "%s", st.message().c_str());
  message[max_size - 1] = '\0';
}

REMORA_EXPORT const char* cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
#define REMORA_DNN_STATUS(name) \
  case name: return #name;
    REMORA_DNN_STATUS(CUDNN_STATUS_SUCCESS)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_INITIALIZED)
    REMORA_DNN_STATUS(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    REMORA_DNN_STATUS(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
    REMORA_DNN_STATUS(CUDNN_STATUS_DEPRECATED)
    REMORA_DNN_STATUS(CUDNN_STATUS_LICENSE_ERROR)
    REMORA_DNN_STATUS(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
    REMORA_DNN_STATUS(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
    REMORA_DNN_STATUS(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
    REMORA_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
    REMORA_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
    REMORA_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR)
    REMORA_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
    REMORA_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
    REMORA_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    REMORA_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    REMORA_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
    REMORA_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
    REMORA_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED)
    REMORA_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
    REMORA_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
    REMORA_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
    REMORA_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef REMORA_DNN_STATUS
    default: return s == 2001 ? "CUDNN_STATUS_INVALID_VALUE" : "CUDNN_STATUS_UNKNOWN";
  }
}

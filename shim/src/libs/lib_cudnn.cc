// cuDNN entry points written by hand (protocol/api/cudnn.api: local) and the mirror hooks
// (lib_cudnn.h).
#include "lib_cudnn.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "census.h"
#include "cudnn_client.h"
#include "cudnn_hooks.h"
#include "cudnn_known.h"
#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::cudnn {
namespace {

constexpr size_t kDataType = 0;  // LibObjectView::aux slot of a tensor, filter, RNN or sequence data descriptor
constexpr size_t kStream = 1;    // of a handle
constexpr size_t kDim1 = 1;      // of a tensor descriptor: its second dimension
constexpr size_t kWindow = 0;    // of an attention descriptor: qoMaxSeqLength

size_t BytesOf(uint64_t id) {
  auto v = shim::Process::Get().lib_objects().Find(id);
  // A descriptor never set: the library refuses the call; a float's worth is read meanwhile.
  if (!v) return sizeof(float);
  return v->aux[kDataType] == CUDNN_DATA_DOUBLE ? sizeof(double) : sizeof(float);
}

void SetType(uint64_t id, cudnnDataType_t type) { shim::Process::Get().lib_objects().SetAux(id, kDataType, type); }
void SetDim1(uint64_t id, int n) { shim::Process::Get().lib_objects().SetAux(id, kDim1, n); }
int64_t Aux(uint64_t id, size_t slot, int64_t fallback) {
  auto v = shim::Process::Get().lib_objects().Find(id);
  return v ? v->aux[slot] : fallback;
}
uint64_t IdOf(const void* d) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(d)); }
uint64_t Id(cudnnTensorDescriptor_t d) { return shim::HandleBits(HandleKind::kCudnnTensorDescriptor, d); }
uint64_t Id(cudnnFilterDescriptor_t d) { return shim::HandleBits(HandleKind::kCudnnFilterDescriptor, d); }

}  // namespace

size_t ScalarBytes(cudnnTensorDescriptor_t desc) { return BytesOf(Id(desc)); }
size_t ScalarBytes(cudnnFilterDescriptor_t desc) { return BytesOf(Id(desc)); }

void MirrorStream(cudnnHandle_t h, cudaStream_t s) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCudnnHandle, h), kStream,
                                            static_cast<int64_t>(reinterpret_cast<uintptr_t>(s)));
}
void MirrorTensor4d(cudnnTensorDescriptor_t d, cudnnTensorFormat_t, cudnnDataType_t t, int, int c, int, int) {
  SetType(Id(d), t);
  SetDim1(Id(d), c);
}
void MirrorTensor4dEx(cudnnTensorDescriptor_t d, cudnnDataType_t t, int, int c, int, int, int, int, int, int) {
  SetType(Id(d), t);
  SetDim1(Id(d), c);
}
void MirrorTensorNd(cudnnTensorDescriptor_t d, cudnnDataType_t t, int n, const int* dim, const int*) {
  SetType(Id(d), t);
  SetDim1(Id(d), n > 1 && dim != nullptr ? dim[1] : 0);
}
void MirrorTensorNdEx(cudnnTensorDescriptor_t d, cudnnTensorFormat_t, cudnnDataType_t t, int n, const int* dim) {
  SetType(Id(d), t);
  SetDim1(Id(d), n > 1 && dim != nullptr ? dim[1] : 0);
}
void MirrorFilter4d(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t, int, int, int, int) { SetType(Id(d), t); }
void MirrorDeriveBN(cudnnTensorDescriptor_t derived, cudnnTensorDescriptor_t x, cudnnBatchNormMode_t) {
  SetType(Id(derived), BytesOf(Id(x)) == sizeof(double) ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT);
}
void MirrorFilterNd(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t, int, const int*) { SetType(Id(d), t); }

size_t ValueBytes(cudnnTensorDescriptor_t d) {
  size_t n = api::dnn::DataTypeBytes(static_cast<cudnnDataType_t>(Aux(Id(d), kDataType, CUDNN_DATA_FLOAT)));
  return n == 0 ? sizeof(float) : n;
}
int CtcBatch(cudnnTensorDescriptor_t probs) { return static_cast<int>(std::max<int64_t>(0, Aux(Id(probs), kDim1, 0))); }
int64_t CtcLabels(const int* lengths, cudnnTensorDescriptor_t probs) {
  int64_t sum = 0;
  for (int i = 0; lengths != nullptr && i < CtcBatch(probs); i++) sum += std::max(lengths[i], 0);
  return sum;
}
void MirrorDeriveNorm(cudnnTensorDescriptor_t sb, cudnnTensorDescriptor_t mv, cudnnTensorDescriptor_t x, cudnnNormMode_t, int) {
  cudnnDataType_t t = BytesOf(Id(x)) == sizeof(double) ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  SetType(Id(sb), t);
  SetType(Id(mv), t);
}
void MirrorRNNData(cudnnRNNDataDescriptor_t d, cudnnDataType_t t, cudnnRNNDataLayout_t, int, int, int, const int*, void*) {
  SetType(IdOf(d), t);
}
size_t RnnPadBytes(cudnnRNNDataDescriptor_t d) {
  return api::dnn::DataTypeBytes(static_cast<cudnnDataType_t>(Aux(IdOf(d), kDataType, CUDNN_DATA_FLOAT)));
}
void MirrorSeqData(cudnnSeqDataDescriptor_t d, cudnnDataType_t t, int, const int*, const cudnnSeqDataAxis_t*, size_t, const int*, void*) {
  SetType(IdOf(d), t);
}
size_t SeqPadBytes(cudnnSeqDataDescriptor_t d) {
  return api::dnn::DataTypeBytes(static_cast<cudnnDataType_t>(Aux(IdOf(d), kDataType, CUDNN_DATA_FLOAT)));
}
void MirrorAttn(cudnnAttnDescriptor_t d, unsigned, int, double, cudnnDataType_t, cudnnDataType_t, cudnnMathType_t, cudnnDropoutDescriptor_t,
                cudnnDropoutDescriptor_t, int, int, int, int, int, int, int, int qoMaxSeqLength, int, int, int) {
  shim::Process::Get().lib_objects().SetAux(IdOf(d), kWindow, qoMaxSeqLength);
}
int AttnWindow(cudnnAttnDescriptor_t d) { return static_cast<int>(std::max<int64_t>(0, Aux(IdOf(d), kWindow, 0))); }

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

// A plan's execution, posted: with the bytes of its by-value tensors when the variant pack
// points at any (dnn_backend.h), read now as the library would read them now.
REMORA_EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
  namespace dnn = remora::gen::cudnn;
  static constexpr remora::shim::LibCodes kCodes{CUDNN_STATUS_SUCCESS, CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_NOT_INITIALIZED,
                                                 CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
                                                 CUDNN_STATUS_INTERNAL_ERROR};
  const remora::shim::CallCtx cc{false, "cudnnBackendExecute"};
  std::vector<std::byte> values;
  remora::Status st = dnn::ByValues(plan, pack, &values);
  if (st.ok())
    st = values.empty() ? dnn::cudnnBackendExecute(cc, handle, plan, pack)
                        : dnn::remoraCudnnBackendExecuteByValue(cc, handle, plan, pack, values.data(), values.size());
  return static_cast<cudnnStatus_t>(remora::shim::FinishLib(remora::Domain::kCudnn, kCodes, st, "cudnnBackendExecute"));
}

// A finalize: posted, or answered where cudnn-frontend decides on its status (dnn_backend.h),
// with the Known tree of what the library computed for an operation graph, heuristics or plan.
REMORA_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
  namespace dnn = remora::gen::cudnn;
  static constexpr remora::shim::LibCodes kCodes{CUDNN_STATUS_SUCCESS, CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_NOT_INITIALIZED,
                                                 CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
                                                 CUDNN_STATUS_INTERNAL_ERROR};
  const remora::shim::CallCtx cc{false, "cudnnBackendFinalize"};
  remora::Status st;
  if (dnn::FinalizeBringsKnown(desc)) {
    // Uninitialised room: the reply writes only the tree's bytes (out(used=)), on every
    // answered finalize of a new shape.
    constexpr size_t kRoom = remora::api::dnn::kKnownCapacity;
    std::unique_ptr<std::byte[]> tree(new std::byte[kRoom]);
    size_t n = 0;
    st = dnn::remoraCudnnBackendFinalizeKnown(cc, desc, tree.get(), kRoom, &n);
    if (st.ok()) {
      dnn::MirrorBackendFinalize(desc);
      dnn::MirrorBackendKnown(desc, tree.get(), std::min(n, kRoom));
    }
  } else {
    st = dnn::cudnnBackendFinalize(cc, desc);
  }
  return static_cast<cudnnStatus_t>(remora::shim::FinishLib(remora::Domain::kCudnn, kCodes, st, "cudnnBackendFinalize"));
}

// An attribute query: in the client where the answer is what the application set, or what a
// finalize brought back (dnn_backend.h), else the library's.
REMORA_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                                     cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* elements) {
  namespace dnn = remora::gen::cudnn;
  static constexpr remora::shim::LibCodes kCodes{CUDNN_STATUS_SUCCESS, CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_NOT_INITIALIZED,
                                                 CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
                                                 CUDNN_STATUS_INTERNAL_ERROR};
  if (dnn::LocalGetAttribute(desc, name, type, requested, count, elements)) return CUDNN_STATUS_SUCCESS;
  const remora::shim::CallCtx cc{false, "cudnnBackendGetAttribute"};
  remora::Status st;
  std::vector<uint64_t> fill;
  if (dnn::KnownGetAttribute(desc, name, type, requested, count, elements, &fill)) {
    if (fill.empty()) return CUDNN_STATUS_SUCCESS;
    st = dnn::remoraCudnnBackendFillPosted(cc, desc, name, static_cast<int64_t>(fill.size()), fill.data());
  } else {
    // Which queries still wait for the server, for the call census (REMORA_CALL_STATS).
    if (auto* census = remora::shim::Census::Get())
      census->Detail(fmt::format("cudnnBackendGetAttribute: attribute {} (type {}, {} requested) of descriptor type {}",
                                 static_cast<int>(name), static_cast<int>(type), requested, dnn::BackendTypeOf(desc)));
    // The library writes min(requested, count) elements, and applications size their arrays so
    // (cudnn-frontend asks for CUDNN_NUMERICAL_NOTE_TYPE_COUNT notes into an array of as many
    // as a first query counted): the reply lands in a buffer of the request's size, and only
    // what the library would write reaches the application's array. A value query asks for at
    // most kMostBytes (attributes hold a few elements; an application may ask for "all" with a
    // huge count); descriptors to fill travel as ids, so a request past that is refused.
    constexpr uint64_t kMostBytes = std::min<uint64_t>(remora::api::kMaxArgBytes, 256 << 10);
    const size_t elem = remora::api::dnn::AttributeElementBytes(type);
    const int64_t most = elem == 0 ? requested : static_cast<int64_t>(kMostBytes / elem);
    const bool descriptors = type == CUDNN_TYPE_BACKEND_DESCRIPTOR;
    if (descriptors && elements != nullptr && requested > most)
      st = remora::Status(remora::Domain::kCudnn, CUDNN_STATUS_BAD_PARAM,
                          fmt::format("{} descriptors to fill: more than one call carries", requested));
    const int64_t asked = std::min(requested, most);
    const uint64_t bytes = elements != nullptr && asked > 0 ? remora::api::dnn::AttributeBytes(type, asked) : 0;
    std::vector<std::byte> buf(st.ok() ? bytes : 0);
    if (descriptors && !buf.empty()) std::memcpy(buf.data(), elements, bytes);  // the descriptors to fill
    int64_t n = 0;
    if (st.ok()) st = dnn::cudnnBackendGetAttribute(cc, desc, name, type, asked, &n, buf.empty() ? nullptr : buf.data());
    if (st.ok() && elements != nullptr && asked < requested && n > asked)
      st = remora::Status(remora::Domain::kCudnn, CUDNN_STATUS_NOT_SUPPORTED,
                          fmt::format("the attribute has {} elements: more than one call carries", n));
    if (st.ok()) {
      if (count != nullptr) *count = n;
      const int64_t wrote = std::max<int64_t>(0, std::min(asked, n));
      if (!buf.empty() && wrote > 0) std::memcpy(elements, buf.data(), remora::api::dnn::AttributeBytes(type, wrote));
    }
  }
  return static_cast<cudnnStatus_t>(remora::shim::FinishLib(remora::Domain::kCudnn, kCodes, st, "cudnnBackendGetAttribute"));
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

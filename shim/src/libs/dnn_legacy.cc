// cuDNN entry points written by hand around generated stubs, or answered in the client
// (protocol/api/cudnn.api: local, export=hand): the sub-libraries' version checks, the logging
// callback, device-side error queries, CUDA graphs of a plan, the queries that return a padding
// value of the descriptor's own type, and the fusion API's typed parameters.
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "cudnn_client.h"
#include "cudnn_hooks.h"
#include "dnn_backend.h"
#include "lib_cudnn.h"
#include "remote_call.h"

namespace {

namespace dnn = remora::gen::cudnn;
using remora::Status;
using remora::shim::CallCtx;

constexpr remora::shim::LibCodes kCodes{CUDNN_STATUS_SUCCESS, CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_NOT_INITIALIZED,
                                        CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
                                        CUDNN_STATUS_INTERNAL_ERROR};

cudnnStatus_t Finish(const Status& st, const char* call) {
  return static_cast<cudnnStatus_t>(remora::shim::FinishLib(remora::Domain::kCudnn, kCodes, st, call));
}

// The logging callback the application set: kept and returned, never called (cuDNN runs on the
// server, whose log its CUDNN_LOGLEVEL_DBG controls).
struct Callback {
  std::mutex mu;
  unsigned mask = 0;
  void* udata = nullptr;
  cudnnCallback_t fptr = nullptr;
};
Callback& TheCallback() {
  static Callback* c = new Callback;
  return *c;
}

uint64_t Bits(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

cudnnStatus_t CudaGraph(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack, cudaGraph_t graph, int update,
                        const char* call) {
  std::vector<std::byte> values;
  Status st = dnn::ByValues(plan, pack, &values);
  if (st.ok()) st = dnn::remoraCudnnBackendCudaGraph(CallCtx{false, call}, h, plan, pack, graph, update, values.data(), values.size());
  return Finish(st, call);
}

}  // namespace

#define REMORA_EXPORT extern "C"

// One library serves every sub-library's part: their versions cannot disagree.
REMORA_EXPORT cudnnStatus_t cudnnOpsVersionCheck() { return CUDNN_STATUS_SUCCESS; }
REMORA_EXPORT cudnnStatus_t cudnnCnnVersionCheck() { return CUDNN_STATUS_SUCCESS; }
REMORA_EXPORT cudnnStatus_t cudnnAdvVersionCheck() { return CUDNN_STATUS_SUCCESS; }
REMORA_EXPORT cudnnStatus_t cudnnGraphVersionCheck() { return CUDNN_STATUS_SUCCESS; }

REMORA_EXPORT cudnnStatus_t cudnnSetCallback(unsigned mask, void* udata, cudnnCallback_t fptr) {
  Callback& c = TheCallback();
  std::lock_guard<std::mutex> lock(c.mu);
  c.mask = mask;
  c.udata = udata;
  c.fptr = fptr;
  return CUDNN_STATUS_SUCCESS;
}

REMORA_EXPORT cudnnStatus_t cudnnGetCallback(unsigned* mask, void** udata, cudnnCallback_t* fptr) {
  if (mask == nullptr || udata == nullptr || fptr == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Callback& c = TheCallback();
  std::lock_guard<std::mutex> lock(c.mu);
  *mask = c.mask;
  *udata = c.udata;
  *fptr = c.fptr;
  return CUDNN_STATUS_SUCCESS;
}

// A blocking query waits for the handle's stream here, then asks the worker without blocking.
REMORA_EXPORT cudnnStatus_t cudnnQueryRuntimeError(cudnnHandle_t handle, cudnnStatus_t* rstatus, cudnnErrQueryMode_t mode,
                                                   cudnnRuntimeTag_t* tag) {
  if (rstatus == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (tag != nullptr) return CUDNN_STATUS_BAD_PARAM;  // reserved: cuDNN asks for NULL
  if (mode == CUDNN_ERRQUERY_BLOCKING) {
    cudaStream_t stream = nullptr;
    if (cudnnStatus_t s = cudnnGetStream(handle, &stream); s != CUDNN_STATUS_SUCCESS) return s;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED_CUDART;
  } else if (mode != CUDNN_ERRQUERY_RAWCODE && mode != CUDNN_ERRQUERY_NONBLOCKING) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  return Finish(dnn::remoraCudnnQueryRuntimeError(CallCtx{false, "cudnnQueryRuntimeError"}, handle, rstatus), "cudnnQueryRuntimeError");
}

REMORA_EXPORT cudnnStatus_t cudnnBackendPopulateCudaGraph(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack,
                                                          cudaGraph_t graph) {
  return CudaGraph(h, plan, pack, graph, 0, "cudnnBackendPopulateCudaGraph");
}

REMORA_EXPORT cudnnStatus_t cudnnBackendUpdateCudaGraph(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack,
                                                        cudaGraph_t graph) {
  return CudaGraph(h, plan, pack, graph, 1, "cudnnBackendUpdateCudaGraph");
}

// The padding value comes back into a buffer as large as any element, then as many bytes as
// the descriptor's type has where the application asked.
REMORA_EXPORT cudnnStatus_t cudnnGetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, cudnnDataType_t* dataType, cudnnRNNDataLayout_t* layout,
                                                      int* maxSeqLength, int* batchSize, int* vectorSize, int arrayLengthRequested,
                                                      int* seqLengthArray, void* paddingFill) {
  unsigned char pad[16] = {};
  Status st = dnn::cudnnGetRNNDataDescriptor(CallCtx{false, "cudnnGetRNNDataDescriptor"}, desc, dataType, layout, maxSeqLength, batchSize,
                                             vectorSize, arrayLengthRequested, seqLengthArray, pad);
  if (st.ok() && paddingFill != nullptr) std::memcpy(paddingFill, pad, dnn::RnnPadBytes(desc));
  return Finish(st, "cudnnGetRNNDataDescriptor");
}

REMORA_EXPORT cudnnStatus_t cudnnGetSeqDataDescriptor(cudnnSeqDataDescriptor_t desc, cudnnDataType_t* dataType, int* nbDims,
                                                      int nbDimsRequested, int* dimA, cudnnSeqDataAxis_t* axes, size_t* seqLengthArraySize,
                                                      size_t seqLengthSizeRequested, int* seqLengthArray, void* paddingFill) {
  unsigned char pad[16] = {};
  Status st = dnn::cudnnGetSeqDataDescriptor(CallCtx{false, "cudnnGetSeqDataDescriptor"}, desc, dataType, nbDims, nbDimsRequested, dimA,
                                             axes, seqLengthArraySize, seqLengthSizeRequested, seqLengthArray, pad);
  if (st.ok() && paddingFill != nullptr) std::memcpy(paddingFill, pad, dnn::SeqPadBytes(desc));
  return Finish(st, "cudnnGetSeqDataDescriptor");
}

// ---- the fusion API: a parameter as a u64 (a descriptor as its id, an enum, a pointer, a
// host scalar's 8 bytes) ---------------------------------------------------------------------
REMORA_EXPORT cudnnStatus_t cudnnSetFusedOpsConstParamPackAttribute(cudnnFusedOpsConstParamPack_t pack, cudnnFusedOpsConstParamLabel_t label,
                                                                    const void* param) {
  uint64_t value = 0;
  if (remora::api::dnn::FusedConstIsDescriptor(label)) {
    value = Bits(param);  // the descriptor itself
  } else {
    if (param == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    int v = 0;
    std::memcpy(&v, param, sizeof(v));
    value = static_cast<uint32_t>(v);
  }
  return Finish(dnn::remoraCudnnSetFusedOpsConst(CallCtx{false, "cudnnSetFusedOpsConstParamPackAttribute"}, pack, label, value),
                "cudnnSetFusedOpsConstParamPackAttribute");
}

REMORA_EXPORT cudnnStatus_t cudnnGetFusedOpsConstParamPackAttribute(cudnnFusedOpsConstParamPack_t pack, cudnnFusedOpsConstParamLabel_t label,
                                                                    void* param, int* isNULL) {
  if (param == nullptr || isNULL == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  const bool desc = remora::api::dnn::FusedConstIsDescriptor(label);
  uint64_t value = 0;
  Status st = dnn::remoraCudnnGetFusedOpsConst(CallCtx{false, "cudnnGetFusedOpsConstParamPackAttribute"}, pack, label,
                                               desc ? Bits(param) : 0, &value, isNULL);
  if (st.ok() && !desc) {
    int v = static_cast<int>(value);
    std::memcpy(param, &v, sizeof(v));
  }
  return Finish(st, "cudnnGetFusedOpsConstParamPackAttribute");
}

REMORA_EXPORT cudnnStatus_t cudnnSetFusedOpsVariantParamPackAttribute(cudnnFusedOpsVariantParamPack_t pack,
                                                                      cudnnFusedOpsVariantParamLabel_t label, void* ptr) {
  uint64_t value = Bits(ptr);
  if (label >= CUDNN_SCALAR_SIZE_T_WORKSPACE_SIZE_IN_BYTES) {  // a host scalar of 8 bytes
    if (ptr == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    std::memcpy(&value, ptr, sizeof(value));
  }
  return Finish(dnn::remoraCudnnSetFusedOpsVariant(CallCtx{false, "cudnnSetFusedOpsVariantParamPackAttribute"}, pack, label, value),
                "cudnnSetFusedOpsVariantParamPackAttribute");
}

REMORA_EXPORT cudnnStatus_t cudnnGetFusedOpsVariantParamPackAttribute(cudnnFusedOpsVariantParamPack_t pack,
                                                                      cudnnFusedOpsVariantParamLabel_t label, void* ptr) {
  if (ptr == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  uint64_t value = 0;
  Status st = dnn::remoraCudnnGetFusedOpsVariant(CallCtx{false, "cudnnGetFusedOpsVariantParamPackAttribute"}, pack, label, &value);
  if (st.ok()) std::memcpy(ptr, &value, sizeof(value));  // a void* or an 8-byte scalar
  return Finish(st, "cudnnGetFusedOpsVariantParamPackAttribute");
}

// cuDNN on the worker: the hooks protocol/api/cudnn.api names. The extents of a legacy
// operation's tensors are what their descriptors say as the real library holds them
// (cudnnGetTensorSizeInBytes, cudnnGetFilterSizeInBytes). The backend API's attribute values
// arrive as bytes: descriptor and handle ids among them are translated into the library's
// objects of this session (a foreign id, or an object of another kind, is refused) and every
// device pointer is checked against the session's allocations; a variant pack is checked
// again, with the plan's workspace size, at every cudnnBackendExecute, so a pointer freed in
// between never reaches the library.
//
// Posted backend calls (attribute setters, most finalizes, destroys, executes): a failure of
// one is kept on its descriptor (DnnDescriptor::error) and reported by the next answered call
// naming that descriptor (a finalize or attribute query of it, or of a descriptor an attribute
// setter makes refer to it: the failure moves there), or, if the descriptor is destroyed or
// executed first, by the session's next synchronising call - reported once, as CUDA reports
// an asynchronous error. While a descriptor holds a failure, posted calls on it are skipped.
//
// By-value tensors (CUDNN_ATTR_TENSOR_IS_BY_VALUE: a host pointer in the variant pack that the
// library reads at execution): the client sends their bytes with the execute
// (remoraCudnnBackendExecuteByValue); the worker executes a variant pack of its own whose
// by-value pointers are worker buffers holding them. A client's host address in a pack is
// never handed to an execution. Used by the executor's single thread.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include <map>
#include <vector>

#include "remora/base/status.h"
#include "worker/session/lib_objects.h"

namespace remora::worker {
class OpContext;
}  // namespace remora::worker

namespace remora::worker::gen::cudnn {

// What the worker keeps of a backend descriptor beside the library's object.
struct DnnDescriptor : LibExtra {
  cudnnBackendDescriptorType_t type{};
  Status error;  // the first failure of a posted call on it, not reported yet
  // A variant pack's attributes as the application set them (data pointers, unique ids,
  // workspace, intermediates; 8-byte elements), by attribute name: cuDNN 9 answers no
  // cudnnBackendGetAttribute on a variant pack, and every execute checks them.
  std::map<int, std::vector<uint64_t>> pack;
};

// Bytes of device memory a tensor (filter) of `desc` spans (0 if it cannot be read: the
// pointer's start is still checked, and the library refuses the descriptor).
uint64_t TensorBytes(OpContext& x, const LibObject* desc);
uint64_t FilterBytes(OpContext& x, const LibObject* desc);

// versions[0..2]: cudnnGetVersion, cudnnGetMaxDeviceVersion, cudnnGetCudartVersion.
Status DnnVersions(OpContext& x, size_t* versions);
Status DnnLastError(OpContext& x, char* message, size_t max_size);

Status BackendCreated(OpContext& x, cudnnBackendDescriptorType_t type, LibObject* desc);
// Before the descriptor is forgotten: a failure it still holds goes to the session.
Status BackendDestroyed(OpContext& x, LibObject* desc);
Status BackendSetAttribute(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t count, const void* elements);
// `elements` (nullable) holds the caller's bytes on entry and the reply's on return; descriptor
// elements stay the caller's ids (the library filled the objects they name).
Status BackendGetAttribute(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t requested, int64_t* count, void* elements);
Status BackendFinalize(OpContext& x, LibObject* desc);
// An answered finalize that also writes, into `known` (`capacity` bytes), the Known tree of
// what the library computed (protocol/api/cudnn_known.h); *knownSize 0 if there is none or it
// does not fit. Library calls only: the tree is read into descriptors made and destroyed here.
Status BackendFinalizeKnown(OpContext& x, LibObject* desc, void* known, size_t capacity, size_t* knownSize);
// A query of `desc` into the application's descriptors `filled` (ids) whose values the client
// already had from a Known tree: made so the library's objects are filled, posted (a failure is
// kept on `desc`, as any posted call's).
Status BackendFillPosted(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, int64_t requested, const void* filled);
Status BackendExecute(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack);
// `values`: the by-value tensors' bytes (api::dnn::ByValues encoding, cudnn_hooks.h).
Status BackendExecuteByValue(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack, const void* values, size_t size);

// The plan's kernels into (update: updated in) the session's CUDA graph `graph`, the variant
// pack checked as for an execute.
Status BackendCudaGraph(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack, cudaGraph_t graph, int update,
                        const void* values, size_t size);
// cudnnQueryRuntimeError without blocking the worker (the client synchronised first).
Status DnnQueryRuntimeError(OpContext& x, LibObject* handle, cudnnStatus_t* rstatus);

// ---- the legacy API's extents and descriptors (lib_cudnn_legacy.cc) ------------------------
// Each extent is what the descriptor says as the library holds it (0 if it cannot be read:
// the pointer's start is still checked, and the library refuses the descriptor).
uint64_t RnnDataBytes(OpContext& x, const LibObject* rnnData);   // maxSeqLength x batch x vector
uint64_t RnnBatchBytes(OpContext& x, const LibObject* rnnData);  // an int32 per batch entry
uint64_t RnnPadBytesW(OpContext& x, const LibObject* rnnData);   // one element of its type
uint64_t SeqDataBytes(OpContext& x, const LibObject* seqData);   // the product of its dimensions
uint64_t SeqPadBytesW(OpContext& x, const LibObject* seqData);
uint64_t AttnWindowW(OpContext& x, const LibObject* attn);  // qoMaxSeqLength
uint64_t AttnSeqBytes(OpContext& x, const LibObject* attn);  // an int per batch x beam entry
uint64_t CtcBatchW(OpContext& x, const LibObject* probs);     // the probabilities' second dimension
uint64_t CtcCostBytes(OpContext& x, const LibObject* probs);  // a float (or int) per batch entry
uint64_t CtcLabelBytes(OpContext& x, const LibObject* probs, const LibObject* ctc);  // batch x maxLabelLength ints
uint64_t CtcLabelsW(OpContext& x, const LibObject* probs, const std::vector<int>& lengths);  // their sum
uint64_t ColumnBytes(OpContext& x, const LibObject* xDesc, const LibObject* wDesc, const LibObject* conv);  // cudnnIm2Col
uint64_t FilterBiasBytes(OpContext& x, const LibObject* filter);  // one element per output feature map
// A spatial transformer's dimensions, kept by the worker at its set (no query exists).
Status SpatialTfSet(OpContext& x, LibObject* st, cudnnSamplerType_t sampler, cudnnDataType_t type, int nbDims, const int* dims);
uint64_t ThetaBytes(const LibObject* st);  // N x 2 x 3 elements
uint64_t GridBytes(const LibObject* st);   // N x H x W x 2 elements
// Queries whose dropout descriptors come back as the application's ids.
Status GetRNNDescriptorV8(OpContext& x, LibObject* rnn, cudnnRNNAlgo_t* algo, cudnnRNNMode_t* cellMode, cudnnRNNBiasMode_t* biasMode,
                          cudnnDirectionMode_t* dirMode, cudnnRNNInputMode_t* inputMode, cudnnDataType_t* dataType, cudnnDataType_t* mathPrec,
                          cudnnMathType_t* mathType, int32_t* inputSize, int32_t* hiddenSize, int32_t* projSize, int32_t* numLayers,
                          cudnnDropoutDescriptor_t* dropoutDesc, uint32_t* auxFlags);
Status GetAttnDescriptor(OpContext& x, LibObject* attn, unsigned* attnMode, int* nHeads, double* smScaler, cudnnDataType_t* dataType,
                         cudnnDataType_t* computePrec, cudnnMathType_t* mathType, cudnnDropoutDescriptor_t* attnDropoutDesc,
                         cudnnDropoutDescriptor_t* postDropoutDesc, int* qSize, int* kSize, int* vSize, int* qProjSize, int* kProjSize,
                         int* vProjSize, int* oProjSize, int* qoMaxSeqLength, int* kvMaxSeqLength, int* maxBatchSize, int* maxBeamSize);

// ---- fused operations (lib_cudnn_fused.cc) -------------------------------------------------
Status SetFusedOpsConst(OpContext& x, LibObject* pack, cudnnFusedOpsConstParamLabel_t label, uint64_t value);
Status GetFusedOpsConst(OpContext& x, LibObject* pack, cudnnFusedOpsConstParamLabel_t label, uint64_t filled, uint64_t* value,
                        int* is_null);
Status SetFusedOpsVariant(OpContext& x, LibObject* pack, cudnnFusedOpsVariantParamLabel_t label, uint64_t value);
Status GetFusedOpsVariant(OpContext& x, LibObject* pack, cudnnFusedOpsVariantParamLabel_t label, uint64_t* value);
Status FusedOpsExecute(OpContext& x, LibObject* handle, LibObject* plan, LibObject* pack);

}  // namespace remora::worker::gen::cudnn

// cuDNN on the worker: the legacy API's extents, read from the library's own descriptors
// (lib_cudnn.h), the spatial transformer's dimensions the worker keeps, and the queries whose
// dropout descriptors go back to the client as its ids.
#include <algorithm>
#include <cstring>

#include "cudnn_api.h"
#include "cudnn_hooks.h"
#include "worker/calls/generated_call.h"
#include "worker/libs/lib_cudnn.h"

namespace remora::worker::gen::cudnn {
namespace {

constexpr int kMaxDims = 8;

// What the worker keeps of a spatial transformer (cuDNN has no query for it).
struct DnnSpatialTf : LibExtra {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int> dims;
};

uint64_t Product(const int* d, int n) {
  uint64_t p = 1;
  for (int i = 0; i < n; i++) p *= d[i] > 0 ? static_cast<uint64_t>(d[i]) : 0;
  return p;
}

// The tensor's dimensions as the library holds them (empty if it cannot say).
std::vector<int> TensorDims(OpContext& x, const LibObject* t, cudnnDataType_t* type = nullptr) {
  if (t == nullptr) return {};
  int dims[kMaxDims] = {}, strides[kMaxDims] = {}, n = 0;
  cudnnDataType_t ty{};
  if (x.Library<Api>().cudnnGetTensorNdDescriptor(t->As<cudnnTensorDescriptor_t>(), kMaxDims, &ty, &n, dims, strides) !=
      CUDNN_STATUS_SUCCESS)
    return {};
  if (type != nullptr) *type = ty;
  return std::vector<int>(dims, dims + std::clamp(n, 0, kMaxDims));
}

struct RnnData {
  cudnnDataType_t type{};
  int max_seq = 0, batch = 0, vector = 0;
};
bool ReadRnnData(OpContext& x, const LibObject* d, RnnData* out) {
  if (d == nullptr) return false;
  cudnnRNNDataLayout_t layout{};
  return x.Library<Api>().cudnnGetRNNDataDescriptor(d->As<cudnnRNNDataDescriptor_t>(), &out->type, &layout, &out->max_seq,
                                                     &out->batch, &out->vector, 0, nullptr, nullptr) == CUDNN_STATUS_SUCCESS;
}

struct Attn {
  int qo_max = 0, kv_max = 0, batch = 0, beam = 0;
};
bool ReadAttn(OpContext& x, const LibObject* d, Attn* a, cudnnDropoutDescriptor_t* drop = nullptr, cudnnDropoutDescriptor_t* post = nullptr) {
  if (d == nullptr) return false;
  unsigned mode = 0;
  int heads = 0, qs = 0, ks = 0, vs = 0, qp = 0, kp = 0, vp = 0, op = 0;
  double scaler = 0;
  cudnnDataType_t type{}, prec{};
  cudnnMathType_t math{};
  cudnnDropoutDescriptor_t d1 = nullptr, d2 = nullptr;
  if (x.Library<Api>().cudnnGetAttnDescriptor(d->As<cudnnAttnDescriptor_t>(), &mode, &heads, &scaler, &type, &prec, &math, &d1, &d2, &qs, &ks,
                                              &vs, &qp, &kp, &vp, &op, &a->qo_max, &a->kv_max, &a->batch, &a->beam) != CUDNN_STATUS_SUCCESS)
    return false;
  if (drop) *drop = d1;
  if (post) *post = d2;
  return true;
}

// The session's id of the library's object `bits` (a descriptor a query returned), or 0.
uint64_t IdOf(OpContext& x, uint64_t bits) {
  if (bits == 0) return 0;
  uint64_t id = 0;
  x.executor().session().lib_objects().ForEach([&](LibObject& o) {
    if (o.bits == bits && o.library == Domain::kCudnn) id = o.id;
  });
  return id;
}

template <typename T>
T AsId(OpContext& x, T handle) {
  return reinterpret_cast<T>(static_cast<uintptr_t>(IdOf(x, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle)))));
}

uint64_t Elem(cudnnDataType_t t) {
  size_t n = api::dnn::DataTypeBytes(t);
  return n == 0 ? 1 : n;
}

}  // namespace

uint64_t RnnDataBytes(OpContext& x, const LibObject* d) {
  RnnData r;
  if (!ReadRnnData(x, d, &r)) return 0;
  return Product(&r.max_seq, 1) * Product(&r.batch, 1) * Product(&r.vector, 1) * Elem(r.type);
}

uint64_t RnnBatchBytes(OpContext& x, const LibObject* d) {
  RnnData r;
  return ReadRnnData(x, d, &r) ? Product(&r.batch, 1) * sizeof(int32_t) : 0;
}

uint64_t RnnPadBytesW(OpContext& x, const LibObject* d) {
  RnnData r;
  return ReadRnnData(x, d, &r) ? api::dnn::DataTypeBytes(r.type) : 0;
}

uint64_t SeqDataBytes(OpContext& x, const LibObject* d) {
  if (d == nullptr) return 0;
  cudnnDataType_t type{};
  int n = 0, dims[CUDNN_SEQDATA_DIM_COUNT] = {};
  cudnnSeqDataAxis_t axes[CUDNN_SEQDATA_DIM_COUNT] = {};
  size_t seqs = 0;
  if (x.Library<Api>().cudnnGetSeqDataDescriptor(d->As<cudnnSeqDataDescriptor_t>(), &type, &n, CUDNN_SEQDATA_DIM_COUNT, dims, axes, &seqs,
                                                 0, nullptr, nullptr) != CUDNN_STATUS_SUCCESS)
    return 0;
  return Product(dims, std::clamp(n, 0, static_cast<int>(CUDNN_SEQDATA_DIM_COUNT))) * Elem(type);
}

uint64_t SeqPadBytesW(OpContext& x, const LibObject* d) {
  if (d == nullptr) return 0;
  cudnnDataType_t type{};
  int n = 0;
  size_t seqs = 0;
  if (x.Library<Api>().cudnnGetSeqDataDescriptor(d->As<cudnnSeqDataDescriptor_t>(), &type, &n, 0, nullptr, nullptr, &seqs, 0, nullptr,
                                                 nullptr) != CUDNN_STATUS_SUCCESS)
    return 0;
  return api::dnn::DataTypeBytes(type);
}

uint64_t AttnWindowW(OpContext& x, const LibObject* d) {
  Attn a;
  return ReadAttn(x, d, &a) ? Product(&a.qo_max, 1) : 0;
}

uint64_t AttnSeqBytes(OpContext& x, const LibObject* d) {
  Attn a;
  return ReadAttn(x, d, &a) ? Product(&a.batch, 1) * std::max<uint64_t>(1, Product(&a.beam, 1)) * sizeof(int) : 0;
}

uint64_t CtcBatchW(OpContext& x, const LibObject* probs) {
  std::vector<int> d = TensorDims(x, probs);
  return d.size() >= 2 ? Product(&d[1], 1) : 0;
}

uint64_t CtcCostBytes(OpContext& x, const LibObject* probs) { return CtcBatchW(x, probs) * sizeof(float); }

uint64_t CtcLabelBytes(OpContext& x, const LibObject* probs, const LibObject* ctc) {
  if (ctc == nullptr) return 0;
  cudnnDataType_t type{};
  cudnnLossNormalizationMode_t norm{};
  cudnnCTCGradMode_t grad{};
  int max_label = 0;
  if (x.Library<Api>().cudnnGetCTCLossDescriptor_v9(ctc->As<cudnnCTCLossDescriptor_t>(), &type, &norm, &grad, &max_label) !=
      CUDNN_STATUS_SUCCESS)
    return 0;
  return CtcBatchW(x, probs) * Product(&max_label, 1) * sizeof(int);
}

uint64_t CtcLabelsW(OpContext& x, const LibObject* probs, const std::vector<int>& lengths) {
  uint64_t batch = std::min<uint64_t>(CtcBatchW(x, probs), lengths.size()), sum = 0;
  for (uint64_t i = 0; i < batch; i++) sum += lengths[i] > 0 ? static_cast<uint64_t>(lengths[i]) : 0;
  return sum;
}

uint64_t ColumnBytes(OpContext& x, const LibObject* xDesc, const LibObject* wDesc, const LibObject* conv) {
  cudnnDataType_t type{};
  std::vector<int> in = TensorDims(x, xDesc, &type);
  if (in.size() < 3 || wDesc == nullptr || conv == nullptr) return 0;
  int fdims[kMaxDims] = {}, fn = 0, out[kMaxDims] = {};
  cudnnDataType_t ft{};
  cudnnTensorFormat_t format{};
  Api& api = x.Library<Api>();
  if (api.cudnnGetFilterNdDescriptor(wDesc->As<cudnnFilterDescriptor_t>(), kMaxDims, &ft, &format, &fn, fdims) != CUDNN_STATUS_SUCCESS ||
      api.cudnnGetConvolutionNdForwardOutputDim(conv->As<cudnnConvolutionDescriptor_t>(), xDesc->As<cudnnTensorDescriptor_t>(),
                                                 wDesc->As<cudnnFilterDescriptor_t>(), static_cast<int>(in.size()), out) != CUDNN_STATUS_SUCCESS)
    return 0;
  // One column per output position and image: C x (filter's spatial extent) values each.
  const int spatial = static_cast<int>(in.size()) - 2;
  return Product(&in[0], 1) * Product(&in[1], 1) * Product(fdims + 2, std::min(spatial, std::max(fn - 2, 0))) *
         Product(out + 2, spatial) * Elem(type);
}

uint64_t FilterBiasBytes(OpContext& x, const LibObject* filter) {
  if (filter == nullptr) return 0;
  int dims[kMaxDims] = {}, n = 0;
  cudnnDataType_t type{};
  cudnnTensorFormat_t format{};
  if (x.Library<Api>().cudnnGetFilterNdDescriptor(filter->As<cudnnFilterDescriptor_t>(), kMaxDims, &type, &format, &n, dims) !=
      CUDNN_STATUS_SUCCESS || n < 1)
    return 0;
  return Product(dims, 1) * Elem(type);
}

Status SpatialTfSet(OpContext&, LibObject* st, cudnnSamplerType_t, cudnnDataType_t type, int nbDims, const int* dims) {
  if (st == nullptr) return Status::Ok();
  auto& e = st->Extra<DnnSpatialTf>();
  e.type = type;
  e.dims.assign(dims, dims + std::clamp(nbDims, 0, kMaxDims));
  return Status::Ok();
}

uint64_t ThetaBytes(const LibObject* st) {
  auto* e = st == nullptr ? nullptr : dynamic_cast<const DnnSpatialTf*>(st->extra.get());
  if (e == nullptr || e->dims.empty()) return 0;
  return Product(e->dims.data(), 1) * 2 * 3 * Elem(e->type);
}

uint64_t GridBytes(const LibObject* st) {
  auto* e = st == nullptr ? nullptr : dynamic_cast<const DnnSpatialTf*>(st->extra.get());
  if (e == nullptr || e->dims.size() < 4) return 0;
  return Product(e->dims.data(), 1) * Product(e->dims.data() + 2, static_cast<int>(e->dims.size()) - 2) * 2 * Elem(e->type);
}

Status GetRNNDescriptorV8(OpContext& x, LibObject* rnn, cudnnRNNAlgo_t* algo, cudnnRNNMode_t* cellMode, cudnnRNNBiasMode_t* biasMode,
                          cudnnDirectionMode_t* dirMode, cudnnRNNInputMode_t* inputMode, cudnnDataType_t* dataType, cudnnDataType_t* mathPrec,
                          cudnnMathType_t* mathType, int32_t* inputSize, int32_t* hiddenSize, int32_t* projSize, int32_t* numLayers,
                          cudnnDropoutDescriptor_t* dropoutDesc, uint32_t* auxFlags) {
  cudnnStatus_t r = x.Library<Api>().cudnnGetRNNDescriptor_v8(rnn->As<cudnnRNNDescriptor_t>(), algo, cellMode, biasMode, dirMode, inputMode,
                                                             dataType, mathPrec, mathType, inputSize, hiddenSize, projSize, numLayers,
                                                             dropoutDesc, auxFlags);
  if (r != CUDNN_STATUS_SUCCESS) return x.LibraryError(Domain::kCudnn, r, Api::StatusName(r), "cudnnGetRNNDescriptor_v8");
  *dropoutDesc = AsId(x, *dropoutDesc);
  return Status::Ok();
}

Status GetAttnDescriptor(OpContext& x, LibObject* attn, unsigned* attnMode, int* nHeads, double* smScaler, cudnnDataType_t* dataType,
                         cudnnDataType_t* computePrec, cudnnMathType_t* mathType, cudnnDropoutDescriptor_t* attnDropoutDesc,
                         cudnnDropoutDescriptor_t* postDropoutDesc, int* qSize, int* kSize, int* vSize, int* qProjSize, int* kProjSize,
                         int* vProjSize, int* oProjSize, int* qoMaxSeqLength, int* kvMaxSeqLength, int* maxBatchSize, int* maxBeamSize) {
  cudnnStatus_t r = x.Library<Api>().cudnnGetAttnDescriptor(attn->As<cudnnAttnDescriptor_t>(), attnMode, nHeads, smScaler, dataType,
                                                           computePrec, mathType, attnDropoutDesc, postDropoutDesc, qSize, kSize, vSize,
                                                           qProjSize, kProjSize, vProjSize, oProjSize, qoMaxSeqLength, kvMaxSeqLength,
                                                           maxBatchSize, maxBeamSize);
  if (r != CUDNN_STATUS_SUCCESS) return x.LibraryError(Domain::kCudnn, r, Api::StatusName(r), "cudnnGetAttnDescriptor");
  *attnDropoutDesc = AsId(x, *attnDropoutDesc);
  *postDropoutDesc = AsId(x, *postDropoutDesc);
  return Status::Ok();
}

}  // namespace remora::worker::gen::cudnn

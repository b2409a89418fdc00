// cuDNN in the client: what protocol/api/cudnn.api's expressions and mirror hooks need before
// a call is sent - the bytes of a legacy operation's alpha and beta (a double for a double
// tensor, else a float: the data type each tensor or filter descriptor was last set to,
// LibObjectView::aux[0]) - and what cudnnGetStream answers without a round trip (aux[1] of a
// handle). Run after the setter went out. Thread-safe.
#pragma once

#include <cudnn.h>

#include <cstddef>

namespace remora::gen::cudnn {

// Bytes of one alpha or beta for an output described by `desc`.
size_t ScalarBytes(cudnnTensorDescriptor_t desc);
size_t ScalarBytes(cudnnFilterDescriptor_t desc);

void MirrorStream(cudnnHandle_t handle, cudaStream_t stream);
void MirrorTensor4d(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format, cudnnDataType_t type, int n, int c, int h, int w);
void MirrorTensor4dEx(cudnnTensorDescriptor_t desc, cudnnDataType_t type, int n, int c, int h, int w, int ns, int cs, int hs, int ws);
void MirrorTensorNd(cudnnTensorDescriptor_t desc, cudnnDataType_t type, int dims, const int* dim, const int* stride);
void MirrorTensorNdEx(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format, cudnnDataType_t type, int dims, const int* dim);
void MirrorFilter4d(cudnnFilterDescriptor_t desc, cudnnDataType_t type, cudnnTensorFormat_t format, int k, int c, int h, int w);
// A derived batch-normalization descriptor holds floats, or doubles for double data.
void MirrorDeriveBN(cudnnTensorDescriptor_t derived, cudnnTensorDescriptor_t x, cudnnBatchNormMode_t mode);
void MirrorFilterNd(cudnnFilterDescriptor_t desc, cudnnDataType_t type, cudnnTensorFormat_t format, int dims, const int* dim);

// Bytes of one element of the tensor's own type (cudnnSetTensor's value: a half for half data).
size_t ValueBytes(cudnnTensorDescriptor_t desc);
// A tensor's second dimension as last set (CTC loss: the batch of a T x N x A tensor), and the
// sum of a CTC loss's label lengths over that batch (0 for NULL lengths).
int CtcBatch(cudnnTensorDescriptor_t probs);
int64_t CtcLabels(const int* lengths, cudnnTensorDescriptor_t probs);
void MirrorDeriveNorm(cudnnTensorDescriptor_t scaleBias, cudnnTensorDescriptor_t meanVar, cudnnTensorDescriptor_t x, cudnnNormMode_t mode,
                      int groupCnt);
// RNN and sequence data: the element type (a padding value's bytes); attention: the window
// arrays' length (qoMaxSeqLength).
void MirrorRNNData(cudnnRNNDataDescriptor_t desc, cudnnDataType_t type, cudnnRNNDataLayout_t layout, int maxSeqLength, int batchSize,
                   int vectorSize, const int* seqLengthArray, void* paddingFill);
size_t RnnPadBytes(cudnnRNNDataDescriptor_t desc);
void MirrorSeqData(cudnnSeqDataDescriptor_t desc, cudnnDataType_t type, int nbDims, const int* dimA, const cudnnSeqDataAxis_t* axes,
                   size_t seqLengthArraySize, const int* seqLengthArray, void* paddingFill);
size_t SeqPadBytes(cudnnSeqDataDescriptor_t desc);
void MirrorAttn(cudnnAttnDescriptor_t desc, unsigned attnMode, int nHeads, double smScaler, cudnnDataType_t dataType,
                cudnnDataType_t computePrec, cudnnMathType_t mathType, cudnnDropoutDescriptor_t attnDropoutDesc,
                cudnnDropoutDescriptor_t postDropoutDesc, int qSize, int kSize, int vSize, int qProjSize, int kProjSize, int vProjSize,
                int oProjSize, int qoMaxSeqLength, int kvMaxSeqLength, int maxBatchSize, int maxBeamSize);
int AttnWindow(cudnnAttnDescriptor_t desc);

}  // namespace remora::gen::cudnn

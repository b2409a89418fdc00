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

}  // namespace remora::gen::cudnn

// cuSOLVER in the client: the mirror hooks protocol/api/cusolver.api names, which keep a dense
// handle's stream (LibObjectView::aux[0]) for cusolverDnGetStream and cusolverSpGetStream, an
// IRS params object's main precision (aux[0]), the element type of the IRS solvers' operands,
// and the host LU's sizes. Thread-safe.
#pragma once

#include <cusolverDn.h>
#include <cusolverSp.h>
#include <cusolverSp_LOWLEVEL_PREVIEW.h>
#include <cusolverRf.h>

#include <cstddef>
#include <cstdint>

namespace remora::gen::cusolver {

void MirrorStream(cusolverDnHandle_t handle, cudaStream_t stream);
void MirrorIrsPrecision(cusolverDnIRSParams_t params, cusolverPrecType_t main);
void MirrorIrsPrecisions(cusolverDnIRSParams_t params, cusolverPrecType_t main, cusolverPrecType_t lowest);
// Bytes of one element of the params object's main precision (0 while unset).
size_t IrsBytes(cusolverDnIRSParams_t params);
// A sparse handle's stream (aux 0); the host LU's rows and the nnz of its L and U factors
// (aux 0-2 of its info object), the sizes of cusolverSp*csrluExtractHost's outputs.
void MirrorSpStream(cusolverSpHandle_t handle, cudaStream_t stream);
void MirrorLuRows(cusolverSpHandle_t handle, int n, int nnz, const cusparseMatDescr_t descr, const int* rows, const int* cols,
                  csrluInfoHost_t info);
void MirrorLuNnz(cusolverSpHandle_t handle, int* nnz_l, int* nnz_u, csrluInfoHost_t info);
int64_t LuRows(csrluInfoHost_t info);
int64_t LuNnzL(csrluInfoHost_t info);
int64_t LuNnzU(csrluInfoHost_t info);
// The batched refactorization's batch (aux 1 of its handle), from its setup.
int64_t RfBatch(cusolverRfHandle_t handle);

}  // namespace remora::gen::cusolver

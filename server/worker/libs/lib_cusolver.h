// cuSOLVER on the worker: the hooks protocol/api/cusolver.api names. What the library has no
// getter for is kept with the object by the call that set it: an IRS params object's main
// precision (the element type of the IRS solvers' operands), a sparse info object's workspace
// size (what its *BufferInfo* call answered), the host LU's and cusolverRf's sizes. Used by
// the executor's single thread.
#pragma once

#include <cusolverDn.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::cusolver {

// Bytes of one element of the IRS params object's main precision (0 while unset).
size_t IrsBytes(const LibObject* params);
Status IrsPrecisionSet(OpContext& x, LibObject* params, cusolverPrecType_t main);
Status IrsPrecisionsSet(OpContext& x, LibObject* params, cusolverPrecType_t main, cusolverPrecType_t lowest);

// The workspace a cuSOLVER sparse info object's last *BufferInfo* call answered (the phases
// after it take the workspace without its size): kept with the object, 0 before.
uint64_t WorkHint(const LibObject* info);
void SetWorkHint(LibObject* info, uint64_t bytes);
// wafter hook of the *BufferInfo* calls: their last library object is the info object, their
// last size_t* the workspace's bytes.
template <typename... A>
Status KeepWorkHint(OpContext&, A... args) {
  LibObject* info = nullptr;
  const size_t* work = nullptr;
  auto one = [&](auto a) {
    if constexpr (std::is_same_v<decltype(a), LibObject*>) info = a;
    else if constexpr (std::is_same_v<decltype(a), size_t*>) work = a;
  };
  (one(args), ...);
  if (info != nullptr && work != nullptr) SetWorkHint(info, *work);
  return Status::Ok();
}
// The host LU's sizes, as its analysis (rows) and cusolverSpXcsrluNnzHost (nnz of L and U)
// answered them, for cusolverSp*csrluExtractHost's outputs.
Status KeepLuRows(OpContext& x, LibObject* handle, int n, int nnz, LibObject* descr, const int* rows, const int* cols, LibObject* info);
Status KeepLuNnz(OpContext& x, LibObject* handle, int* nnz_l, int* nnz_u, LibObject* info);
int64_t LuRows(const LibObject* info);
int64_t LuNnzL(const LibObject* info);
int64_t LuNnzU(const LibObject* info);
// cusolverRf's order n, from its setup.
void SetRfRows(LibObject* handle, int64_t n);
int64_t RfRows(const LibObject* handle);
// The batched refactorization: its batch (kept by its setup), a device pointer of its host
// arrays checked at its start, and the setup from the values the client packed.
int64_t RfBatchW(const LibObject* handle);
Status RfDevicePointer(OpContext& x, double** p);
Status RfBatchSetupHost(OpContext& x, int batch, int n, int nnz_a, int* row_a, int* col_a, double* values_a, int nnz_l, int* row_l,
                        int* col_l, double* val_l, int nnz_u, int* row_u, int* col_u, double* val_u, int* p, int* q, LibObject* handle);
// The factors cusolverRfExtract*Host hands out in the library's host memory (part 0: M, 1: L,
// 2: U): their order and nnz, then a copy of their arrays; the library's copies are freed.
Status RfFactorSizes(OpContext& x, LibObject* handle, int part, int* sizes);
Status RfFactors(OpContext& x, LibObject* handle, int part, int n, int nnz, int* row_ptr, int* col_ind, double* val);
// A copy of an IRS infos object's residual history, `rows` rows of two doubles.
Status IrsResidualHistory(OpContext& x, LibObject* infos, int rows, double* history);
template <typename... A>
Status KeepRfRows(OpContext&, int n, A... args) {
  LibObject* handle = nullptr;
  auto one = [&](auto a) {
    if constexpr (std::is_same_v<decltype(a), LibObject*>) handle = a;
  };
  (one(args), ...);
  if (handle != nullptr) SetRfRows(handle, n);
  return Status::Ok();
}

}  // namespace remora::worker::gen::cusolver

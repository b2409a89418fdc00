#include "worker/libs/lib_cusolver.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "cusolver_api.h"
#include "cusolver_hooks.h"
#include "worker/calls/generated_call.h"

namespace remora::worker::gen::cusolver {
namespace {

// What the worker keeps with a cuSOLVER object that the library has no getter for.
struct Kept final : LibExtra {
  cusolverPrecType_t main{};  // an IRS params object's main precision
  uint64_t work = 0;          // a sparse info object's workspace, as *BufferInfo* answered
  int64_t rows = 0, nnz_l = 0, nnz_u = 0;  // the host LU's and cusolverRf's sizes
  int64_t batch = 0;                        // the batched refactorization's
};

const Kept* Of(const LibObject* o) { return o == nullptr ? nullptr : dynamic_cast<const Kept*>(o->extra.get()); }

}  // namespace

size_t IrsBytes(const LibObject* params) {
  const Kept* k = Of(params);
  return k == nullptr ? 0 : api::solver::PrecBytes(k->main);
}

Status IrsPrecisionSet(OpContext&, LibObject* params, cusolverPrecType_t main) {
  params->Extra<Kept>().main = main;
  return Status::Ok();
}

Status IrsPrecisionsSet(OpContext& x, LibObject* params, cusolverPrecType_t main, cusolverPrecType_t) {
  return IrsPrecisionSet(x, params, main);
}

uint64_t WorkHint(const LibObject* info) {
  const Kept* k = Of(info);
  return k == nullptr ? 0 : k->work;
}

void SetWorkHint(LibObject* info, uint64_t bytes) { info->Extra<Kept>().work = bytes; }

Status KeepLuRows(OpContext&, LibObject*, int n, int, LibObject*, const int*, const int*, LibObject* info) {
  if (info != nullptr) info->Extra<Kept>().rows = n;
  return Status::Ok();
}

Status KeepLuNnz(OpContext&, LibObject*, int* nnz_l, int* nnz_u, LibObject* info) {
  if (info == nullptr) return Status::Ok();
  Kept& k = info->Extra<Kept>();
  k.nnz_l = *nnz_l;
  k.nnz_u = *nnz_u;
  return Status::Ok();
}

int64_t LuRows(const LibObject* info) { return Of(info) ? Of(info)->rows : 0; }
int64_t LuNnzL(const LibObject* info) { return Of(info) ? Of(info)->nnz_l : 0; }
int64_t LuNnzU(const LibObject* info) { return Of(info) ? Of(info)->nnz_u : 0; }

void SetRfRows(LibObject* handle, int64_t n) { handle->Extra<Kept>().rows = n; }
int64_t RfRows(const LibObject* handle) { return Of(handle) ? Of(handle)->rows : 0; }

int64_t RfBatchW(const LibObject* handle) { return Of(handle) ? Of(handle)->batch : 0; }

Status RfDevicePointer(OpContext& x, double** p) {
  uint64_t checked = 0;
  return x.DevPtr(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*p)), 1, &checked);
}

Status RfBatchSetupHost(OpContext& x, int batch, int n, int nnz_a, int* row_a, int* col_a, double* values_a, int nnz_l, int* row_l,
                        int* col_l, double* val_l, int nnz_u, int* row_u, int* col_u, double* val_u, int* p, int* q, LibObject* handle) {
  if (batch < 0 || nnz_a < 0) return Status(Domain::kCusolver, CUSOLVER_STATUS_INVALID_VALUE, "a negative batch or nnz");
  std::vector<double*> values(static_cast<size_t>(batch));
  for (int k = 0; k < batch; k++) values[k] = values_a + static_cast<size_t>(k) * static_cast<size_t>(nnz_a);
  cusolverStatus_t r = x.Library<Api>().cusolverRfBatchSetupHost(batch, n, nnz_a, row_a, col_a, values.data(), nnz_l, row_l, col_l, val_l,
                                                                 nnz_u, row_u, col_u, val_u, p, q, handle->As<cusolverRfHandle_t>());
  if (r != CUSOLVER_STATUS_SUCCESS) return x.LibraryError(Domain::kCusolver, r, Api::StatusName(r), "cusolverRfBatchSetupHost");
  Kept& k = handle->Extra<Kept>();
  k.rows = n;
  k.batch = batch;
  return Status::Ok();
}

namespace {

// One part of the refactorization's factors in the library's host memory, freed when it goes.
struct HostFactors {
  int nnz[2] = {0, 0};
  int* row[2] = {nullptr, nullptr};
  int* col[2] = {nullptr, nullptr};
  double* val[2] = {nullptr, nullptr};
  HostFactors() = default;
  HostFactors(const HostFactors&) = delete;
  HostFactors& operator=(const HostFactors&) = delete;
  ~HostFactors() {
    for (int i = 0; i < 2; i++) {
      std::free(row[i]);
      std::free(col[i]);
      std::free(val[i]);
    }
  }
};

Status Extract(OpContext& x, LibObject* handle, int part, HostFactors* f, int* which) {
  if (part < 0 || part > 2) return Status(Domain::kCusolver, CUSOLVER_STATUS_INVALID_VALUE, "an unknown part of the factors");
  auto h = handle->As<cusolverRfHandle_t>();
  cusolverStatus_t r;
  const char* name;
  if (part == 0) {
    name = "cusolverRfExtractBundledFactorsHost";
    r = x.Library<Api>().cusolverRfExtractBundledFactorsHost(h, &f->nnz[0], &f->row[0], &f->col[0], &f->val[0]);
  } else {
    name = "cusolverRfExtractSplitFactorsHost";
    r = x.Library<Api>().cusolverRfExtractSplitFactorsHost(h, &f->nnz[0], &f->row[0], &f->col[0], &f->val[0], &f->nnz[1], &f->row[1],
                                                           &f->col[1], &f->val[1]);
  }
  if (r != CUSOLVER_STATUS_SUCCESS) return x.LibraryError(Domain::kCusolver, r, Api::StatusName(r), name);
  *which = part == 2 ? 1 : 0;
  return Status::Ok();
}

}  // namespace

Status RfFactorSizes(OpContext& x, LibObject* handle, int part, int* sizes) {
  HostFactors f;
  int w = 0;
  RETURN_IF_ERROR(Extract(x, handle, part, &f, &w));
  sizes[0] = static_cast<int>(RfRows(handle));
  sizes[1] = f.nnz[w];
  return Status::Ok();
}

Status RfFactors(OpContext& x, LibObject* handle, int part, int n, int nnz, int* row_ptr, int* col_ind, double* val) {
  HostFactors f;
  int w = 0;
  RETURN_IF_ERROR(Extract(x, handle, part, &f, &w));
  if (n != RfRows(handle) || nnz != f.nnz[w] || (nnz > 0 && (f.col[w] == nullptr || f.val[w] == nullptr)) || f.row[w] == nullptr)
    return Status(Domain::kCusolver, CUSOLVER_STATUS_INVALID_VALUE, "the factors changed since their sizes were asked");
  std::memcpy(row_ptr, f.row[w], (static_cast<size_t>(n) + 1) * sizeof(int));
  if (nnz > 0) {
    std::memcpy(col_ind, f.col[w], static_cast<size_t>(nnz) * sizeof(int));
    std::memcpy(val, f.val[w], static_cast<size_t>(nnz) * sizeof(double));
  }
  return Status::Ok();
}

Status IrsResidualHistory(OpContext& x, LibObject* infos, int rows, double* history) {
  auto i = infos->As<cusolverDnIRSInfos_t>();
  cusolver_int_t max_iters = 0;
  void* p = nullptr;
  cusolverStatus_t r = x.Library<Api>().cusolverDnIRSInfosGetMaxIters(i, &max_iters);
  if (r == CUSOLVER_STATUS_SUCCESS) r = x.Library<Api>().cusolverDnIRSInfosGetResidualHistory(i, &p);
  if (r != CUSOLVER_STATUS_SUCCESS) return x.LibraryError(Domain::kCusolver, r, Api::StatusName(r), "cusolverDnIRSInfosGetResidualHistory");
  if (rows != max_iters + 1) return Status(Domain::kCusolver, CUSOLVER_STATUS_INVALID_VALUE, "the residual history changed size");
  if (p == nullptr) return Status(Domain::kCusolver, CUSOLVER_STATUS_INVALID_VALUE, "no residual history was requested");
  if (rows > 0) std::memcpy(history, p, static_cast<size_t>(rows) * 2 * sizeof(double));
  return Status::Ok();
}

}  // namespace remora::worker::gen::cusolver

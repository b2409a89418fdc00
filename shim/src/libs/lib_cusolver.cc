// cuSOLVER entry points written by hand (protocol/api/cusolver.api: local) and the mirror hooks
// (lib_cusolver.h).
#include "lib_cusolver.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cusolver_client.h"
#include "cusolver_hooks.h"
#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::cusolver {

void MirrorStream(cusolverDnHandle_t h, cudaStream_t s) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCusolverDnHandle, h), 0,
                                            static_cast<int64_t>(reinterpret_cast<uintptr_t>(s)));
}

void MirrorIrsPrecision(cusolverDnIRSParams_t params, cusolverPrecType_t main) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCusolverIrsParams, params), 0, main);
}

void MirrorIrsPrecisions(cusolverDnIRSParams_t params, cusolverPrecType_t main, cusolverPrecType_t) { MirrorIrsPrecision(params, main); }

size_t IrsBytes(cusolverDnIRSParams_t params) {
  auto v = shim::Process::Get().lib_objects().Find(shim::HandleBits(HandleKind::kCusolverIrsParams, params));
  return v ? api::solver::PrecBytes(v->aux[0]) : 0;
}

void MirrorSpStream(cusolverSpHandle_t h, cudaStream_t s) {
  shim::Process::Get().lib_objects().SetAux(shim::HandleBits(HandleKind::kCusolverSpHandle, h), 0,
                                            static_cast<int64_t>(reinterpret_cast<uintptr_t>(s)));
}

namespace {
uint64_t LuId(csrluInfoHost_t info) { return shim::HandleBits(HandleKind::kCusolverCsrluInfoHost, info); }
int64_t LuAux(csrluInfoHost_t info, size_t slot) {
  auto v = shim::Process::Get().lib_objects().Find(LuId(info));
  return v ? v->aux[slot] : 0;
}
}  // namespace

void MirrorLuRows(cusolverSpHandle_t, int n, int, const cusparseMatDescr_t, const int*, const int*, csrluInfoHost_t info) {
  shim::Process::Get().lib_objects().SetAux(LuId(info), 0, n);
}

void MirrorLuNnz(cusolverSpHandle_t, int* nnz_l, int* nnz_u, csrluInfoHost_t info) {
  shim::Process::Get().lib_objects().SetAux(LuId(info), 1, *nnz_l);
  shim::Process::Get().lib_objects().SetAux(LuId(info), 2, *nnz_u);
}

int64_t LuRows(csrluInfoHost_t info) { return LuAux(info, 0); }
int64_t LuNnzL(csrluInfoHost_t info) { return LuAux(info, 1); }
int64_t LuNnzU(csrluInfoHost_t info) { return LuAux(info, 2); }

int64_t RfBatch(cusolverRfHandle_t handle) {
  auto v = shim::Process::Get().lib_objects().Find(shim::HandleBits(HandleKind::kCusolverRfHandle, handle));
  return v ? v->aux[1] : 0;
}

}  // namespace remora::gen::cusolver

extern "C" cusolverStatus_t cusolverDnGetStream(cusolverDnHandle_t handle, cudaStream_t* stream) {
  auto v = remora::shim::Process::Get().lib_objects().Get(
      remora::shim::HandleBits(remora::HandleKind::kCusolverDnHandle, handle), remora::HandleKind::kCusolverDnHandle);
  if (!v.ok()) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
  *stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(v->aux[0]));
  return CUSOLVER_STATUS_SUCCESS;
}

extern "C" cusolverStatus_t cusolverSpGetStream(cusolverSpHandle_t handle, cudaStream_t* stream) {
  auto v = remora::shim::Process::Get().lib_objects().Get(
      remora::shim::HandleBits(remora::HandleKind::kCusolverSpHandle, handle), remora::HandleKind::kCusolverSpHandle);
  if (!v.ok()) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
  *stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(v->aux[0]));
  return CUSOLVER_STATUS_SUCCESS;
}

namespace {

cusolverStatus_t Finish(const remora::Status& st, const char* name) {
  constexpr remora::shim::LibCodes kCodes{CUSOLVER_STATUS_SUCCESS,       CUSOLVER_STATUS_INVALID_VALUE, CUSOLVER_STATUS_NOT_INITIALIZED,
                                          CUSOLVER_STATUS_NOT_SUPPORTED, CUSOLVER_STATUS_ALLOC_FAILED,  CUSOLVER_STATUS_INTERNAL_ERROR};
  return static_cast<cusolverStatus_t>(remora::shim::FinishLib(remora::Domain::kCusolver, kCodes, st, name));
}

}  // namespace

// The batched refactorization's setup: the batch's values (a host array of host pointers) packed
// into one array for the wire; the batch kept with the handle (RfBatch).
extern "C" cusolverStatus_t cusolverRfBatchSetupHost(int batch, int n, int nnzA, int* h_csrRowPtrA, int* h_csrColIndA,
                                                     double** h_csrValA_array, int nnzL, int* h_csrRowPtrL, int* h_csrColIndL,
                                                     double* h_csrValL, int nnzU, int* h_csrRowPtrU, int* h_csrColIndU, double* h_csrValU,
                                                     int* h_P, int* h_Q, cusolverRfHandle_t handle) {
  if (batch < 0 || nnzA < 0 || (batch > 0 && h_csrValA_array == nullptr)) return CUSOLVER_STATUS_INVALID_VALUE;
  std::vector<double> packed(static_cast<size_t>(batch) * static_cast<size_t>(nnzA));
  for (int k = 0; k < batch; k++) {
    if (h_csrValA_array[k] == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
    std::copy(h_csrValA_array[k], h_csrValA_array[k] + nnzA, packed.begin() + static_cast<ptrdiff_t>(k) * nnzA);
  }
  const char* name = "cusolverRfBatchSetupHost";
  remora::Status st = remora::gen::cusolver::remoraRfBatchSetupHost(
      remora::shim::CallCtx{false, name}, batch, n, nnzA, h_csrRowPtrA, h_csrColIndA, packed.data(), nnzL, h_csrRowPtrL, h_csrColIndL,
      h_csrValL, nnzU, h_csrRowPtrU, h_csrColIndU, h_csrValU, h_P, h_Q, handle);
  if (!st.ok()) return Finish(st, name);
  remora::shim::Process::Get().lib_objects().SetAux(remora::shim::HandleBits(remora::HandleKind::kCusolverRfHandle, handle), 1, batch);
  return CUSOLVER_STATUS_SUCCESS;
}

namespace {

// One part of cusolverRf's factors (0: M, 1: L, 2: U) in host arrays the caller frees with free().
cusolverStatus_t HostFactors(cusolverRfHandle_t handle, int part, const char* name, int* nnz, int** row_ptr, int** col_ind, double** val) {
  if (nnz == nullptr || row_ptr == nullptr || col_ind == nullptr || val == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
  int sizes[2] = {0, 0};
  remora::Status st = remora::gen::cusolver::remoraRfFactorSizes(remora::shim::CallCtx{false, name}, handle, part, sizes);
  if (!st.ok()) return Finish(st, name);
  const int n = sizes[0], count = sizes[1];
  if (n < 0 || count < 0) return CUSOLVER_STATUS_INTERNAL_ERROR;
  auto* r = static_cast<int*>(std::malloc((static_cast<size_t>(n) + 1) * sizeof(int)));
  auto* c = static_cast<int*>(std::malloc(std::max<size_t>(1, static_cast<size_t>(count)) * sizeof(int)));
  auto* v = static_cast<double*>(std::malloc(std::max<size_t>(1, static_cast<size_t>(count)) * sizeof(double)));
  if (r == nullptr || c == nullptr || v == nullptr) {
    std::free(r);
    std::free(c);
    std::free(v);
    return CUSOLVER_STATUS_ALLOC_FAILED;
  }
  st = remora::gen::cusolver::remoraRfFactors(remora::shim::CallCtx{false, name}, handle, part, n, count, r, c, v);
  if (!st.ok()) {
    std::free(r);
    std::free(c);
    std::free(v);
    return Finish(st, name);
  }
  *nnz = count;
  *row_ptr = r;
  *col_ind = c;
  *val = v;
  return CUSOLVER_STATUS_SUCCESS;
}

}  // namespace

extern "C" cusolverStatus_t cusolverRfExtractBundledFactorsHost(cusolverRfHandle_t handle, int* h_nnzM, int** h_Mp, int** h_Mi,
                                                                double** h_Mx) {
  return HostFactors(handle, 0, "cusolverRfExtractBundledFactorsHost", h_nnzM, h_Mp, h_Mi, h_Mx);
}

extern "C" cusolverStatus_t cusolverRfExtractSplitFactorsHost(cusolverRfHandle_t handle, int* h_nnzL, int** h_csrRowPtrL,
                                                              int** h_csrColIndL, double** h_csrValL, int* h_nnzU, int** h_csrRowPtrU,
                                                              int** h_csrColIndU, double** h_csrValU) {
  const char* name = "cusolverRfExtractSplitFactorsHost";
  cusolverStatus_t r = HostFactors(handle, 1, name, h_nnzL, h_csrRowPtrL, h_csrColIndL, h_csrValL);
  if (r != CUSOLVER_STATUS_SUCCESS) return r;
  r = HostFactors(handle, 2, name, h_nnzU, h_csrRowPtrU, h_csrColIndU, h_csrValU);
  if (r != CUSOLVER_STATUS_SUCCESS) {
    std::free(*h_csrRowPtrL);
    std::free(*h_csrColIndL);
    std::free(*h_csrValL);
  }
  return r;
}

// The residual history, copied from the worker into a buffer kept per infos object (replaced by
// the next call for the same object; NVIDIA's lives until the object is destroyed).
extern "C" cusolverStatus_t cusolverDnIRSInfosGetResidualHistory(cusolverDnIRSInfos_t infos, void** residual_history) {
  const char* name = "cusolverDnIRSInfosGetResidualHistory";
  if (residual_history == nullptr) return CUSOLVER_STATUS_INVALID_VALUE;
  cusolver_int_t max_iters = 0;
  cusolverStatus_t r = cusolverDnIRSInfosGetMaxIters(infos, &max_iters);
  if (r != CUSOLVER_STATUS_SUCCESS) return r;
  if (max_iters < 0) return CUSOLVER_STATUS_INTERNAL_ERROR;
  auto kept = std::make_unique<double[]>((static_cast<size_t>(max_iters) + 1) * 2);
  remora::Status st =
      remora::gen::cusolver::remoraIrsResidualHistory(remora::shim::CallCtx{false, name}, infos, max_iters + 1, kept.get());
  if (!st.ok()) return Finish(st, name);
  static std::mutex mu;
  static std::map<cusolverDnIRSInfos_t, std::unique_ptr<double[]>> histories;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = histories[infos];
  slot = std::move(kept);
  *residual_history = slot.get();
  return CUSOLVER_STATUS_SUCCESS;
}

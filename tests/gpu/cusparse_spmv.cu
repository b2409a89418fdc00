// cuSPARSE's generic API against the CPU: a 9x7 CSR matrix (fp32, 32-bit indices) times a
// dense vector (SpMV, y = alpha A x + beta y, host scalars) and times a dense 7x4 matrix in
// column-major and row-major order (SpMM, C = alpha A B + beta C, the scalars in device memory
// under CUSPARSE_POINTER_MODE_DEVICE), external buffers from the *_bufferSize queries, on the
// application's stream. Under Remora, a descriptor whose values were freed is refused at the
// next SpMV before the library sees it.
// On Remora's host-emulated backend (CI) the same checks run against its emulation of these
// calls (server/worker/libs/host/host_lib_cusparse.cc).
#define GPU_TEST_NAME "cusparse_spmv"
#include <cusparse.h>

#include <cmath>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

namespace {

using gpu_test::fail;

constexpr int M = 9, K = 7, N = 4;

struct Csr {
  std::vector<int> offsets, columns;
  std::vector<float> values;
  std::vector<double> dense;  // M x K, row-major
};

Csr MakeCsr() {
  Csr c;
  c.dense.assign(M * K, 0.0);
  c.offsets.push_back(0);
  unsigned s = 7;
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < K; j++) {
      s = s * 1664525u + 1013904223u;
      if ((s >> 16) % 3 == 0 || i == j) {
        float v = static_cast<float>((s >> 8) % 2001) / 1000.0f - 1.0f;
        c.columns.push_back(j);
        c.values.push_back(v);
        c.dense[i * K + j] = v;
      }
    }
    c.offsets.push_back(static_cast<int>(c.columns.size()));
  }
  return c;
}

void Near(const char* what, double got, double want, int i) {
  if (std::fabs(got - want) > 1e-4 * (1 + std::fabs(want))) fail("%s: element %d is %g, expected %g", what, i, got, want);
}

}  // namespace

int main() {
  cusparseHandle_t h = nullptr;
  cusparseStatus_t created = cusparseCreate(&h);
  CB(created);
  int version = 0;
  CB(cusparseGetVersion(h, &version));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  CB(cusparseSetStream(h, stream));
  cudaStream_t got_stream = nullptr;
  CB(cusparseGetStream(h, &got_stream));
  if (got_stream != stream) fail("cusparseGetStream answered another stream");

  Csr csr = MakeCsr();
  const int nnz = static_cast<int>(csr.values.size());
  DeviceBuffer<int> d_off(csr.offsets), d_col(csr.columns);
  DeviceBuffer<float> d_val(csr.values);
  cusparseSpMatDescr_t a;
  CB(cusparseCreateCsr(&a, M, K, nnz, d_off.get(), d_col.get(), d_val.get(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));

  // SpMV with host scalars.
  std::vector<float> xv(K), yv(M);
  for (int j = 0; j < K; j++) xv[j] = 0.25f * static_cast<float>(j) - 0.5f;
  for (int i = 0; i < M; i++) yv[i] = static_cast<float>(i % 3);
  DeviceBuffer<float> dx(xv), dy(yv);
  cusparseDnVecDescr_t vx, vy;
  CB(cusparseCreateDnVec(&vx, K, dx.get(), CUDA_R_32F));
  CB(cusparseCreateDnVec(&vy, M, dy.get(), CUDA_R_32F));
  const float alpha = 1.5f, beta = -0.5f;
  size_t bytes = 0;
  CB(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, a, vx, &beta, vy, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT,
                             &bytes));
  DeviceBuffer<char> buf(bytes);
  CB(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, a, vx, &beta, vy, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, buf.get()));
  auto y = dy.Read();
  for (int i = 0; i < M; i++) {
    double want = beta * yv[i];
    for (int j = 0; j < K; j++) want += alpha * csr.dense[i * K + j] * xv[j];
    Near("SpMV", y[i], want, i);
  }

  // SpMM with the scalars in device memory, B and C in both orders.
  CB(cusparseSetPointerMode(h, CUSPARSE_POINTER_MODE_DEVICE));
  cusparsePointerMode_t mode;
  CB(cusparseGetPointerMode(h, &mode));
  if (mode != CUSPARSE_POINTER_MODE_DEVICE) fail("cusparseGetPointerMode answered %d", mode);
  DeviceBuffer<float> d_alpha(std::vector<float>{2.0f}), d_beta(std::vector<float>{0.0f});
  for (cusparseOrder_t order : {CUSPARSE_ORDER_COL, CUSPARSE_ORDER_ROW}) {
    const bool col = order == CUSPARSE_ORDER_COL;
    std::vector<float> bv(K * N);
    for (int i = 0; i < K * N; i++) bv[i] = static_cast<float>((i * 7) % 11) / 5.0f - 1.0f;
    auto B = [&](int r, int c) { return bv[col ? c * K + r : r * N + c]; };
    DeviceBuffer<float> db(bv), dc(M * N);
    cusparseDnMatDescr_t mb, mc;
    CB(cusparseCreateDnMat(&mb, K, N, col ? K : N, db.get(), CUDA_R_32F, order));
    CB(cusparseCreateDnMat(&mc, M, N, col ? M : N, dc.get(), CUDA_R_32F, order));
    CB(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, d_alpha.get(), a, mb,
                               d_beta.get(), mc, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
    DeviceBuffer<char> buf2(bytes);
    CB(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, d_alpha.get(), a, mb, d_beta.get(), mc,
                    CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, buf2.get()));
    auto c = dc.Read();
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double want = 0;
        for (int k = 0; k < K; k++) want += 2.0 * csr.dense[i * K + k] * B(k, j);
        Near(col ? "SpMM (column-major)" : "SpMM (row-major)", c[col ? j * M + i : i * N + j], want, i * N + j);
      }
    CB(cusparseDestroyDnMat(mb));
    CB(cusparseDestroyDnMat(mc));
  }
  CB(cusparseSetPointerMode(h, CUSPARSE_POINTER_MODE_HOST));

  if (OnRemora()) {
    // A vector whose values were freed since its descriptor was made is refused (the error of
    // the posted call surfaces at the next synchronising call).
    float* gone = nullptr;
    CK(cudaMalloc(&gone, K * sizeof(float)));
    cusparseDnVecDescr_t stale;
    CB(cusparseCreateDnVec(&stale, K, gone, CUDA_R_32F));
    CK(cudaFree(gone));
    cusparseStatus_t st =
        cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, a, stale, &beta, vy, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, buf.get());
    cudaError_t e = cudaDeviceSynchronize();
    if (st == CUSPARSE_STATUS_SUCCESS && e == cudaSuccess) fail("an SpMV over freed memory was accepted");
    (void)cudaGetLastError();
    CB(cusparseDestroyDnVec(stale));
  }
  CB(cusparseDestroyDnVec(vx));
  CB(cusparseDestroyDnVec(vy));
  CB(cusparseDestroySpMat(a));
  CB(cusparseDestroy(h));
  CK(cudaStreamDestroy(stream));
  gpu_test::pass("cuSPARSE %d: CSR SpMV (host scalars) and SpMM (device scalars, column- and row-major) match the CPU%s", version,
                 OnRemora() ? "; an SpMV over freed memory refused" : "");
  return 0;
}

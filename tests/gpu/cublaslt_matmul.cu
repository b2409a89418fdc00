// cuBLASLt against a CPU reference: D = A^T B + bias (fp32, CUBLASLT_EPILOGUE_BIAS, host
// scalars); relu(alpha A B + beta C + bias) over bf16 operands with fp32 scalars in device
// memory (CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_POINTER_MODE_DEVICE); a strided batch of
// two with beta; descriptors, layouts and preferences made afresh for each matmul (as
// PyTorch does), the algorithm from cublasLtMatmulAlgoGetHeuristic with a workspace; the
// attributes read back. Under Remora, a bias pointer the application never allocated is
// refused. torch.nn.functional.linear's call sequence (PyTorch's gemm_and_bias), whose
// cuBLASLt handle is its cuBLAS handle. No kernels of its own (runs on the host-emulated backend in CI too).
#define GPU_TEST_NAME "cublaslt_matmul"
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cmath>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

namespace {

using gpu_test::fail;

struct Matmul {
  cublasLtHandle_t lt;
  cudaDataType_t type;       // of A, B, C, D (and the bias)
  cublasLtEpilogue_t epilogue;
  bool transa;
  bool device_scalars;
  int m, n, k, batch;
};

// op(A) is m x k, B is k x n, C and D m x n, all column-major, batch-strided.
std::vector<double> Run(const Matmul& mm, const std::vector<double>& a, const std::vector<double>& b,
                        const std::vector<double>& c, const std::vector<double>& bias, double alpha, double beta) {
  const int arows = mm.transa ? mm.k : mm.m, acols = mm.transa ? mm.m : mm.k;
  const long long sa = (long long)arows * acols, sb = (long long)mm.k * mm.n, sc = (long long)mm.m * mm.n;
  cublasLtMatmulDesc_t desc;
  CB(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int32_t trans = mm.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  CB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  uint32_t epilogue = mm.epilogue;
  CB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  int32_t mode = mm.device_scalars ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
  CB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)));
  size_t elem = mm.type == CUDA_R_32F ? 4 : 2;
  auto upload = [&](const std::vector<double>& v) {
    void* p;
    CK(cudaMalloc(&p, v.size() * elem));
    if (mm.type == CUDA_R_32F) {
      auto h = Convert<float>(v);
      CK(cudaMemcpy(p, h.data(), v.size() * elem, cudaMemcpyHostToDevice));
    } else {
      auto h = Convert<__nv_bfloat16>(v);
      CK(cudaMemcpy(p, h.data(), v.size() * elem, cudaMemcpyHostToDevice));
    }
    return p;
  };
  void *da = upload(a), *db = upload(b), *dc = upload(c), *dd = upload(std::vector<double>(c.size(), 0.0)), *dbias = upload(bias);
  CB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof(dbias)));
  void* got_bias = nullptr;
  size_t written = 0;
  CB(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &got_bias, sizeof(got_bias), &written));
  if (got_bias != dbias || written != sizeof(void*)) fail("the bias pointer reads back as %p (%zu bytes)", got_bias, written);

  cublasLtMatrixLayout_t la, lb, lc, ld;
  CB(cublasLtMatrixLayoutCreate(&la, mm.type, arows, acols, arows));
  CB(cublasLtMatrixLayoutCreate(&lb, mm.type, mm.k, mm.n, mm.k));
  CB(cublasLtMatrixLayoutCreate(&lc, mm.type, mm.m, mm.n, mm.m));
  CB(cublasLtMatrixLayoutCreate(&ld, mm.type, mm.m, mm.n, mm.m));
  if (mm.batch > 1) {
    int32_t count = mm.batch;
    for (auto [l, stride] : {std::pair{la, sa}, {lb, sb}, {lc, sc}, {ld, sc}}) {
      int64_t s = stride;
      CB(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      CB(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof(s)));
    }
  }
  cublasLtMatmulPreference_t pref;
  CB(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t max_ws = 1 << 20;
  CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
  cublasLtMatmulHeuristicResult_t result[4] = {};
  int found = 0;
  CB(cublasLtMatmulAlgoGetHeuristic(mm.lt, desc, la, lb, lc, ld, pref, 4, result, &found));
  if (found < 1) fail("no algorithm for %dx%dx%d", mm.m, mm.n, mm.k);
  if (result[0].workspaceSize > max_ws) fail("the algorithm wants %zu bytes of workspace", result[0].workspaceSize);
  void* ws = nullptr;
  CK(cudaMalloc(&ws, max_ws));
  float scalars[2] = {static_cast<float>(alpha), static_cast<float>(beta)};
  float* dscalars = nullptr;
  CK(cudaMalloc(&dscalars, sizeof(scalars)));
  CK(cudaMemcpy(dscalars, scalars, sizeof(scalars), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CB(cublasLtMatmul(mm.lt, desc, mm.device_scalars ? (void*)dscalars : (void*)&scalars[0], da, la, db, lb,
                    mm.device_scalars ? (void*)(dscalars + 1) : (void*)&scalars[1], dc, lc, dd, ld, &result[0].algo, ws,
                    max_ws, s));
  CK(cudaStreamSynchronize(s));
  std::vector<double> out(c.size());
  if (mm.type == CUDA_R_32F) {
    std::vector<float> h(c.size());
    CK(cudaMemcpy(h.data(), dd, h.size() * elem, cudaMemcpyDeviceToHost));
    out = Widen(h);
  } else {
    std::vector<__nv_bfloat16> h(c.size());
    CK(cudaMemcpy(h.data(), dd, h.size() * elem, cudaMemcpyDeviceToHost));
    out = Widen(h);
  }
  for (void* p : {da, db, dc, dd, dbias, ws, static_cast<void*>(dscalars)}) CK(cudaFree(p));
  CK(cudaStreamDestroy(s));
  CB(cublasLtMatmulPreferenceDestroy(pref));
  for (auto l : {la, lb, lc, ld}) CB(cublasLtMatrixLayoutDestroy(l));
  CB(cublasLtMatmulDescDestroy(desc));
  return out;
}

std::vector<double> Reference(const Matmul& mm, const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<double>& c, const std::vector<double>& bias, double alpha, double beta) {
  const int arows = mm.transa ? mm.k : mm.m, acols = mm.transa ? mm.m : mm.k;
  std::vector<double> d(c.size());
  for (int bt = 0; bt < mm.batch; bt++)
    for (int j = 0; j < mm.n; j++)
      for (int i = 0; i < mm.m; i++) {
        double acc = 0;
        for (int l = 0; l < mm.k; l++) {
          double av = mm.transa ? a[bt * arows * acols + l + i * arows] : a[bt * arows * acols + i + l * arows];
          acc += av * b[bt * mm.k * mm.n + l + j * mm.k];
        }
        size_t at = bt * mm.m * mm.n + i + j * mm.m;
        double v = alpha * acc + beta * c[at] + bias[i];
        if (mm.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) v = v > 0 ? v : 0;
        d[at] = v;
      }
  return d;
}

void Case(const char* what, const Matmul& mm, double alpha, double beta, double tol) {
  gpu_test::Rng rng(0xb1a5 + mm.m);
  auto fill = [&](size_t n) {
    std::vector<double> v(n);
    for (auto& x : v) x = rng.range(-8, 8) / 4.0;
    return v;
  };
  std::vector<double> a = fill(size_t(mm.m) * mm.k * mm.batch), b = fill(size_t(mm.k) * mm.n * mm.batch),
                      c = fill(size_t(mm.m) * mm.n * mm.batch), bias = fill(mm.m);
  std::vector<double> got = Run(mm, a, b, c, bias, alpha, beta), want = Reference(mm, a, b, c, bias, alpha, beta);
  for (size_t i = 0; i < got.size(); i++)
    if (std::fabs(got[i] - want[i]) > tol * (1 + std::fabs(want[i])))
      fail("%s: D[%zu] = %g, expected %g", what, i, got[i], want[i]);
  gpu_test::info("%s: %dx%dx%d x%d matches the CPU", what, mm.m, mm.n, mm.k, mm.batch);
}

// Alignment of an address in bytes, at most 256 (what PyTorch asks cuBLASLt to assume).
uint32_t AlignmentOf(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// torch.nn.functional.linear(inp, w, bias) in fp32 (inp 32x48, w 64x48, bias 64) the way
// PyTorch 2.11's gemm_and_bias calls cuBLASLt: the cuBLAS handle cast to a cuBLASLt handle,
// a descriptor, layouts and a preference made per call, the workspace size as a size_t, the
// four minimum alignments as uint32_t, one algorithm asked for with C passed as D, beta 0 and
// the bias epilogue, D written over C in place.
void TorchLinear(cublasHandle_t blas) {
  const int rows = 32, in = 48, out = 64;  // inp rows x in, w out x in, result rows x out
  gpu_test::Rng rng(0x7041);
  std::vector<float> inp(rows * in), w(out * in), bias(out);
  for (auto* v : {&inp, &w, &bias})
    for (auto& x : *v) x = static_cast<float>(rng.range(-8, 8) / 4.0);
  float *dinp, *dw, *dbias, *dres;
  CK(cudaMalloc(&dinp, inp.size() * 4));
  CK(cudaMalloc(&dw, w.size() * 4));
  CK(cudaMalloc(&dbias, bias.size() * 4));
  CK(cudaMalloc(&dres, size_t(rows) * out * 4));
  CK(cudaMemcpy(dinp, inp.data(), inp.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbias, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dres, 0, size_t(rows) * out * 4));
  const size_t ws_size = 1 << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_size));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CB(cublasSetStream(blas, stream));

  // addmm(bias, inp, w^T): m = out, n = rows, k = in; mat1 = w transposed, mat2 = inp.
  const int64_t m = out, n = rows, k = in;
  float alpha = 1.0f, beta = 0.0f;  // the bias comes in through the epilogue
  cublasLtMatmulPreference_t preference;
  CB(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulDesc_t computeDesc;
  CB(cublasLtMatmulDescCreate(&computeDesc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  CB(cublasLtMatmulDescSetAttribute(computeDesc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  CB(cublasLtMatmulDescSetAttribute(computeDesc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  CB(cublasLtMatmulDescSetAttribute(computeDesc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  const float* bias_ptr = dbias;
  CB(cublasLtMatmulDescSetAttribute(computeDesc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  cublasLtMatrixLayout_t Adesc, Bdesc, Cdesc;
  CB(cublasLtMatrixLayoutCreate(&Adesc, CUDA_R_32F, k, m, k));  // transposed: rows and columns swap
  CB(cublasLtMatrixLayoutCreate(&Bdesc, CUDA_R_32F, k, n, k));
  CB(cublasLtMatrixLayoutCreate(&Cdesc, CUDA_R_32F, m, n, m));
  size_t ws_pref = ws_size;
  CB(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_pref, sizeof(ws_pref)));
  uint32_t a_align = AlignmentOf(dw), b_align = AlignmentOf(dinp), c_align = AlignmentOf(dres), d_align = AlignmentOf(dbias);
  CB(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_align, sizeof(a_align)));
  CB(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_align, sizeof(b_align)));
  CB(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_align, sizeof(c_align)));
  CB(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d_align, sizeof(d_align)));
  cublasLtMatmulHeuristicResult_t heuristicResult = {};
  int returnedResult = 0;
  auto ltHandle = reinterpret_cast<cublasLtHandle_t>(blas);
  CB(cublasLtMatmulAlgoGetHeuristic(ltHandle, computeDesc, Adesc, Bdesc, Cdesc, Cdesc, preference, 1, &heuristicResult,
                                    &returnedResult));
  if (returnedResult == 0) fail("torch linear: no algorithm");
  CB(cublasLtMatmul(ltHandle, computeDesc, &alpha, dw, Adesc, dinp, Bdesc, &beta, dres, Cdesc, dres, Cdesc,
                    &heuristicResult.algo, ws, ws_size, stream));
  CK(cudaStreamSynchronize(stream));
  std::vector<float> res(size_t(rows) * out);
  CK(cudaMemcpy(res.data(), dres, res.size() * 4, cudaMemcpyDeviceToHost));
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < out; o++) {
      double want = bias[o];
      for (int l = 0; l < in; l++) want += double(inp[r * in + l]) * w[o * in + l];
      double got = res[size_t(r) * out + o];
      if (std::fabs(got - want) > 1e-4 * (1 + std::fabs(want)))
        fail("torch linear: out[%d][%d] = %g, expected %g", r, o, got, want);
    }
  CB(cublasLtMatmulPreferenceDestroy(preference));
  for (auto l : {Adesc, Bdesc, Cdesc}) CB(cublasLtMatrixLayoutDestroy(l));
  CB(cublasLtMatmulDescDestroy(computeDesc));
  CB(cublasSetStream(blas, nullptr));
  CK(cudaStreamDestroy(stream));
  for (void* p : {static_cast<void*>(dinp), static_cast<void*>(dw), static_cast<void*>(dbias), static_cast<void*>(dres), ws})
    CK(cudaFree(p));
  gpu_test::info("torch linear (32x48 @ (64x48)^T + bias, cuBLAS handle as the cuBLASLt handle) matches the CPU");
}

}  // namespace

int main() {
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  if (cublasLtGetVersion() == 0) fail("cublasLtGetVersion returned 0");
  Case("fp32 A^T B + bias (host scalars)", Matmul{lt, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, true, false, 40, 24, 32, 1}, 1.0, 0.0, 1e-5);
  Case("bf16 relu(alpha A B + beta C + bias) (device scalars)",
       Matmul{lt, CUDA_R_16BF, CUBLASLT_EPILOGUE_RELU_BIAS, false, true, 64, 16, 48, 1}, 0.5, 1.0, 2e-2);
  Case("fp32 batch of 2, A^T B + 0.5 C + bias", Matmul{lt, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, true, false, 16, 8, 24, 2}, 1.0,
       0.5, 1e-5);
  // The same shape again, with descriptors made afresh: the same answer.
  Case("fp32 A^T B + bias, again", Matmul{lt, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, true, false, 40, 24, 32, 1}, 1.0, 0.0, 1e-5);

  if (OnRemora()) {
    // A bias pointer the application never allocated is refused (the error of the posted
    // call surfaces at the next synchronising call).
    cublasLtMatmulDesc_t desc;
    CB(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    void* bogus = reinterpret_cast<void*>(0x7f00dead0000ull);
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bogus, sizeof(bogus));
    cudaError_t e = cudaDeviceSynchronize();
    if (st == CUBLAS_STATUS_SUCCESS && e == cudaSuccess) fail("a bias pointer that is not the application's was accepted");
    (void)cudaGetLastError();
    CB(cublasLtMatmulDescDestroy(desc));
  }
  CB(cublasLtDestroy(lt));

  cublasHandle_t blas;
  CB(cublasCreate(&blas));
  TorchLinear(blas);
  TorchLinear(blas);  // again: the heuristic answered from the memo
  if (OnRemora()) {
    // A cuBLAS handle serves as a cuBLASLt handle, but cublasLtDestroy does not end it.
    if (cublasLtDestroy(reinterpret_cast<cublasLtHandle_t>(blas)) == CUBLAS_STATUS_SUCCESS)
      fail("cublasLtDestroy ended a cuBLAS handle");
    TorchLinear(blas);
  }
  CB(cublasDestroy(blas));
  gpu_test::pass("cublasLtMatmul with bias and relu+bias epilogues, host and device scalars, fp32 and bf16, strided batch match the CPU");
  return 0;
}

// cuBLAS GEMMs against a CPU reference: SGEMM, DGEMM, HGEMM, cublasGemmEx (bf16 and fp16
// inputs into fp32, fp32 throughout), strided-batched and batched (arrays of device pointers)
// GEMM, each in host and in device pointer mode, with transposes; SDOT into host and device
// memory; the version without a handle; the handle's settings read back; cublasSetMatrix/GetMatrix; and an operand the
// application never allocated refused. No kernels of its own: it runs unchanged natively,
// under Remora on a GPU, and under Remora's host-emulated backend in CI.
#define GPU_TEST_NAME "cublas_gemm"
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

namespace {

using gpu_test::fail;

// C = alpha op(A) op(B) + beta C, column-major, in double.
void RefGemm(bool ta, bool tb, int m, int n, int k, double alpha, const std::vector<double>& a, int lda,
             const std::vector<double>& b, int ldb, double beta, std::vector<double>& c, int ldc) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double acc = 0;
      for (int l = 0; l < k; l++) acc += (ta ? a[l + i * lda] : a[i + l * lda]) * (tb ? b[j + l * ldb] : b[l + j * ldb]);
      c[i + j * ldc] = alpha * acc + beta * c[i + j * ldc];
    }
}

struct Case {
  bool ta, tb;
  int m, n, k;
};
const Case kCases[] = {{false, false, 37, 29, 23}, {true, false, 16, 33, 9}, {false, true, 8, 8, 40}, {true, true, 21, 5, 17}};

// One GEMM shape's operands, filled with small values that every precision holds exactly
// enough (multiples of 1/8 in [-2, 2]).
struct Operands {
  int lda, ldb, ldc;
  std::vector<double> a, b, c;
  Operands(const Case& cs, gpu_test::Rng& rng) {
    int arows = cs.ta ? cs.k : cs.m, acols = cs.ta ? cs.m : cs.k;
    int brows = cs.tb ? cs.n : cs.k, bcols = cs.tb ? cs.k : cs.n;
    lda = arows + 3;
    ldb = brows + 1;
    ldc = cs.m + 2;
    a = Fill(size_t(lda) * acols, rng);
    b = Fill(size_t(ldb) * bcols, rng);
    c = Fill(size_t(ldc) * cs.n, rng);
  }
  static std::vector<double> Fill(size_t n, gpu_test::Rng& rng) {
    std::vector<double> v(n);
    for (auto& x : v) x = rng.range(-16, 16) / 8.0;
    return v;
  }
};

// Runs `gemm(handle, alpha_ptr, beta_ptr, dA, dB, dC)` for every case in both pointer modes
// and compares with the reference at tolerance `tol` (relative to the result's scale).
template <typename T, typename S, typename Gemm>
void Check(const char* what, cublasHandle_t h, double tol, Gemm gemm) {
  gpu_test::Rng rng(0x5eed0000 + std::strlen(what));
  for (const Case& cs : kCases) {
    for (int device_mode = 0; device_mode < 2; device_mode++) {
      Operands o(cs, rng);
      const double alpha = 1.5, beta = device_mode ? -0.5 : 0.25;
      std::vector<double> want = o.c;
      RefGemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, alpha, o.a, o.lda, o.b, o.ldb, beta, want, o.ldc);
      DeviceBuffer<T> da(Convert<T>(o.a)), db(Convert<T>(o.b)), dc(Convert<T>(o.c));
      S hs[2] = {FromDouble<S>(alpha), FromDouble<S>(beta)};
      DeviceBuffer<S> ds(std::vector<S>(hs, hs + 2));
      CB(cublasSetPointerMode(h, device_mode ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST));
      const S* pa = device_mode ? ds.get() : &hs[0];
      const S* pb = device_mode ? ds.get() + 1 : &hs[1];
      CB(gemm(cs, o, pa, pb, da.get(), db.get(), dc.get()));
      std::vector<double> got = Widen(dc.Read());
      for (int j = 0; j < cs.n; j++)
        for (int i = 0; i < cs.m; i++) {
          double g = got[i + j * o.ldc], w = want[i + j * o.ldc];
          if (std::fabs(g - w) > tol * (1 + std::fabs(w)))
            fail("%s %c%c %dx%dx%d (%s pointer mode): C(%d,%d) = %g, expected %g", what, cs.ta ? 'T' : 'N', cs.tb ? 'T' : 'N',
                 cs.m, cs.n, cs.k, device_mode ? "device" : "host", i, j, g, w);
        }
      // Rows past m (the padding of ldc) are never written.
      std::vector<double> before = Widen(Convert<T>(o.c));
      for (int j = 0; j < cs.n; j++)
        for (int i = cs.m; i < o.ldc; i++)
          if (got[i + j * o.ldc] != before[i + j * o.ldc]) fail("%s wrote C(%d,%d) outside the m x n result", what, i, j);
    }
  }
  gpu_test::info("%s: %zu shapes x 2 pointer modes match the CPU", what, sizeof(kCases) / sizeof(kCases[0]));
}

cublasOperation_t Op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

int main() {
  // The version needs no handle (JAX's plugin asks before it makes one): cublasGetVersion is
  // cublasGetVersion_v2 in cublas_v2.h.
  int version = 0;
  CB(cublasGetVersion(nullptr, &version));
  if (version / 10000 != CUBLAS_VER_MAJOR) fail("cublasGetVersion(NULL) answered %d", version);
  cublasHandle_t h = nullptr;
  CB(cublasCreate(&h));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CB(cublasSetStream(h, stream));
  cudaStream_t got_stream = nullptr;
  CB(cublasGetStream(h, &got_stream));
  if (got_stream != stream) fail("cublasGetStream returned another stream");

  Check<float, float>("SGEMM", h, 1e-5, [&](const Case& c, const Operands& o, const float* al, const float* be, float* a, float* b, float* d) {
    return cublasSgemm(h, Op(c.ta), Op(c.tb), c.m, c.n, c.k, al, a, o.lda, b, o.ldb, be, d, o.ldc);
  });
  Check<double, double>("DGEMM", h, 1e-12, [&](const Case& c, const Operands& o, const double* al, const double* be, double* a, double* b, double* d) {
    return cublasDgemm(h, Op(c.ta), Op(c.tb), c.m, c.n, c.k, al, a, o.lda, b, o.ldb, be, d, o.ldc);
  });
  Check<__half, __half>("HGEMM", h, 5e-2, [&](const Case& c, const Operands& o, const __half* al, const __half* be, __half* a, __half* b, __half* d) {
    return cublasHgemm(h, Op(c.ta), Op(c.tb), c.m, c.n, c.k, al, a, o.lda, b, o.ldb, be, d, o.ldc);
  });
  Check<float, float>("GemmEx fp32", h, 1e-5, [&](const Case& c, const Operands& o, const float* al, const float* be, float* a, float* b, float* d) {
    return cublasGemmEx(h, Op(c.ta), Op(c.tb), c.m, c.n, c.k, al, a, CUDA_R_32F, o.lda, b, CUDA_R_32F, o.ldb, be, d,
                        CUDA_R_32F, o.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  // bf16 inputs, fp32 output and compute: the inputs are exact in bf16.
  {
    gpu_test::Rng rng(77);
    for (const Case& cs : kCases) {
      for (int device_mode = 0; device_mode < 2; device_mode++) {
        Operands o(cs, rng);
        std::vector<double> want = o.c;
        RefGemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, 2.0, o.a, o.lda, o.b, o.ldb, 1.0, want, o.ldc);
        DeviceBuffer<__nv_bfloat16> da(Convert<__nv_bfloat16>(o.a)), db(Convert<__nv_bfloat16>(o.b));
        DeviceBuffer<float> dc(Convert<float>(o.c));
        float hs[2] = {2.0f, 1.0f};
        DeviceBuffer<float> ds(std::vector<float>(hs, hs + 2));
        CB(cublasSetPointerMode(h, device_mode ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST));
        CB(cublasGemmEx(h, Op(cs.ta), Op(cs.tb), cs.m, cs.n, cs.k, device_mode ? ds.get() : &hs[0], da.get(), CUDA_R_16BF,
                        o.lda, db.get(), CUDA_R_16BF, o.ldb, device_mode ? ds.get() + 1 : &hs[1], dc.get(), CUDA_R_32F, o.ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        std::vector<float> got = dc.Read();
        for (int j = 0; j < cs.n; j++)
          for (int i = 0; i < cs.m; i++)
            if (std::fabs(got[i + j * o.ldc] - want[i + j * o.ldc]) > 1e-4 * (1 + std::fabs(want[i + j * o.ldc])))
              fail("GemmEx bf16->fp32 C(%d,%d) = %g, expected %g", i, j, got[i + j * o.ldc], want[i + j * o.ldc]);
      }
    }
    gpu_test::info("GemmEx bf16 x bf16 -> fp32: 4 shapes x 2 pointer modes match the CPU");
  }

  // Strided batched: three GEMMs in one buffer each, strides past the matrices.
  for (int device_mode = 0; device_mode < 2; device_mode++) {
    const int m = 13, n = 11, k = 7, batch = 3, lda = m, ldb = k, ldc = m + 1;
    const long long sa = lda * k + 5, sb = ldb * n + 3, sc = ldc * n + 2;
    gpu_test::Rng rng(9 + device_mode);
    std::vector<double> a = Operands::Fill(sa * batch, rng), b = Operands::Fill(sb * batch, rng), c = Operands::Fill(sc * batch, rng);
    std::vector<double> want = c;
    for (int i = 0; i < batch; i++) {
      std::vector<double> ai(a.begin() + i * sa, a.begin() + (i + 1) * sa), bi(b.begin() + i * sb, b.begin() + (i + 1) * sb),
          ci(want.begin() + i * sc, want.begin() + (i + 1) * sc);
      RefGemm(false, false, m, n, k, 0.5, ai, lda, bi, ldb, 2.0, ci, ldc);
      std::copy(ci.begin(), ci.end(), want.begin() + i * sc);
    }
    DeviceBuffer<float> da(Convert<float>(a)), db(Convert<float>(b)), dc(Convert<float>(c));
    float hs[2] = {0.5f, 2.0f};
    DeviceBuffer<float> ds(std::vector<float>(hs, hs + 2));
    CB(cublasSetPointerMode(h, device_mode ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST));
    CB(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, device_mode ? ds.get() : &hs[0], da.get(), lda, sa,
                                 db.get(), ldb, sb, device_mode ? ds.get() + 1 : &hs[1], dc.get(), ldc, sc, batch));
    std::vector<float> got = dc.Read();
    for (int bi = 0; bi < batch; bi++)
      for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
          size_t at = bi * sc + i + j * ldc;
          if (std::fabs(got[at] - want[at]) > 1e-4 * (1 + std::fabs(want[at])))
            fail("SgemmStridedBatched batch %d C(%d,%d) = %g, expected %g", bi, i, j, got[at], want[at]);
        }
  }
  gpu_test::info("SgemmStridedBatched: 3 GEMMs x 2 pointer modes match the CPU");

  // Batched: arrays of device pointers, themselves in device memory.
  for (int device_mode = 0; device_mode < 2; device_mode++) {
    const int m = 9, n = 6, k = 4, batch = 4;
    gpu_test::Rng rng(31 + device_mode);
    std::vector<DeviceBuffer<double>> as, bs, cs;
    std::vector<std::vector<double>> want;
    std::vector<double*> pa, pb, pc;
    for (int i = 0; i < batch; i++) {
      std::vector<double> a = Operands::Fill(m * k, rng), b = Operands::Fill(k * n, rng), c = Operands::Fill(m * n, rng);
      std::vector<double> w = c;
      RefGemm(true, false, m, n, k, -1.0, a, k, b, k, 0.5, w, m);  // A is k x m, used transposed
      want.push_back(w);
      as.emplace_back(a);
      bs.emplace_back(b);
      cs.emplace_back(c);
      pa.push_back(as.back().get());
      pb.push_back(bs.back().get());
      pc.push_back(cs.back().get());
    }
    DeviceBuffer<double*> dpa(pa), dpb(pb), dpc(pc);
    double hs[2] = {-1.0, 0.5};
    DeviceBuffer<double> ds(std::vector<double>(hs, hs + 2));
    CB(cublasSetPointerMode(h, device_mode ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST));
    CB(cublasDgemmBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, device_mode ? ds.get() : &hs[0],
                          reinterpret_cast<const double* const*>(dpa.get()), k, reinterpret_cast<const double* const*>(dpb.get()),
                          k, device_mode ? ds.get() + 1 : &hs[1], dpc.get(), m, batch));
    for (int i = 0; i < batch; i++) {
      std::vector<double> got = cs[i].Read();
      for (int e = 0; e < m * n; e++)
        if (std::fabs(got[e] - want[i][e]) > 1e-12 * (1 + std::fabs(want[i][e])))
          fail("DgemmBatched batch %d element %d = %g, expected %g", i, e, got[e], want[i][e]);
    }
  }
  gpu_test::info("DgemmBatched (device arrays of device pointers): 4 GEMMs x 2 pointer modes match the CPU");

  // SDOT into the host and into device memory.
  {
    std::vector<double> x(100), y(100);
    double want = 0;
    for (int i = 0; i < 100; i++) {
      x[i] = (i % 7) - 3;
      y[i] = (i % 5) * 0.5;
      want += x[i] * y[i];
    }
    DeviceBuffer<float> dx(Convert<float>(x)), dy(Convert<float>(y)), dr(std::vector<float>{0.0f});
    float host = 0;
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CB(cublasSdot(h, 100, dx.get(), 1, dy.get(), 1, &host));
    if (host != static_cast<float>(want)) fail("SDOT into host memory = %g, expected %g", host, want);
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CB(cublasSdot(h, 50, dx.get(), 2, dy.get(), 2, dr.get()));
    double want2 = 0;
    for (int i = 0; i < 50; i++) want2 += x[2 * i] * y[2 * i];
    if (dr.Read()[0] != static_cast<float>(want2)) fail("SDOT into device memory = %g, expected %g", dr.Read()[0], want2);
    cublasPointerMode_t mode;
    CB(cublasGetPointerMode(h, &mode));
    if (mode != CUBLAS_POINTER_MODE_DEVICE) fail("cublasGetPointerMode does not return the mode set");
  }

  // cublasSetMatrix / cublasGetMatrix: a 5 x 4 block of a host matrix with ld 7 into ld 6.
  {
    std::vector<float> host(7 * 4), back(5 * 4, -1.0f);
    for (size_t i = 0; i < host.size(); i++) host[i] = static_cast<float>(i);
    DeviceBuffer<float> d(std::vector<float>(6 * 4, 0.0f));
    CB(cublasSetMatrix(5, 4, sizeof(float), host.data(), 7, d.get(), 6));
    CB(cublasGetMatrix(5, 4, sizeof(float), d.get(), 6, back.data(), 5));
    for (int j = 0; j < 4; j++)
      for (int i = 0; i < 5; i++)
        if (back[i + j * 5] != host[i + j * 7]) fail("cublasSetMatrix/GetMatrix element (%d,%d)", i, j);
  }

  // A device pointer this process never allocated: refused, never computed with.
  {
    float one = 1.0f;
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    DeviceBuffer<float> c(std::vector<float>(16, 0.0f));
    float* freed = nullptr;
    CK(cudaMalloc(&freed, 64 * sizeof(float)));
    CK(cudaFree(freed));
    cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, freed, 4, freed, 4, &one, c.get(), 4);
    CK(cudaDeviceSynchronize());
    if (OnRemora() && st != CUBLAS_STATUS_INVALID_VALUE)
      fail("SGEMM on freed memory returned %d, expected CUBLAS_STATUS_INVALID_VALUE", static_cast<int>(st));
  }

  CB(cublasDestroy(h));
  CK(cudaStreamDestroy(stream));
  gpu_test::pass("SGEMM, DGEMM, HGEMM, GemmEx (fp32, bf16), strided-batched and batched GEMM in both pointer modes, SDOT, Set/GetMatrix match the CPU");
  return 0;
}

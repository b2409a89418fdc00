// constant_memory: __constant__ arrays and a __constant__ struct set with cudaMemcpyToSymbol
// (host source; device source with cudaMemcpyDeviceToDevice; offset), cudaMemcpyToSymbolAsync
// with an offset on a stream, read by kernels; cudaMemcpyFromSymbol / cudaMemcpyFromSymbolAsync
// round trips (whole and with an offset); a copy past the end of a symbol must fail.
#define GPU_TEST_NAME "constant_memory"
#include "gpu_test.h"

#include <cstddef>
#include <cstring>
#include <vector>

constexpr int kCoef = 256;
constexpr int kTable = 1024;

struct Params {
  int bias;
  int scale;
  double dscale;
  char tag[8];
};

__constant__ float c_coef[kCoef];
__constant__ int c_table[kTable];
__constant__ Params c_params;
__constant__ int c_init[4] = {11, 22, 33, 44};  // initialised in the module image

__global__ void use_constants(const float* x, float* fout, int* iout, double* dout, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // __fmul_rn/__fadd_rn: no FMA contraction, so the host computes the same bits.
  fout[i] = __fadd_rn(__fmul_rn(c_coef[i % kCoef], x[i]), float(c_params.bias));
  iout[i] = c_table[(i * 7) % kTable] * c_params.scale + c_init[i & 3] + c_params.tag[i & 7];
  dout[i] = __dmul_rn(c_params.dscale, double(i));
}

int main() {
  const int n = 100000;
  gpu_test::Rng rng(0x5eed0005);
  std::vector<float> coef(kCoef), x(n);
  std::vector<int> table(kTable);
  for (auto& v : coef) v = rng.sym() * 4.0f;
  for (auto& v : x) v = rng.sym() * 100.0f;
  for (auto& v : table) v = rng.range(-1000000, 1000000);
  Params p{};
  p.bias = -17;
  p.scale = 3;
  p.dscale = 0.125;
  std::memcpy(p.tag, "remora!", 8);

  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));

  // c_coef: whole array from the host.
  CK(cudaMemcpyToSymbol(c_coef, coef.data(), sizeof(float) * kCoef));
  // c_table: first half from the host (sync, offset 0), second half with the Async variant
  // at an offset, from a pinned buffer.
  CK(cudaMemcpyToSymbol(c_table, table.data(), sizeof(int) * kTable / 2, 0,
                        cudaMemcpyHostToDevice));
  int* pinned;
  CK(cudaMallocHost(&pinned, sizeof(int) * kTable / 2));
  std::memcpy(pinned, table.data() + kTable / 2, sizeof(int) * kTable / 2);
  CK(cudaMemcpyToSymbolAsync(c_table, pinned, sizeof(int) * kTable / 2,
                             sizeof(int) * kTable / 2, cudaMemcpyHostToDevice, stream));
  // c_params: from device memory (cudaMemcpyDeviceToDevice), then patch one field at its offset
  // from the host.
  Params* d_params;
  CK(cudaMalloc(&d_params, sizeof(Params)));
  Params staged = p;
  staged.scale = 999;  // overwritten below through the offset copy
  CK(cudaMemcpy(d_params, &staged, sizeof(Params), cudaMemcpyHostToDevice));
  CK(cudaMemcpyToSymbol(c_params, d_params, sizeof(Params), 0, cudaMemcpyDeviceToDevice));
  CK(cudaMemcpyToSymbol(c_params, &p.scale, sizeof(int), offsetof(Params, scale)));
  CK(cudaStreamSynchronize(stream));

  float *d_x, *d_fout;
  int* d_iout;
  double* d_dout;
  CK(cudaMalloc(&d_x, n * sizeof(float)));
  CK(cudaMalloc(&d_fout, n * sizeof(float)));
  CK(cudaMalloc(&d_iout, n * sizeof(int)));
  CK(cudaMalloc(&d_dout, n * sizeof(double)));
  CK(cudaMemcpy(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  use_constants<<<(n + 255) / 256, 256, 0, stream>>>(d_x, d_fout, d_iout, d_dout, n);
  CK_LAUNCH("use_constants");
  std::vector<float> fout(n);
  std::vector<int> iout(n);
  std::vector<double> dout(n);
  CK(cudaMemcpyAsync(fout.data(), d_fout, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CK(cudaMemcpyAsync(iout.data(), d_iout, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CK(cudaMemcpyAsync(dout.data(), d_dout, n * sizeof(double), cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  const int init[4] = {11, 22, 33, 44};
  for (int i = 0; i < n; ++i) {
    const float fw = coef[i % kCoef] * x[i] + float(p.bias);
    const int iw = table[(i * 7) % kTable] * p.scale + init[i & 3] + p.tag[i & 7];
    const double dw = p.dscale * double(i);
    if (std::memcmp(&fout[i], &fw, sizeof fw) != 0)
      gpu_test::fail("float output %d: %.9g, want %.9g", i, fout[i], fw);
    if (iout[i] != iw) gpu_test::fail("int output %d: %d, want %d", i, iout[i], iw);
    if (dout[i] != dw) gpu_test::fail("double output %d: %.17g, want %.17g", i, dout[i], dw);
  }

  // Round trips: whole symbols, a slice at an offset, the Async variant, the initialised one.
  std::vector<int> table_back(kTable, 0);
  CK(cudaMemcpyFromSymbol(table_back.data(), c_table, sizeof(int) * kTable));
  if (table_back != table) gpu_test::fail("cudaMemcpyFromSymbol(c_table) differs");
  std::vector<int> slice(100, 0);
  CK(cudaMemcpyFromSymbol(slice.data(), c_table, sizeof(int) * 100, sizeof(int) * 700,
                          cudaMemcpyDeviceToHost));
  for (int i = 0; i < 100; ++i)
    if (slice[i] != table[700 + i])
      gpu_test::fail("cudaMemcpyFromSymbol with offset: [%d] = %d, want %d", i, slice[i],
                     table[700 + i]);
  float* coef_back;
  CK(cudaMallocHost(&coef_back, sizeof(float) * kCoef));
  CK(cudaMemcpyFromSymbolAsync(coef_back, c_coef, sizeof(float) * kCoef, 0,
                               cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  if (std::memcmp(coef_back, coef.data(), sizeof(float) * kCoef) != 0)
    gpu_test::fail("cudaMemcpyFromSymbolAsync(c_coef) differs");
  Params p_back{};
  CK(cudaMemcpyFromSymbol(&p_back, c_params, sizeof(Params)));
  if (p_back.bias != p.bias || p_back.scale != p.scale || p_back.dscale != p.dscale ||
      std::memcmp(p_back.tag, p.tag, 8) != 0)
    gpu_test::fail("cudaMemcpyFromSymbol(c_params) differs (scale %d)", p_back.scale);
  int init_back[4] = {0, 0, 0, 0};
  CK(cudaMemcpyFromSymbol(init_back, c_init, sizeof init_back));
  if (std::memcmp(init_back, init, sizeof init) != 0)
    gpu_test::fail("initialised __constant__ c_init reads back {%d,%d,%d,%d}", init_back[0],
                   init_back[1], init_back[2], init_back[3]);
  // Symbol to device memory (cudaMemcpyDeviceToDevice from a symbol).
  int* d_slice;
  CK(cudaMalloc(&d_slice, sizeof(int) * 16));
  CK(cudaMemcpyFromSymbol(d_slice, c_table, sizeof(int) * 16, sizeof(int) * 16,
                          cudaMemcpyDeviceToDevice));
  int h_slice[16];
  CK(cudaMemcpy(h_slice, d_slice, sizeof h_slice, cudaMemcpyDeviceToHost));
  if (std::memcmp(h_slice, table.data() + 16, sizeof h_slice) != 0)
    gpu_test::fail("cudaMemcpyFromSymbol to device memory differs");

  // Out of bounds: offset + count beyond the symbol must be rejected (non-sticky).
  std::vector<int> big(kTable + 1, 0);
  const cudaError_t oob = cudaMemcpyToSymbol(c_table, big.data(), sizeof(int) * (kTable + 1));
  if (oob == cudaSuccess) gpu_test::fail("cudaMemcpyToSymbol past the end of c_table succeeded");
  const cudaError_t oob2 =
      cudaMemcpyFromSymbol(big.data(), c_table, sizeof(int) * 8, sizeof(int) * (kTable - 4));
  if (oob2 == cudaSuccess)
    gpu_test::fail("cudaMemcpyFromSymbol past the end of c_table succeeded");
  gpu_test::info("out-of-bounds symbol copies returned %s / %s", cudaGetErrorName(oob),
                 cudaGetErrorName(oob2));
  (void)cudaGetLastError();
  CK(cudaMemcpyFromSymbol(table_back.data(), c_table, sizeof(int) * kTable));
  if (table_back != table) gpu_test::fail("c_table changed by a rejected copy");

  CK(cudaFree(d_slice));
  CK(cudaFree(d_x));
  CK(cudaFree(d_fout));
  CK(cudaFree(d_iout));
  CK(cudaFree(d_dout));
  CK(cudaFree(d_params));
  CK(cudaFreeHost(pinned));
  CK(cudaFreeHost(coef_back));
  CK(cudaStreamDestroy(stream));
  gpu_test::pass("4 __constant__ symbols set (host, async+offset, device source, field "
                 "offset), %d outputs exact, 6 round trips, OOB rejected (%s)",
                 n, cudaGetErrorName(oob));
  return 0;
}

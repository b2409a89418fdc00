// cuFFT against a CPU DFT (in double): a batched 1D complex transform and its inverse
// (cufftPlan1d), a 2D one (cufftPlan2d), a batched real-to-complex and complex-to-real pair
// with padded layouts (cufftPlanMany), PyTorch's path (cufftCreate, cufftXtMakePlanMany,
// cufftXtExec) on the application's stream, and a plan without auto-allocation whose work
// area the application gives (cufftSetWorkArea), and the data descriptors of a plan on one GPU
// (cufftXtMalloc, cufftXtMemcpy both ways and between descriptors, cufftXtExecDescriptor*,
// cufftXtFree). Under Remora, an output smaller than the plan writes is refused before the
// library sees it, and a descriptor the process did not get from cufftXtMalloc is refused.
// On Remora's host-emulated backend (REMORA_TEST_HOST_BACKEND=1, CI), which does not emulate
// cuFFT, it checks that cuFFT answers CUFFT_NOT_SUPPORTED, and that forged descriptors are
// refused in the client (CUFFT_INVALID_VALUE).
#define GPU_TEST_NAME "cufft_transform"
#include <cufftXt.h>

#include <cmath>
#include <complex>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

namespace {

using gpu_test::fail;
using cd = std::complex<double>;

// The DFT of each of `batch` arrays of dims[0] x dims[1] x ... (row-major), sign -1 forward.
std::vector<cd> Dft(const std::vector<cd>& in, const std::vector<int>& dims, int batch, int sign) {
  int total = 1;
  for (int d : dims) total *= d;
  std::vector<cd> out(in.size());
  for (int b = 0; b < batch; b++)
    for (int k = 0; k < total; k++) {
      cd acc = 0;
      for (int j = 0; j < total; j++) {
        double phase = 0;
        int kr = k, jr = j;
        for (size_t d = dims.size(); d-- > 0;) {
          phase += static_cast<double>((kr % dims[d]) * (jr % dims[d])) / dims[d];
          kr /= dims[d];
          jr /= dims[d];
        }
        acc += in[b * total + j] * std::polar(1.0, sign * 2 * M_PI * phase);
      }
      out[b * total + k] = acc;
    }
  return out;
}

std::vector<cd> RandomComplex(size_t n, unsigned seed) {
  std::vector<cd> v(n);
  unsigned s = seed;
  auto next = [&] {
    s = s * 1664525u + 1013904223u;
    return static_cast<double>((s >> 8) % 2001) / 1000.0 - 1.0;
  };
  for (auto& e : v) e = cd(next(), next());
  return v;
}

void Check(const char* what, const std::vector<cufftComplex>& got, const std::vector<cd>& want, double scale = 1) {
  for (size_t i = 0; i < want.size(); i++) {
    cd g(got[i].x * scale, got[i].y * scale);
    if (std::abs(g - want[i]) > 1e-3 * (1 + std::abs(want[i])))
      fail("%s: element %zu is (%g, %g), expected (%g, %g)", what, i, g.real(), g.imag(), want[i].real(), want[i].imag());
  }
}

std::vector<cufftComplex> ToDevice(const std::vector<cd>& v) {
  std::vector<cufftComplex> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = {static_cast<float>(v[i].real()), static_cast<float>(v[i].imag())};
  return out;
}

void OneD(cudaStream_t stream) {
  const int n = 64, batch = 3;
  auto in = RandomComplex(n * batch, 1);
  DeviceBuffer<cufftComplex> d(ToDevice(in)), back(n * batch);
  cufftHandle plan;
  CB(cufftPlan1d(&plan, n, CUFFT_C2C, batch));
  CB(cufftSetStream(plan, stream));
  CB(cufftExecC2C(plan, d.get(), d.get(), CUFFT_FORWARD));  // in place
  Check("1D C2C forward (batch 3, in place)", d.Read(), Dft(in, {n}, batch, -1));
  CB(cufftExecC2C(plan, d.get(), back.get(), CUFFT_INVERSE));
  Check("1D C2C inverse", back.Read(), in, 1.0 / n);
  CB(cufftDestroy(plan));
}

void TwoD() {
  const int nx = 12, ny = 10;
  auto in = RandomComplex(nx * ny, 2);
  DeviceBuffer<cufftComplex> d(ToDevice(in)), out(nx * ny);
  cufftHandle plan;
  CB(cufftPlan2d(&plan, nx, ny, CUFFT_C2C));
  CB(cufftExecC2C(plan, d.get(), out.get(), CUFFT_FORWARD));
  Check("2D C2C 12x10", out.Read(), Dft(in, {nx, ny}, 1, -1));
  CB(cufftDestroy(plan));
}

// Real-to-complex and back, 4 arrays of 40 reals each, with padded distances on both sides.
void RealMany() {
  const int n = 40, batch = 4, idist = 44, odist = n / 2 + 3;
  std::vector<float> in(idist * batch, 0.0f);
  std::vector<cd> ref(n * batch);
  auto r = RandomComplex(n * batch, 3);
  for (int b = 0; b < batch; b++)
    for (int i = 0; i < n; i++) in[b * idist + i] = static_cast<float>(r[b * n + i].real()), ref[b * n + i] = r[b * n + i].real();
  DeviceBuffer<float> din(in), dback(idist * batch);
  DeviceBuffer<cufftComplex> dout(odist * batch);
  int dims[1] = {n}, iembed[1] = {idist}, oembed[1] = {odist};
  cufftHandle r2c, c2r;
  CB(cufftPlanMany(&r2c, 1, dims, iembed, 1, idist, oembed, 1, odist, CUFFT_R2C, batch));
  CB(cufftPlanMany(&c2r, 1, dims, oembed, 1, odist, iembed, 1, idist, CUFFT_C2R, batch));
  CB(cufftExecR2C(r2c, din.get(), dout.get()));
  auto got = dout.Read();
  auto want = Dft(ref, {n}, batch, -1);
  for (int b = 0; b < batch; b++)
    for (int k = 0; k <= n / 2; k++) {
      cd g(got[b * odist + k].x, got[b * odist + k].y);
      if (std::abs(g - want[b * n + k]) > 1e-3 * (1 + std::abs(want[b * n + k]))) fail("R2C: batch %d bin %d", b, k);
    }
  CB(cufftExecC2R(c2r, dout.get(), dback.get()));
  auto back = dback.Read();
  for (int b = 0; b < batch; b++)
    for (int i = 0; i < n; i++)
      if (std::fabs(back[b * idist + i] / n - in[b * idist + i]) > 1e-4) fail("C2R: batch %d element %d", b, i);
  CB(cufftDestroy(r2c));
  CB(cufftDestroy(c2r));
}

// PyTorch's calls: a created plan made by cufftXtMakePlanMany (2D, batch 2), executed with
// cufftXtExec on a stream, with a work area the application gives.
void XtMany(cudaStream_t stream) {
  const int nx = 8, ny = 6, batch = 2;
  auto in = RandomComplex(nx * ny * batch, 4);
  DeviceBuffer<cufftComplex> d(ToDevice(in)), out(nx * ny * batch);
  cufftHandle plan;
  CB(cufftCreate(&plan));
  CB(cufftSetAutoAllocation(plan, 0));
  long long dims[2] = {nx, ny};
  size_t work = 0;
  CB(cufftXtMakePlanMany(plan, 2, dims, nullptr, 1, nx * ny, CUDA_C_32F, nullptr, 1, nx * ny, CUDA_C_32F, batch, &work, CUDA_C_32F));
  size_t asked = 0;
  CB(cufftGetSize(plan, &asked));
  if (asked != work) fail("cufftGetSize answered %zu, the plan said %zu", asked, work);
  DeviceBuffer<char> area(work);
  CB(cufftSetWorkArea(plan, work ? area.get() : nullptr));
  CB(cufftSetStream(plan, stream));
  CB(cufftXtExec(plan, d.get(), out.get(), CUFFT_FORWARD));
  Check("cufftXtMakePlanMany 2D 8x6 batch 2 (work area given)", out.Read(), Dft(in, {nx, ny}, batch, -1));
  if (OnRemora()) {
    // An output smaller than what the plan writes never reaches the library (the error of the
    // posted call surfaces at the next synchronising call).
    DeviceBuffer<cufftComplex> small(nx * ny);
    cufftResult r = cufftXtExec(plan, d.get(), small.get(), CUFFT_FORWARD);
    cudaError_t e = cudaDeviceSynchronize();
    if (r == CUFFT_SUCCESS && e == cudaSuccess) fail("an output smaller than the plan's was accepted");
    (void)cudaGetLastError();
  }
  CB(cufftDestroy(plan));
}

// The descriptor API on one GPU: in-place C2C forward through descriptors, a copy between
// descriptors, the inverse through the generic cufftXtExecDescriptor. Returns false (with a
// note) where NVIDIA's own library does not give a single-GPU plan descriptors.
bool Descriptors() {
  const int n = 64, batch = 2;
  auto in = RandomComplex(n * batch, 5);
  std::vector<cufftComplex> host = ToDevice(in), back(n * batch);
  cufftHandle plan;
  CB(cufftPlan1d(&plan, n, CUFFT_C2C, batch));
  cudaLibXtDesc *d = nullptr, *e = nullptr;
  cufftResult r = cufftXtMalloc(plan, &d, CUFFT_XT_FORMAT_INPLACE);
  // NVIDIA's cuFFT 12 on the H200 answers CUFFT_SUCCESS with a one-GPU descriptor that holds
  // no memory (data[0] NULL, size 0): only Remora's descriptors are used further.
  if (!OnRemora() && (r != CUFFT_SUCCESS || d == nullptr || d->descriptor == nullptr || d->descriptor->data[0] == nullptr)) {
    std::printf("note: NVIDIA's cuFFT gives no memory to a one-GPU plan's descriptor (cufftXtMalloc: %d)\n", r);
    if (r == CUFFT_SUCCESS && d != nullptr) (void)cufftXtFree(d);
    CB(cufftDestroy(plan));
    return false;
  }
  CB(r);
  const size_t wanted = sizeof(cufftComplex) * n * batch;
  if (d == nullptr || d->descriptor == nullptr || d->descriptor->nGPUs != 1 || d->descriptor->data[0] == nullptr ||
      d->descriptor->size[0] < wanted)
    fail("cufftXtMalloc: a descriptor of %d GPUs, %zu bytes on the first (%zu wanted; descriptor %p)",
         d && d->descriptor ? d->descriptor->nGPUs : -1, d && d->descriptor ? d->descriptor->size[0] : 0,
         wanted, d ? static_cast<void*>(d->descriptor) : nullptr);
  CB(cufftXtMalloc(plan, &e, CUFFT_XT_FORMAT_INPLACE));
  CB(cufftXtMemcpy(plan, d, host.data(), CUFFT_COPY_HOST_TO_DEVICE));
  CB(cufftXtExecDescriptorC2C(plan, d, d, CUFFT_FORWARD));
  CB(cufftXtMemcpy(plan, back.data(), d, CUFFT_COPY_DEVICE_TO_HOST));
  Check("descriptors: cufftXtExecDescriptorC2C forward", back, Dft(in, {n}, batch, -1));
  CB(cufftXtMemcpy(plan, e, d, CUFFT_COPY_DEVICE_TO_DEVICE));
  CB(cufftXtExecDescriptor(plan, e, e, CUFFT_INVERSE));
  CB(cufftXtMemcpy(plan, back.data(), e, CUFFT_COPY_DEVICE_TO_HOST));
  Check("descriptors: copied, cufftXtExecDescriptor inverse", back, in, 1.0 / n);
  CB(cufftXtFree(d));
  CB(cufftXtFree(e));
  CB(cufftDestroy(plan));
  return true;
}

// A descriptor the process did not get from cufftXtMalloc (Remora only: NVIDIA's library
// would follow its pointers).
void ForgedDescriptors() {
  cudaXtDesc xt{};
  cudaLibXtDesc forged{};
  forged.descriptor = &xt;
  xt.nGPUs = 1;
  xt.data[0] = reinterpret_cast<void*>(0x7000d000);
  xt.size[0] = 4096;
  std::vector<char> host(4096);
  cufftResult f = cufftXtFree(&forged);
  cufftResult m = cufftXtMemcpy(0, &forged, host.data(), CUFFT_COPY_HOST_TO_DEVICE);
  cufftResult x = cufftXtExecDescriptorC2C(0, &forged, &forged, CUFFT_FORWARD);
  if (f != CUFFT_INVALID_VALUE || m != CUFFT_INVALID_VALUE || x != CUFFT_INVALID_VALUE)
    fail("a forged descriptor: cufftXtFree %d, cufftXtMemcpy %d, cufftXtExecDescriptorC2C %d (not CUFFT_INVALID_VALUE)", f, m, x);
}

}  // namespace

int main() {
  int version = 0;
  cufftResult v = cufftGetVersion(&version);
  if (std::getenv("REMORA_TEST_HOST_BACKEND") != nullptr) {
    // Remora's host-emulated backend does not emulate cuFFT: every call says so.
    cufftHandle plan;
    cufftResult made = cufftPlan1d(&plan, 16, CUFFT_C2C, 1);
    if (v != CUFFT_NOT_SUPPORTED || made != CUFFT_NOT_SUPPORTED)
      fail("cuFFT on the host backend answered %d (version) and %d (plan), not CUFFT_NOT_SUPPORTED", v, made);
    ForgedDescriptors();
    gpu_test::pass("host backend: cuFFT answers CUFFT_NOT_SUPPORTED (cufftGetVersion, cufftPlan1d); forged descriptors refused");
    return 0;
  }
  CB(v);
  if (version < 11000) fail("cuFFT version %d", version);
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  OneD(stream);
  TwoD();
  RealMany();
  XtMany(stream);
  bool descriptors = Descriptors();
  if (OnRemora()) ForgedDescriptors();
  CK(cudaStreamDestroy(stream));
  gpu_test::pass("cuFFT %d: 1D batched C2C and inverse, 2D C2C, batched padded R2C/C2R, cufftXtMakePlanMany with a given "
                 "work area%s match the CPU DFT%s", version, descriptors ? ", descriptors" : "",
                 OnRemora() ? "; a short output and forged descriptors refused" : "");
  return 0;
}

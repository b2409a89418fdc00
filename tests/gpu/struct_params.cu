// struct_params: kernel parameters of many shapes, as the shim must marshal them: structs by
// value with padding (char/int/double/pointer/short/bool), a struct containing fixed arrays, a
// 24-byte struct, a ~1 KiB struct, CUDA vector types with 16-byte alignment, char/short/
// double/bool/unsigned scalars and a kernel with 26 parameters of mixed alignment. Each kernel
// writes what it received to an output buffer; both <<<>>> and cudaLaunchKernel (args array)
// are used for the struct kernels.
#define GPU_TEST_NAME "struct_params"
#include "gpu_test.h"

#include <cstring>

struct Mixed {  // sizeof 40 with padding after c, s/b
  char c;
  int i;
  double d;
  int* p;
  short s;
  bool b;
};

struct WithArray {
  int n;
  float vals[7];
  char tag[5];
  unsigned short us[3];
};

struct S24 {  // exactly 24 bytes
  float x;
  int y;
  double z;
  const void* q;
};
static_assert(sizeof(S24) == 24);

struct Big {  // ~1 KiB
  int data[250];
  double scale;
  int count;
};
static_assert(sizeof(Big) >= 1000 && sizeof(Big) <= 1024);

using ll = long long;

__global__ void k_mixed(Mixed m, ll* out) {
  out[0] = m.c;
  out[1] = m.i;
  out[2] = static_cast<ll>(m.d * 1000.0);
  out[3] = reinterpret_cast<ll>(m.p);
  out[4] = m.s;
  out[5] = m.b ? 1 : 0;
  m.p[0] = m.i + 1;  // the pointer member must be usable
}

__global__ void k_array(WithArray w, float* fout, ll* iout) {
  const int t = threadIdx.x;
  if (t < 7) fout[t] = w.vals[t];
  if (t < 5) iout[t] = w.tag[t];
  if (t < 3) iout[5 + t] = w.us[t];
  if (t == 0) iout[8] = w.n;
}

__global__ void k_s24(S24 s, double* dout, ll* iout) {
  dout[0] = s.x;
  dout[1] = s.z;
  iout[0] = s.y;
  iout[1] = reinterpret_cast<ll>(s.q);
}

__global__ void k_big(Big b, ll* out) {
  for (int i = threadIdx.x; i < 250; i += blockDim.x) out[i] = b.data[i];
  if (threadIdx.x == 0) {
    out[250] = static_cast<ll>(b.scale * 4096.0);
    out[251] = b.count;
  }
}

__global__ void k_scalars(char c, short s, double d, bool b, unsigned char uc, float f,
                          ll big, unsigned short us, signed char sc, unsigned u, ll* out,
                          double* dout) {
  out[0] = c;
  out[1] = s;
  out[2] = b;
  out[3] = uc;
  out[4] = big;
  out[5] = us;
  out[6] = sc;
  out[7] = u;
  dout[0] = d;
  dout[1] = f;
}

__global__ void k_vectors(float4 f4, int2 i2, double2 d2, char3 c3, short2 s2, ll* out,
                          double* dout) {
  dout[0] = f4.x;
  dout[1] = f4.y;
  dout[2] = f4.z;
  dout[3] = f4.w;
  dout[4] = d2.x;
  dout[5] = d2.y;
  out[0] = i2.x;
  out[1] = i2.y;
  out[2] = c3.x;
  out[3] = c3.y;
  out[4] = c3.z;
  out[5] = s2.x;
  out[6] = s2.y;
}

// 26 parameters: alignment changes between almost every pair.
__global__ void k_many(char a0, double a1, char a2, short a3, int a4, ll a5, float a6, bool a7,
                       double a8, char a9, int a10, char a11, ll a12, short a13, double a14,
                       unsigned char a15, int a16, int a17, int a18, int a19, float a20,
                       char a21, double a22, short a23, ll a24, ll* out) {
  out[0] = a0;
  out[1] = static_cast<ll>(a1 * 8);
  out[2] = a2;
  out[3] = a3;
  out[4] = a4;
  out[5] = a5;
  out[6] = static_cast<ll>(a6 * 8);
  out[7] = a7;
  out[8] = static_cast<ll>(a8 * 8);
  out[9] = a9;
  out[10] = a10;
  out[11] = a11;
  out[12] = a12;
  out[13] = a13;
  out[14] = static_cast<ll>(a14 * 8);
  out[15] = a15;
  out[16] = a16;
  out[17] = a17;
  out[18] = a18;
  out[19] = a19;
  out[20] = static_cast<ll>(a20 * 8);
  out[21] = a21;
  out[22] = static_cast<ll>(a22 * 8);
  out[23] = a23;
  out[24] = a24;
}

template <typename T>
static void expect_eq(const char* what, int idx, T got, T want) {
  if (!(got == want))
    gpu_test::fail("%s[%d]: got %lld, want %lld", what, idx, static_cast<long long>(got),
                   static_cast<long long>(want));
}

int main() {
  ll* d_out;
  double* d_dout;
  float* d_fout;
  int* d_target;
  CK(cudaMalloc(&d_out, 512 * sizeof(ll)));
  CK(cudaMalloc(&d_dout, 16 * sizeof(double)));
  CK(cudaMalloc(&d_fout, 16 * sizeof(float)));
  CK(cudaMalloc(&d_target, sizeof(int)));
  ll out[512];
  double dout[16];
  float fout[16];
  int launches = 0;

  auto reset = [&] {
    CK(cudaMemset(d_out, 0xEE, 512 * sizeof(ll)));
    CK(cudaMemset(d_dout, 0xEE, 16 * sizeof(double)));
    CK(cudaMemset(d_fout, 0xEE, 16 * sizeof(float)));
  };
  auto fetch = [&] {
    CK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dout, d_dout, sizeof dout, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(fout, d_fout, sizeof fout, cudaMemcpyDeviceToHost));
  };

  // --- Mixed, by <<<>>> and by cudaLaunchKernel with an args array ---------------------------
  for (int via_api = 0; via_api < 2; ++via_api) {
    Mixed m;
    std::memset(&m, 0x5A, sizeof m);  // padding bytes hold garbage the kernel must not need
    m.c = static_cast<char>(-7 - via_api);
    m.i = 123456789 + via_api;
    m.d = -2.5 + via_api;
    m.p = d_target;
    m.s = static_cast<short>(-30000 + via_api);
    m.b = via_api == 0;
    reset();
    if (via_api) {
      void* args[] = {&m, &d_out};
      CK(cudaLaunchKernel(reinterpret_cast<const void*>(k_mixed), dim3(1), dim3(1), args, 0,
                          nullptr));
    } else {
      k_mixed<<<1, 1>>>(m, d_out);
      CK_LAUNCH("k_mixed");
    }
    ++launches;
    fetch();
    int target = 0;
    CK(cudaMemcpy(&target, d_target, sizeof target, cudaMemcpyDeviceToHost));
    expect_eq("Mixed.c", via_api, out[0], ll(m.c));
    expect_eq("Mixed.i", via_api, out[1], ll(m.i));
    expect_eq("Mixed.d*1000", via_api, out[2], ll(m.d * 1000.0));
    expect_eq("Mixed.p", via_api, out[3], reinterpret_cast<ll>(m.p));
    expect_eq("Mixed.s", via_api, out[4], ll(m.s));
    expect_eq("Mixed.b", via_api, out[5], ll(m.b));
    expect_eq("*Mixed.p", via_api, target, m.i + 1);
  }

  // --- struct with arrays -----------------------------------------------------------------
  {
    WithArray w{};
    w.n = -424242;
    for (int k = 0; k < 7; ++k) w.vals[k] = 1.5f * k - 4.25f;
    std::memcpy(w.tag, "abcd", 5);
    w.us[0] = 1;
    w.us[1] = 65535;
    w.us[2] = 4321;
    reset();
    k_array<<<1, 32>>>(w, d_fout, d_out);
    CK_LAUNCH("k_array");
    ++launches;
    fetch();
    for (int k = 0; k < 7; ++k)
      if (fout[k] != w.vals[k]) gpu_test::fail("WithArray.vals[%d] = %g", k, fout[k]);
    for (int k = 0; k < 5; ++k) expect_eq("WithArray.tag", k, out[k], ll(w.tag[k]));
    for (int k = 0; k < 3; ++k) expect_eq("WithArray.us", k, out[5 + k], ll(w.us[k]));
    expect_eq("WithArray.n", 0, out[8], ll(w.n));
  }

  // --- 24-byte struct, via both launch paths ----------------------------------------------
  for (int via_api = 0; via_api < 2; ++via_api) {
    S24 s{3.25f + via_api, -99 - via_api, 1e300, reinterpret_cast<const void*>(0x1234567890ull)};
    reset();
    if (via_api) {
      void* args[] = {&s, &d_dout, &d_out};
      CK(cudaLaunchKernel(reinterpret_cast<const void*>(k_s24), dim3(1), dim3(1), args, 0,
                          nullptr));
    } else {
      k_s24<<<1, 1>>>(s, d_dout, d_out);
      CK_LAUNCH("k_s24");
    }
    ++launches;
    fetch();
    if (dout[0] != double(s.x) || dout[1] != s.z)
      gpu_test::fail("S24 doubles: %g %g, want %g %g", dout[0], dout[1], double(s.x), s.z);
    expect_eq("S24.y", via_api, out[0], ll(s.y));
    expect_eq("S24.q", via_api, out[1], reinterpret_cast<ll>(s.q));
  }

  // --- ~1 KiB struct, via both launch paths -------------------------------------------------
  for (int via_api = 0; via_api < 2; ++via_api) {
    Big b{};
    gpu_test::Rng rng(0x5eed0007 + via_api);
    for (int& v : b.data) v = static_cast<int>(rng.u32());
    b.scale = 0.75 + via_api;
    b.count = 250;
    reset();
    if (via_api) {
      void* args[] = {&b, &d_out};
      CK(cudaLaunchKernel(reinterpret_cast<const void*>(k_big), dim3(1), dim3(64), args, 0,
                          nullptr));
    } else {
      k_big<<<1, 64>>>(b, d_out);
      CK_LAUNCH("k_big");
    }
    ++launches;
    fetch();
    for (int k = 0; k < 250; ++k) expect_eq("Big.data", k, out[k], ll(b.data[k]));
    expect_eq("Big.scale*4096", via_api, out[250], ll(b.scale * 4096.0));
    expect_eq("Big.count", via_api, out[251], ll(b.count));
  }

  // --- scalars of every small type ------------------------------------------------------------
  {
    reset();
    k_scalars<<<1, 1>>>(static_cast<char>(-100), static_cast<short>(-12345), 6.02214076e23,
                        true, static_cast<unsigned char>(250), -0.15625f, -0x123456789ALL,
                        static_cast<unsigned short>(60000), static_cast<signed char>(-128),
                        0xFEDCBA98u, d_out, d_dout);
    CK_LAUNCH("k_scalars");
    ++launches;
    fetch();
    const ll want[8] = {-100, -12345, 1, 250, -0x123456789ALL, 60000, -128, 0xFEDCBA98LL};
    for (int k = 0; k < 8; ++k) expect_eq("scalar", k, out[k], want[k]);
    if (dout[0] != 6.02214076e23 || dout[1] != -0.15625)
      gpu_test::fail("scalar doubles: %.17g %.17g", dout[0], dout[1]);
  }

  // --- vector types (16-byte aligned float4/double2 after smaller ones) -----------------------
  {
    reset();
    k_vectors<<<1, 1>>>(make_float4(1.5f, -2.5f, 3.5f, -4.5f), make_int2(-7, 8),
                        make_double2(1e-300, -1e300), make_char3(1, -2, 3),
                        make_short2(-32768, 32767), d_out, d_dout);
    CK_LAUNCH("k_vectors");
    ++launches;
    fetch();
    const double dw[6] = {1.5, -2.5, 3.5, -4.5, 1e-300, -1e300};
    for (int k = 0; k < 6; ++k)
      if (dout[k] != dw[k]) gpu_test::fail("vector double %d: %g, want %g", k, dout[k], dw[k]);
    const ll iw[7] = {-7, 8, 1, -2, 3, -32768, 32767};
    for (int k = 0; k < 7; ++k) expect_eq("vector int", k, out[k], iw[k]);
  }

  // --- 26 parameters, via both launch paths ---------------------------------------------------
  for (int via_api = 0; via_api < 2; ++via_api) {
    char a0 = 1, a2 = -3, a9 = 9, a11 = -11, a21 = 21;
    double a1 = 2.125, a8 = -8.5, a14 = 14.25, a22 = -22.75;
    short a3 = -3003, a13 = 1313, a23 = -2323;
    int a4 = 400000 + via_api, a10 = -1010, a16 = 16, a17 = -17, a18 = 18, a19 = -19;
    ll a5 = 0x7000000000000005LL, a12 = -1212121212121LL, a24 = 2424242424LL;
    float a6 = 6.375f, a20 = -20.5f;
    bool a7 = true;
    unsigned char a15 = 215;
    reset();
    if (via_api) {
      void* args[] = {&a0,  &a1,  &a2,  &a3,  &a4,  &a5,  &a6,  &a7,  &a8,
                      &a9,  &a10, &a11, &a12, &a13, &a14, &a15, &a16, &a17,
                      &a18, &a19, &a20, &a21, &a22, &a23, &a24, &d_out};
      CK(cudaLaunchKernel(reinterpret_cast<const void*>(k_many), dim3(1), dim3(1), args, 0,
                          nullptr));
    } else {
      k_many<<<1, 1>>>(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
                       a16, a17, a18, a19, a20, a21, a22, a23, a24, d_out);
      CK_LAUNCH("k_many");
    }
    ++launches;
    fetch();
    const ll want[25] = {a0,  ll(a1 * 8),  a2,  a3,  a4,  a5,  ll(a6 * 8),  a7,  ll(a8 * 8),
                         a9,  a10,         a11, a12, a13, ll(a14 * 8), a15, a16, a17,
                         a18, a19,         ll(a20 * 8), a21, ll(a22 * 8), a23, a24};
    for (int k = 0; k < 25; ++k) expect_eq("k_many param", k, out[k], want[k]);
  }

  CK(cudaDeviceSynchronize());
  CK(cudaFree(d_out));
  CK(cudaFree(d_dout));
  CK(cudaFree(d_fout));
  CK(cudaFree(d_target));
  gpu_test::pass("%d launches: Mixed(%zu B), WithArray(%zu B), S24, Big(%zu B), 10 scalars, "
                 "5 vector types, 26 params; <<<>>> and cudaLaunchKernel agree",
                 launches, sizeof(Mixed), sizeof(WithArray), sizeof(Big));
  return 0;
}

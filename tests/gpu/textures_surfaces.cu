// textures_surfaces: texture and surface objects on CUDA arrays and linear memory, checked
// against a CPU reference. Texture objects on 1D, 2D and 3D float arrays with point and linear
// filtering (unnormalised and normalised coordinates, clamp and wrap), a uchar4 array read as
// normalised floats, a 2D layered array, a mipmapped array sampled per level, a texture on
// pitched linear memory (cudaResourceTypePitch2D) and on linear memory (tex1Dfetch); surface
// writes (surf2Dwrite, surf2Dread/surf2Dwrite in place, surf3Dwrite) read back with array copies;
// an image rotated through a normalised, wrapping, linearly filtered texture (NVIDIA's
// simpleTexture sample). Texture descriptors are read back with cudaGetTextureObject*Desc.
// Linear filtering uses the hardware's 9-bit fixed-point weights: reads at texel centres and
// exact midpoints (weights 0 and 0.5) are exact; the rotation is checked within 1/128.
// The deprecated 1D array copies are exercised on purpose.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define GPU_TEST_NAME "textures_surfaces"
#include "gpu_test.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace {

__global__ void read1d(cudaTextureObject_t t, float* out, int n, float offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1D<float>(t, i + offset);
}
__global__ void read2d(cudaTextureObject_t t, float* out, int w, int h, float dx, float dy, bool normalized) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float u = x + dx, v = y + dy;
  if (normalized) u /= w, v /= h;
  out[y * w + x] = tex2D<float>(t, u, v);
}
__global__ void read3d(cudaTextureObject_t t, float* out, int w, int h, int d, float off) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y, z = blockIdx.z;
  if (x < w && y < h && z < d) out[(z * h + y) * w + x] = tex3D<float>(t, x + off, y + off, z + off);
}
__global__ void read_uchar4(cudaTextureObject_t t, float4* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float4>(t, x + 0.5f, y + 0.5f);
}
__global__ void read_layered(cudaTextureObject_t t, float* out, int w, int h, int layers) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y, l = blockIdx.z;
  if (x < w && y < h && l < layers) out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}
__global__ void read_lod(cudaTextureObject_t t, float* out, int levels) {
  int l = threadIdx.x;
  if (l < levels) out[l] = tex2DLod<float>(t, 0.5f, 0.5f, static_cast<float>(l));
}
__global__ void fetch_linear(cudaTextureObject_t t, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(t, i);
}
__global__ void write_surface(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) surf2Dwrite(static_cast<float>(y * 1000 + x), s, x * static_cast<int>(sizeof(float)), y);
}
__global__ void square_surface(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float v = surf2Dread<float>(s, x * static_cast<int>(sizeof(float)), y);
  surf2Dwrite(v * v, s, x * static_cast<int>(sizeof(float)), y);
}
__global__ void write_surface3d(cudaSurfaceObject_t s, int w, int h, int d) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y, z = blockIdx.z;
  if (x < w && y < h && z < d) surf3Dwrite(static_cast<int>((z * 100 + y) * 100 + x), s, x * 4, y, z);
}
// simpleTexture: rotate by `angle` around the centre, normalised coordinates.
__global__ void rotate(cudaTextureObject_t t, float* out, int w, int h, float angle) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float u = static_cast<float>(x) / w - 0.5f, v = static_cast<float>(y) / h - 0.5f;
  float tu = u * cosf(angle) - v * sinf(angle) + 0.5f, tv = v * cosf(angle) + u * sinf(angle) + 0.5f;
  out[y * w + x] = tex2D<float>(t, tu, tv);
}

void check_close(const char* what, const std::vector<float>& got, const std::vector<float>& want, float tol) {
  for (size_t i = 0; i < want.size(); i++)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0f + std::fabs(want[i]))))
      gpu_test::fail("%s: element %zu is %.6f, expected %.6f", what, i, got[i], want[i]);
  gpu_test::info("%s: %zu values ok", what, want.size());
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  gpu_test::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.sym();
  return v;
}

cudaTextureObject_t array_texture(cudaArray_t a, cudaTextureFilterMode filter, bool normalized,
                                  cudaTextureAddressMode mode = cudaAddressModeClamp,
                                  cudaTextureReadMode read = cudaReadModeElementType) {
  cudaResourceDesc r = {};
  r.resType = cudaResourceTypeArray;
  r.res.array.array = a;
  cudaTextureDesc t = {};
  t.addressMode[0] = t.addressMode[1] = t.addressMode[2] = mode;
  t.filterMode = filter;
  t.readMode = read;
  t.normalizedCoords = normalized ? 1 : 0;
  cudaTextureObject_t o = 0;
  CK(cudaCreateTextureObject(&o, &r, &t, nullptr));
  return o;
}

template <typename T>
std::vector<T> device_to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

void one_d() {
  const int n = 256;
  std::vector<float> data = random_floats(n, 1);
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CK(cudaMallocArray(&a, &f, n));
  CK(cudaMemcpyToArray(a, 0, 0, data.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  float* out;
  CK(cudaMalloc(&out, n * sizeof(float)));
  cudaTextureObject_t point = array_texture(a, cudaFilterModePoint, false);
  read1d<<<1, n>>>(point, out, n, 0.5f);
  CK_LAUNCH("read1d point");
  check_close("1D point", device_to_host(out, n), data, 0);
  cudaTextureObject_t lin = array_texture(a, cudaFilterModeLinear, false);
  read1d<<<1, n - 1>>>(lin, out, n - 1, 1.0f);  // halfway between texels i and i+1
  CK_LAUNCH("read1d linear");
  std::vector<float> mid(n - 1);
  for (int i = 0; i < n - 1; i++) mid[i] = 0.5f * (data[i] + data[i + 1]);
  check_close("1D linear midpoints", device_to_host(out, n - 1), mid, 1e-5f);
  cudaTextureDesc back;
  CK(cudaGetTextureObjectTextureDesc(&back, lin));
  if (back.filterMode != cudaFilterModeLinear || back.normalizedCoords != 0) gpu_test::fail("texture desc read back differs");
  CK(cudaDestroyTextureObject(point));
  CK(cudaDestroyTextureObject(lin));
  CK(cudaFree(out));
  CK(cudaFreeArray(a));
}

void two_d() {
  const int w = 64, h = 48;
  std::vector<float> data = random_floats(w * h, 2);
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CK(cudaMallocArray(&a, &f, w, h));
  CK(cudaMemcpy2DToArray(a, 0, 0, data.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  float* out;
  CK(cudaMalloc(&out, w * h * sizeof(float)));
  dim3 b(16, 16), g((w + 15) / 16, (h + 15) / 16);
  cudaTextureObject_t point = array_texture(a, cudaFilterModePoint, true);
  read2d<<<g, b>>>(point, out, w, h, 0.5f, 0.5f, true);
  CK_LAUNCH("read2d point normalised");
  check_close("2D point, normalised coordinates", device_to_host(out, w * h), data, 0);
  cudaTextureObject_t lin = array_texture(a, cudaFilterModeLinear, false);
  read2d<<<g, b>>>(lin, out, w, h, 1.0f, 1.0f, false);
  CK_LAUNCH("read2d linear");
  std::vector<float> want(w * h), got = device_to_host(out, w * h);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int x1 = std::min(x + 1, w - 1), y1 = std::min(y + 1, h - 1);  // clamp
      want[y * w + x] = 0.25f * (data[y * w + x] + data[y * w + x1] + data[y1 * w + x] + data[y1 * w + x1]);
    }
  check_close("2D linear, four-texel midpoints (clamped)", got, want, 1e-5f);
  CK(cudaDestroyTextureObject(point));
  CK(cudaDestroyTextureObject(lin));

  // simpleTexture: rotate through a wrapping, normalised, linear texture.
  const float angle = 0.5f;
  cudaTextureObject_t rot = array_texture(a, cudaFilterModeLinear, true, cudaAddressModeWrap);
  rotate<<<g, b>>>(rot, out, w, h, angle);
  CK_LAUNCH("rotate");
  got = device_to_host(out, w * h);
  auto texel = [&](int x, int y) { return data[((y % h + h) % h) * w + ((x % w + w) % w)]; };
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      float u = static_cast<float>(x) / w - 0.5f, v = static_cast<float>(y) / h - 0.5f;
      float tu = u * cosf(angle) - v * sinf(angle) + 0.5f, tv = v * cosf(angle) + u * sinf(angle) + 0.5f;
      float px = tu * w - 0.5f, py = tv * h - 0.5f;
      int x0 = static_cast<int>(std::floor(px)), y0 = static_cast<int>(std::floor(py));
      float ax = px - x0, ay = py - y0;
      want[y * w + x] = (1 - ax) * (1 - ay) * texel(x0, y0) + ax * (1 - ay) * texel(x0 + 1, y0) +
                        (1 - ax) * ay * texel(x0, y0 + 1) + ax * ay * texel(x0 + 1, y0 + 1);
    }
  for (int i = 0; i < w * h; i++)
    if (std::fabs(got[i] - want[i]) > 1.0f / 128) gpu_test::fail("rotate: pixel %d is %f, expected %f", i, got[i], want[i]);
  gpu_test::info("rotate (simpleTexture): %d pixels within 1/128", w * h);
  CK(cudaDestroyTextureObject(rot));
  CK(cudaFree(out));
  CK(cudaFreeArray(a));
}

void three_d() {
  const int w = 16, h = 12, d = 8;
  std::vector<float> data = random_floats(w * h * d, 3);
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CK(cudaMalloc3DArray(&a, &f, make_cudaExtent(w, h, d)));
  cudaMemcpy3DParms p = {};
  p.srcPtr = make_cudaPitchedPtr(data.data(), w * sizeof(float), w, h);
  p.dstArray = a;
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&p));
  float* out;
  CK(cudaMalloc(&out, w * h * d * sizeof(float)));
  dim3 b(16, 16), g(1, 1, d);
  cudaTextureObject_t point = array_texture(a, cudaFilterModePoint, false);
  read3d<<<g, b>>>(point, out, w, h, d, 0.5f);
  CK_LAUNCH("read3d point");
  check_close("3D point", device_to_host(out, w * h * d), data, 0);
  cudaTextureObject_t lin = array_texture(a, cudaFilterModeLinear, false);
  read3d<<<dim3(1, 1, d - 1), b>>>(lin, out, w - 1, h - 1, d - 1, 1.0f);
  CK_LAUNCH("read3d linear");
  std::vector<float> got = device_to_host(out, (w - 1) * (h - 1) * (d - 1)), want(got.size());
  for (int z = 0; z < d - 1; z++)
    for (int y = 0; y < h - 1; y++)
      for (int x = 0; x < w - 1; x++) {
        float s = 0;
        for (int c = 0; c < 8; c++) s += data[((z + (c >> 2)) * h + y + ((c >> 1) & 1)) * w + x + (c & 1)];
        want[(z * (h - 1) + y) * (w - 1) + x] = s / 8;
      }
  check_close("3D linear, eight-texel midpoints", got, want, 1e-5f);
  CK(cudaDestroyTextureObject(point));
  CK(cudaDestroyTextureObject(lin));
  CK(cudaFree(out));
  CK(cudaFreeArray(a));
}

void normalized_uchar4() {
  const int w = 32, h = 8;
  gpu_test::Rng r(4);
  std::vector<uchar4> data(w * h);
  for (auto& v : data) v = make_uchar4(r.u32() & 255, r.u32() & 255, r.u32() & 255, r.u32() & 255);
  cudaChannelFormatDesc f = cudaCreateChannelDesc<uchar4>();
  cudaArray_t a;
  CK(cudaMallocArray(&a, &f, w, h));
  CK(cudaMemcpy2DToArray(a, 0, 0, data.data(), w * 4, w * 4, h, cudaMemcpyHostToDevice));
  cudaTextureObject_t t = array_texture(a, cudaFilterModePoint, false, cudaAddressModeClamp, cudaReadModeNormalizedFloat);
  float4* out;
  CK(cudaMalloc(&out, w * h * sizeof(float4)));
  read_uchar4<<<dim3(1, 1), dim3(w, h)>>>(t, out, w, h);
  CK_LAUNCH("read_uchar4");
  std::vector<float4> got = device_to_host(out, w * h);
  for (int i = 0; i < w * h; i++) {
    const float want[4] = {data[i].x / 255.0f, data[i].y / 255.0f, data[i].z / 255.0f, data[i].w / 255.0f};
    const float have[4] = {got[i].x, got[i].y, got[i].z, got[i].w};
    for (int c = 0; c < 4; c++)
      if (std::fabs(have[c] - want[c]) > 1e-6f) gpu_test::fail("uchar4 normalised: texel %d channel %d %f != %f", i, c, have[c], want[c]);
  }
  gpu_test::info("uchar4 array read as normalised floats: %d texels ok", w * h);
  CK(cudaDestroyTextureObject(t));
  CK(cudaFree(out));
  CK(cudaFreeArray(a));
}

void layered_and_mipmapped() {
  const int w = 20, h = 10, layers = 3;
  std::vector<float> data = random_floats(w * h * layers, 5);
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CK(cudaMalloc3DArray(&a, &f, make_cudaExtent(w, h, layers), cudaArrayLayered));
  cudaMemcpy3DParms p = {};
  p.srcPtr = make_cudaPitchedPtr(data.data(), w * sizeof(float), w, h);
  p.dstArray = a;
  p.extent = make_cudaExtent(w, h, layers);
  p.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&p));
  cudaTextureObject_t t = array_texture(a, cudaFilterModePoint, false);
  float* out;
  CK(cudaMalloc(&out, w * h * layers * sizeof(float)));
  read_layered<<<dim3(1, 1, layers), dim3(32, 16)>>>(t, out, w, h, layers);
  CK_LAUNCH("read_layered");
  check_close("2D layered array", device_to_host(out, w * h * layers), data, 0);
  CK(cudaDestroyTextureObject(t));
  CK(cudaFreeArray(a));

  // A mipmapped array, each level filled with its number, sampled per level of detail.
  const int levels = 4;
  cudaMipmappedArray_t mm;
  CK(cudaMallocMipmappedArray(&mm, &f, make_cudaExtent(64, 64, 0), levels));
  for (int l = 0; l < levels; l++) {
    cudaArray_t level;
    CK(cudaGetMipmappedArrayLevel(&level, mm, l));
    cudaExtent e;
    CK(cudaArrayGetInfo(nullptr, &e, nullptr, level));
    if (e.width != static_cast<size_t>(64 >> l)) gpu_test::fail("level %d is %zu wide", l, e.width);
    std::vector<float> fill(e.width * e.height, static_cast<float>(l + 1));
    CK(cudaMemcpy2DToArray(level, 0, 0, fill.data(), e.width * 4, e.width * 4, e.height, cudaMemcpyHostToDevice));
  }
  cudaResourceDesc r = {};
  r.resType = cudaResourceTypeMipmappedArray;
  r.res.mipmap.mipmap = mm;
  cudaTextureDesc td = {};
  td.filterMode = cudaFilterModePoint;
  td.mipmapFilterMode = cudaFilterModePoint;
  td.normalizedCoords = 1;
  td.maxMipmapLevelClamp = levels - 1;
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t tm;
  CK(cudaCreateTextureObject(&tm, &r, &td, nullptr));
  read_lod<<<1, levels>>>(tm, out, levels);
  CK_LAUNCH("read_lod");
  std::vector<float> want(levels);
  for (int l = 0; l < levels; l++) want[l] = static_cast<float>(l + 1);
  check_close("mipmapped array, per level", device_to_host(out, levels), want, 0);
  CK(cudaDestroyTextureObject(tm));
  CK(cudaFreeMipmappedArray(mm));
  CK(cudaFree(out));
}

void linear_memory() {
  const int w = 50, h = 30;
  std::vector<float> data = random_floats(w * h, 6);
  void* pitched;
  size_t pitch;
  CK(cudaMallocPitch(&pitched, &pitch, w * sizeof(float), h));
  CK(cudaMemcpy2D(pitched, pitch, data.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  cudaResourceDesc r = {};
  r.resType = cudaResourceTypePitch2D;
  r.res.pitch2D.devPtr = pitched;
  r.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  r.res.pitch2D.width = w;
  r.res.pitch2D.height = h;
  r.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc td = {};
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t t;
  CK(cudaCreateTextureObject(&t, &r, &td, nullptr));
  float* out;
  CK(cudaMalloc(&out, w * h * sizeof(float)));
  read2d<<<dim3((w + 15) / 16, (h + 15) / 16), dim3(16, 16)>>>(t, out, w, h, 0.5f, 0.5f, false);
  CK_LAUNCH("read2d pitched");
  check_close("texture on pitched linear memory", device_to_host(out, w * h), data, 0);
  cudaResourceDesc back;
  CK(cudaGetTextureObjectResourceDesc(&back, t));
  if (back.resType != cudaResourceTypePitch2D || back.res.pitch2D.pitchInBytes != pitch) gpu_test::fail("pitched resource desc");
  CK(cudaDestroyTextureObject(t));

  float* lin;
  CK(cudaMalloc(&lin, w * h * sizeof(float)));
  CK(cudaMemcpy(lin, data.data(), w * h * sizeof(float), cudaMemcpyHostToDevice));
  cudaResourceDesc rl = {};
  rl.resType = cudaResourceTypeLinear;
  rl.res.linear.devPtr = lin;
  rl.res.linear.desc = cudaCreateChannelDesc<float>();
  rl.res.linear.sizeInBytes = w * h * sizeof(float);
  CK(cudaCreateTextureObject(&t, &rl, &td, nullptr));
  fetch_linear<<<(w * h + 255) / 256, 256>>>(t, out, w * h);
  CK_LAUNCH("fetch_linear");
  check_close("tex1Dfetch on linear memory", device_to_host(out, w * h), data, 0);
  CK(cudaDestroyTextureObject(t));
  CK(cudaFree(lin));
  CK(cudaFree(out));
  CK(cudaFree(pitched));
}

void surfaces() {
  const int w = 40, h = 24;
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CK(cudaMallocArray(&a, &f, w, h, cudaArraySurfaceLoadStore));
  cudaResourceDesc r = {};
  r.resType = cudaResourceTypeArray;
  r.res.array.array = a;
  cudaSurfaceObject_t s;
  CK(cudaCreateSurfaceObject(&s, &r));
  dim3 b(16, 16), g((w + 15) / 16, (h + 15) / 16);
  write_surface<<<g, b>>>(s, w, h);
  CK_LAUNCH("write_surface");
  std::vector<float> got(w * h), want(w * h);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) want[y * w + x] = static_cast<float>(y * 1000 + x);
  CK(cudaMemcpy2DFromArray(got.data(), w * 4, a, 0, 0, w * 4, h, cudaMemcpyDeviceToHost));
  check_close("surf2Dwrite read back", got, want, 0);
  square_surface<<<g, b>>>(s, w, h);
  CK_LAUNCH("square_surface");
  for (auto& v : want) v *= v;
  CK(cudaMemcpy2DFromArray(got.data(), w * 4, a, 0, 0, w * 4, h, cudaMemcpyDeviceToHost));
  check_close("surf2Dread then surf2Dwrite in place", got, want, 0);
  CK(cudaDestroySurfaceObject(s));
  CK(cudaFreeArray(a));

  const int d = 4;
  cudaChannelFormatDesc fi = cudaCreateChannelDesc<int>();
  CK(cudaMalloc3DArray(&a, &fi, make_cudaExtent(w, h, d), cudaArraySurfaceLoadStore));
  r.res.array.array = a;
  CK(cudaCreateSurfaceObject(&s, &r));
  write_surface3d<<<dim3(g.x, g.y, d), b>>>(s, w, h, d);
  CK_LAUNCH("write_surface3d");
  std::vector<int> vol(w * h * d);
  cudaMemcpy3DParms p = {};
  p.srcArray = a;
  p.dstPtr = make_cudaPitchedPtr(vol.data(), w * 4, w, h);
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyDeviceToHost;
  CK(cudaMemcpy3D(&p));
  for (int z = 0; z < d; z++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        if (vol[(z * h + y) * w + x] != (z * 100 + y) * 100 + x) gpu_test::fail("surf3Dwrite at (%d, %d, %d)", x, y, z);
  gpu_test::info("surf3Dwrite read back: %d values ok", w * h * d);
  CK(cudaDestroySurfaceObject(s));
  CK(cudaFreeArray(a));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  one_d();
  two_d();
  three_d();
  normalized_uchar4();
  layered_and_mipmapped();
  linear_memory();
  surfaces();
  gpu_test::pass("textures on 1D/2D/3D/layered/mipmapped arrays and linear memory, surfaces in 2D and 3D");
  return 0;
}

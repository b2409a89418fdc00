// CUDA arrays on the host backend (issue 14): every copy form to, from and between 1D, 2D,
// layered and 3D arrays and mipmap levels (pageable and pinned host memory, device memory,
// synchronous and asynchronous, 2D with pitches, 3D with positions) round-tripped byte for
// byte against a model of the array kept here; descriptors queried; texture and surface
// objects on arrays and on linear and pitched memory created, described and destroyed (memory
// named from where it starts, as CUDA lets it extend past its allocation); bad handles,
// extents, element sizes and directions refused with CUDA's errors. Remora only: memory that
// is not this process's (freed, host) is refused where CUDA would not look.
//   arrays                 the round trips and refusals
//   arrays quota LIMIT_MIB as a tenant of LIMIT_MIB: 16 MiB arrays fill the quota exactly,
//                          the next is refused, a free makes room; exits holding arrays
// The deprecated 1D array copies are exercised on purpose.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cstdint>
#include <vector>

#include "app_check.h"

namespace {

// The model of an array: its bytes packed (rows of row_bytes, `rows` rows per slice).
struct Model {
  size_t row_bytes, rows, slices;
  std::vector<unsigned char> bytes;
  Model(size_t rb, size_t r, size_t s) : row_bytes(rb), rows(r), slices(s), bytes(rb * r * s) {}
  unsigned char* At(size_t x, size_t y, size_t z) { return &bytes[(z * rows + y) * row_bytes + x]; }
  // Writes `height` rows of `width` bytes from `src` (rows `pitch` apart) at (x, y, z).
  void Put(size_t x, size_t y, size_t z, const unsigned char* src, size_t pitch, size_t width, size_t height) {
    for (size_t r = 0; r < height; r++) std::memcpy(At(x, y + r, z), src + r * pitch, width);
  }
};

// Reads the whole array back (a 3D copy into packed host memory) and compares with the model.
void Verify(cudaArray_t a, Model& m, size_t elem, const char* what) {
  std::vector<unsigned char> back(m.bytes.size(), 0xee);
  cudaMemcpy3DParms p = {};
  p.srcArray = a;
  p.dstPtr = make_cudaPitchedPtr(back.data(), m.row_bytes, m.row_bytes / elem, m.rows);
  p.extent = make_cudaExtent(m.row_bytes / elem, m.rows, m.slices);
  p.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&p));
  REQUIRE(back == m.bytes, "%s: the array's content differs from the model", what);
  std::printf("%s: ok\n", what);
}

void OneD() {
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CHECK(cudaMallocArray(&a, &f, 1000, 0));
  Model m(4000, 1, 1);
  std::vector<unsigned char> src = RandomBytes(4000, 11);
  CHECK(cudaMemcpyToArray(a, 0, 0, src.data(), 4000, cudaMemcpyHostToDevice));
  m.Put(0, 0, 0, src.data(), 4000, 4000, 1);
  std::vector<unsigned char> part = RandomBytes(400, 12);
  CHECK(cudaMemcpyToArray(a, 800, 0, part.data(), 400, cudaMemcpyDefault));
  m.Put(800, 0, 0, part.data(), 400, 400, 1);
  std::vector<unsigned char> back(4000);
  CHECK(cudaMemcpyFromArray(back.data(), a, 0, 0, 4000, cudaMemcpyDeviceToHost));
  REQUIRE(back == m.bytes, "1D array read back differs");
  std::vector<unsigned char> piece(400);
  CHECK(cudaMemcpyFromArray(piece.data(), a, 600, 0, 400, cudaMemcpyDeviceToHost));
  REQUIRE(std::memcmp(piece.data(), m.At(600, 0, 0), 400) == 0, "1D array read at an offset differs");
  // Asynchronous forms, pinned memory, a stream.
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char* pinned;
  CHECK(cudaMallocHost(&pinned, 4000));
  std::vector<unsigned char> next = RandomBytes(4000, 13);
  std::memcpy(pinned, next.data(), 4000);
  CHECK(cudaMemcpyToArrayAsync(a, 0, 0, pinned, 4000, cudaMemcpyHostToDevice, s));
  m.Put(0, 0, 0, next.data(), 4000, 4000, 1);
  std::memset(pinned, 0, 4000);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpyFromArrayAsync(pinned, a, 0, 0, 4000, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(std::memcmp(pinned, m.bytes.data(), 4000) == 0, "1D asynchronous round trip differs");
  // Device memory to and from the array, and array to array.
  unsigned char* d;
  CHECK(cudaMalloc(&d, 4000));
  CHECK(cudaMemcpyFromArray(d, a, 0, 0, 4000, cudaMemcpyDeviceToDevice));
  cudaArray_t b;
  CHECK(cudaMallocArray(&b, &f, 1000));
  CHECK(cudaMemcpyToArray(b, 0, 0, d, 4000, cudaMemcpyDeviceToDevice));
  Verify(b, m, 4, "1D: device memory to array and back");
  CHECK(cudaMemcpyArrayToArray(b, 40, 0, a, 400, 0, 80, cudaMemcpyDeviceToDevice));
  Model mb = m;
  std::memmove(mb.At(40, 0, 0), m.At(400, 0, 0), 80);
  Verify(b, mb, 4, "1D: array to array at offsets");
  // Out of the array, or not whole elements.
  EXPECT_ERR(cudaMemcpyToArray(a, 3800, 0, src.data(), 400, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpyToArray(a, 2, 0, src.data(), 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpyFromArray(back.data(), a, 0, 0, 6, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpyToArray(a, 0, 0, src.data(), 4, cudaMemcpyDeviceToHost), cudaErrorInvalidMemcpyDirection);
  Verify(a, m, 4, "1D: refused copies changed nothing");
  // Queries of sparse, deferred-mapping and multi-planar arrays, asked of a plain one.
  cudaArray_t plane = nullptr;
  EXPECT_ERR(cudaArrayGetPlane(&plane, a, 0), cudaErrorInvalidValue);
  cudaArraySparseProperties sparse;
  EXPECT_ERR(cudaArrayGetSparseProperties(&sparse, a), cudaErrorInvalidValue);
  cudaArrayMemoryRequirements req;
  EXPECT_ERR(cudaArrayGetMemoryRequirements(&req, a, 0), cudaErrorInvalidValue);
  CHECK(cudaFreeArray(b));
  CHECK(cudaFreeArray(a));
  EXPECT_ERR(cudaArrayGetPlane(&plane, b, 0), cudaErrorInvalidResourceHandle);
  CHECK(cudaFree(d));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaStreamDestroy(s));
}

void TwoD() {
  const size_t w = 37, h = 19, elem = 4, rb = w * elem;
  cudaChannelFormatDesc f = cudaCreateChannelDesc<uchar4>();
  cudaArray_t a, b;
  CHECK(cudaMallocArray(&a, &f, w, h, cudaArraySurfaceLoadStore));
  CHECK(cudaMallocArray(&b, &f, w, h));
  cudaChannelFormatDesc got;
  cudaExtent ext;
  unsigned flags = 0;
  CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
  REQUIRE(got.x == 8 && got.y == 8 && got.z == 8 && got.w == 8 && got.f == cudaChannelFormatKindUnsigned,
          "cudaArrayGetInfo channel %d %d %d %d kind %d", got.x, got.y, got.z, got.w, got.f);
  REQUIRE(ext.width == w && ext.height == h && ext.depth == 0 && flags == cudaArraySurfaceLoadStore,
          "cudaArrayGetInfo extent %zux%zux%zu flags %u", ext.width, ext.height, ext.depth, flags);
  CHECK(cudaGetChannelDesc(&got, b));
  REQUIRE(got.x == 8 && got.w == 8, "cudaGetChannelDesc");
  Model m(rb, h, 1);
  // Pageable source with a padded pitch.
  const size_t spitch = rb + 12;
  std::vector<unsigned char> src = RandomBytes(spitch * h, 21);
  CHECK(cudaMemcpy2DToArray(a, 0, 0, src.data(), spitch, rb, h, cudaMemcpyHostToDevice));
  m.Put(0, 0, 0, src.data(), spitch, rb, h);
  // A sub-rectangle at an offset.
  std::vector<unsigned char> sub = RandomBytes(20 * 5, 22);
  CHECK(cudaMemcpy2DToArray(a, 8, 3, sub.data(), 20, 20, 5, cudaMemcpyHostToDevice));
  m.Put(8, 3, 0, sub.data(), 20, 20, 5);
  Verify(a, m, elem, "2D: pageable rows with a pitch, and a sub-rectangle");
  const size_t dpitch = rb + 30;
  std::vector<unsigned char> back(dpitch * h, 0);
  CHECK(cudaMemcpy2DFromArray(back.data(), dpitch, a, 0, 0, rb, h, cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < h; y++) REQUIRE(std::memcmp(&back[y * dpitch], m.At(0, y, 0), rb) == 0, "2D read back row %zu", y);
  std::vector<unsigned char> subback(12 * 4);
  CHECK(cudaMemcpy2DFromArray(subback.data(), 12, a, 16, 10, 12, 4, cudaMemcpyDefault));
  for (size_t y = 0; y < 4; y++) REQUIRE(std::memcmp(&subback[y * 12], m.At(16, 10 + y, 0), 12) == 0, "2D sub-rect row %zu", y);
  // Asynchronous, pinned, on a stream.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  unsigned char* pinned;
  CHECK(cudaMallocHost(&pinned, spitch * h));
  std::vector<unsigned char> next = RandomBytes(spitch * h, 23);
  std::memcpy(pinned, next.data(), spitch * h);
  CHECK(cudaMemcpy2DToArrayAsync(a, 0, 0, pinned, spitch, rb, h, cudaMemcpyHostToDevice, s));
  m.Put(0, 0, 0, next.data(), spitch, rb, h);
  CHECK(cudaStreamSynchronize(s));
  std::memset(pinned, 0, spitch * h);
  CHECK(cudaMemcpy2DFromArrayAsync(pinned, spitch, a, 0, 0, rb, h, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (size_t y = 0; y < h; y++) REQUIRE(std::memcmp(pinned + y * spitch, m.At(0, y, 0), rb) == 0, "2D async row %zu", y);
  // Through pitched device memory, and array to array.
  void* dev;
  size_t pitch;
  CHECK(cudaMallocPitch(&dev, &pitch, rb, h));
  CHECK(cudaMemcpy2DFromArray(dev, pitch, a, 0, 0, rb, h, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy2DToArrayAsync(b, 0, 0, dev, pitch, rb, h, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaStreamSynchronize(s));
  Verify(b, m, elem, "2D: array to pitched device memory to array");
  CHECK(cudaMemcpy2DArrayToArray(b, 4, 2, a, 20, 6, 40, 7, cudaMemcpyDeviceToDevice));
  Model mb = m;
  for (size_t y = 0; y < 7; y++) std::memcpy(mb.At(4, 2 + y, 0), m.At(20, 6 + y, 0), 40);
  Verify(b, mb, elem, "2D: array to array, a sub-rectangle");
  // Refusals: past the extent, a pitch narrower than the row, partial elements.
  EXPECT_ERR(cudaMemcpy2DToArray(a, 0, 15, src.data(), spitch, rb, 5, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy2DToArray(a, 4, 0, src.data(), spitch, rb, 2, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy2DToArray(a, 0, 0, src.data(), 8, 16, 2, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
  EXPECT_ERR(cudaMemcpy2DFromArray(back.data(), dpitch, a, 0, 0, 6, 2, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 0, rb, h, cudaMemcpyHostToDevice), cudaErrorInvalidMemcpyDirection);
  EXPECT_ERR(cudaMemcpy2DFromArray(static_cast<char*>(dev) + pitch * h, pitch, a, 0, 0, rb, 2, cudaMemcpyDeviceToDevice),
             cudaErrorInvalidValue);
  Verify(a, m, elem, "2D: refused copies changed nothing");
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
}

void ThreeD(bool layered) {
  const size_t w = 9, h = 7, d = 5, elem = 8;  // float2
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float2>();
  cudaArray_t a, b;
  unsigned flags = layered ? cudaArrayLayered : 0;
  CHECK(cudaMalloc3DArray(&a, &f, make_cudaExtent(w, h, d), flags));
  CHECK(cudaMalloc3DArray(&b, &f, make_cudaExtent(w, h, d), flags));
  Model m(w * elem, h, d);
  // The whole volume from padded pageable memory (pitch and rows per slice both padded).
  const size_t pitch = w * elem + 16, rows = h + 2;
  std::vector<unsigned char> src = RandomBytes(pitch * rows * d, layered ? 31 : 32);
  cudaMemcpy3DParms p = {};
  p.srcPtr = make_cudaPitchedPtr(src.data(), pitch, w, rows);
  p.dstArray = a;
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&p));
  for (size_t z = 0; z < d; z++) m.Put(0, 0, z, &src[z * rows * pitch], pitch, w * elem, h);
  const char* what = layered ? "layered: a padded volume in" : "3D: a padded volume in";
  Verify(a, m, elem, what);
  // A box at positions (elements of the array, bytes of the host side), asynchronously.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  std::vector<unsigned char> box = RandomBytes(3 * elem * 2 * 2, 33);
  p = {};
  p.srcPtr = make_cudaPitchedPtr(box.data(), 3 * elem, 3, 2);
  p.dstArray = a;
  p.dstPos = make_cudaPos(4, 3, 2);
  p.extent = make_cudaExtent(3, 2, 2);
  p.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3DAsync(&p, s));
  for (size_t z = 0; z < 2; z++) m.Put(4 * elem, 3, 2 + z, &box[z * 2 * 3 * elem], 3 * elem, 3 * elem, 2);
  CHECK(cudaStreamSynchronize(s));
  Verify(a, m, elem, layered ? "layered: a box at a position, asynchronously" : "3D: a box at a position, asynchronously");
  // Out of the array, into 3D device memory and back into another array, array to array.
  std::vector<unsigned char> out(2 * elem * 3 * 4);
  p = {};
  p.srcArray = a;
  p.srcPos = make_cudaPos(6, 2, 1);
  p.dstPtr = make_cudaPitchedPtr(out.data(), 2 * elem, 2, 3);
  p.extent = make_cudaExtent(2, 3, 4);
  p.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3DAsync(&p, s));
  CHECK(cudaStreamSynchronize(s));
  for (size_t z = 0; z < 4; z++)
    for (size_t y = 0; y < 3; y++)
      REQUIRE(std::memcmp(&out[(z * 3 + y) * 2 * elem], m.At(6 * elem, 2 + y, 1 + z), 2 * elem) == 0, "3D box out z%zu y%zu", z, y);
  cudaPitchedPtr dev;
  CHECK(cudaMalloc3D(&dev, make_cudaExtent(w * elem, h, d)));
  p = {};
  p.srcArray = a;
  p.dstPtr = dev;
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3D(&p));
  p = {};
  p.srcPtr = dev;
  p.dstArray = b;
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyDefault;
  CHECK(cudaMemcpy3D(&p));
  Verify(b, m, elem, layered ? "layered: through 3D device memory" : "3D: through 3D device memory");
  p = {};
  p.srcArray = a;
  p.srcPos = make_cudaPos(1, 1, 1);
  p.dstArray = b;
  p.dstPos = make_cudaPos(5, 4, 0);
  p.extent = make_cudaExtent(4, 3, 4);
  p.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3D(&p));
  Model mb = m;
  for (size_t z = 0; z < 4; z++)
    for (size_t y = 0; y < 3; y++) std::memcpy(mb.At(5 * elem, 4 + y, z), m.At(1 * elem, 1 + y, 1 + z), 4 * elem);
  Verify(b, mb, elem, layered ? "layered: array to array, a box" : "3D: array to array, a box");
  // Past the depth.
  p = {};
  p.srcPtr = make_cudaPitchedPtr(src.data(), pitch, w, rows);
  p.dstArray = a;
  p.dstPos = make_cudaPos(0, 0, 3);
  p.extent = make_cudaExtent(w, h, 3);
  p.kind = cudaMemcpyHostToDevice;
  EXPECT_ERR(cudaMemcpy3D(&p), cudaErrorInvalidValue);
  Verify(a, m, elem, "3D: a refused copy changed nothing");
  CHECK(cudaFree(dev.ptr));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
}

void Mipmaps() {
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaMipmappedArray_t mm;
  CHECK(cudaMallocMipmappedArray(&mm, &f, make_cudaExtent(64, 32, 0), 4));
  cudaArray_t l2;
  CHECK(cudaGetMipmappedArrayLevel(&l2, mm, 2));
  cudaExtent ext;
  CHECK(cudaArrayGetInfo(nullptr, &ext, nullptr, l2));
  REQUIRE(ext.width == 16 && ext.height == 8, "level 2 of 64x32 is %zux%zu", ext.width, ext.height);
  Model m(16 * 4, 8, 1);
  std::vector<unsigned char> src = RandomBytes(16 * 4 * 8, 41);
  CHECK(cudaMemcpy2DToArray(l2, 0, 0, src.data(), 64, 64, 8, cudaMemcpyHostToDevice));
  m.Put(0, 0, 0, src.data(), 64, 64, 8);
  Verify(l2, m, 4, "mipmap level 2");
  EXPECT_ERR(cudaMemcpy2DToArray(l2, 0, 0, src.data(), 64, 64, 9, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetMipmappedArrayLevel(&l2, mm, 4), cudaErrorInvalidValue);
  cudaResourceDesc rd = {};
  rd.resType = cudaResourceTypeMipmappedArray;
  rd.res.mipmap.mipmap = mm;
  cudaTextureDesc td = {};
  td.filterMode = cudaFilterModeLinear;
  td.mipmapFilterMode = cudaFilterModeLinear;
  td.maxMipmapLevelClamp = 3;
  td.normalizedCoords = 1;
  cudaTextureObject_t t;
  CHECK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  cudaTextureDesc tback;
  CHECK(cudaGetTextureObjectTextureDesc(&tback, t));
  REQUIRE(tback.maxMipmapLevelClamp == 3 && tback.mipmapFilterMode == cudaFilterModeLinear, "mipmap texture desc");
  CHECK(cudaDestroyTextureObject(t));
  CHECK(cudaFreeMipmappedArray(mm));
  EXPECT_ERR(cudaMemcpy2DToArray(l2, 0, 0, src.data(), 64, 64, 8, cudaMemcpyHostToDevice), cudaErrorInvalidResourceHandle);
  std::printf("mipmapped array: ok\n");
}

void Objects() {
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CHECK(cudaMallocArray(&a, &f, 64, 32, cudaArraySurfaceLoadStore));
  cudaResourceDesc rd = {};
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = a;
  cudaTextureDesc td = {};
  td.addressMode[0] = cudaAddressModeClamp;
  td.addressMode[1] = cudaAddressModeWrap;
  td.filterMode = cudaFilterModeLinear;
  td.readMode = cudaReadModeElementType;
  td.normalizedCoords = 1;
  td.borderColor[2] = 0.5f;
  cudaTextureObject_t t;
  CHECK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  REQUIRE(t != 0, "a texture object is not 0");
  cudaResourceDesc rback;
  CHECK(cudaGetTextureObjectResourceDesc(&rback, t));
  REQUIRE(rback.resType == cudaResourceTypeArray && rback.res.array.array == a, "texture resource desc");
  cudaTextureDesc tback;
  CHECK(cudaGetTextureObjectTextureDesc(&tback, t));
  REQUIRE(tback.addressMode[0] == cudaAddressModeClamp && tback.addressMode[1] == cudaAddressModeWrap &&
              tback.filterMode == cudaFilterModeLinear && tback.readMode == cudaReadModeElementType &&
              tback.normalizedCoords == 1 && tback.borderColor[2] == 0.5f,
          "texture desc read back differs");
  cudaSurfaceObject_t s;
  CHECK(cudaCreateSurfaceObject(&s, &rd));
  CHECK(cudaGetSurfaceObjectResourceDesc(&rback, s));
  REQUIRE(rback.res.array.array == a, "surface resource desc");
  // Linear and pitched memory.
  float* lin;
  CHECK(cudaMalloc(&lin, 4096));
  cudaResourceDesc rl = {};
  rl.resType = cudaResourceTypeLinear;
  rl.res.linear.devPtr = lin;
  rl.res.linear.desc = f;
  rl.res.linear.sizeInBytes = 4096;
  cudaTextureDesc tp = {};
  tp.readMode = cudaReadModeElementType;
  cudaTextureObject_t tl;
  CHECK(cudaCreateTextureObject(&tl, &rl, &tp, nullptr));
  CHECK(cudaGetTextureObjectResourceDesc(&rback, tl));
  REQUIRE(rback.resType == cudaResourceTypeLinear && rback.res.linear.sizeInBytes == 4096 && rback.res.linear.desc.x == 32,
          "linear resource desc");
  // Past the allocation: CUDA makes it (NVIDIA's convolutionFFT2D reads a padded spectrum through
  // a texture over an unpadded one); what it names must start in device memory of this process.
  rl.res.linear.sizeInBytes = 8192;
  cudaTextureObject_t past;
  CHECK(cudaCreateTextureObject(&past, &rl, &tp, nullptr));
  CHECK(cudaDestroyTextureObject(past));
  float* freed;
  CHECK(cudaMalloc(&freed, 4096));
  CHECK(cudaFree(freed));
  rl.res.linear.devPtr = freed;
  rl.res.linear.sizeInBytes = 4096;
  cudaTextureObject_t bad;
  REQUIRE(cudaCreateTextureObject(&bad, &rl, &tp, nullptr) == cudaErrorInvalidValue, "a texture over freed memory was made");
  (void)cudaGetLastError();
  std::vector<float> host_side(1024);
  rl.res.linear.devPtr = host_side.data();
  REQUIRE(cudaCreateTextureObject(&bad, &rl, &tp, nullptr) == cudaErrorInvalidValue, "a texture over host memory was made");
  (void)cudaGetLastError();
  rl.res.linear.devPtr = lin;
  void* pitched;
  size_t pitch;
  CHECK(cudaMallocPitch(&pitched, &pitch, 100 * 4, 50));
  cudaResourceDesc rp = {};
  rp.resType = cudaResourceTypePitch2D;
  rp.res.pitch2D.devPtr = pitched;
  rp.res.pitch2D.desc = f;
  rp.res.pitch2D.width = 100;
  rp.res.pitch2D.height = 50;
  rp.res.pitch2D.pitchInBytes = pitch;
  cudaTextureObject_t tpitch;
  CHECK(cudaCreateTextureObject(&tpitch, &rp, &tp, nullptr));
  rp.res.pitch2D.height = 51;  // a row past the allocation: made, as by CUDA
  CHECK(cudaCreateTextureObject(&past, &rp, &tp, nullptr));
  CHECK(cudaDestroyTextureObject(past));
  rp.res.pitch2D.height = 50;
  rp.res.pitch2D.pitchInBytes = 100 * 4 - 4;  // a pitch smaller than a row
  REQUIRE(cudaCreateTextureObject(&bad, &rp, &tp, nullptr) != cudaSuccess, "a pitch smaller than a row was accepted");
  (void)cudaGetLastError();
  rp.res.pitch2D.pitchInBytes = pitch;
  // A surface needs an array; forged arrays and objects are refused.
  EXPECT_ERR(cudaCreateSurfaceObject(&s, &rl), cudaErrorInvalidValue);
  cudaResourceDesc forged = rd;
  forged.res.array.array = reinterpret_cast<cudaArray_t>(0x6400000000000010ull);
  EXPECT_ERR(cudaCreateTextureObject(&bad, &forged, &td, nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaDestroyTextureObject(t + 1000), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetTextureObjectTextureDesc(&tback, s), cudaErrorInvalidValue);  // a surface, not a texture
  CHECK(cudaDestroyTextureObject(tpitch));
  CHECK(cudaDestroyTextureObject(tl));
  CHECK(cudaDestroyTextureObject(t));
  EXPECT_ERR(cudaDestroyTextureObject(t), cudaErrorInvalidValue);
  CHECK(cudaDestroySurfaceObject(s));
  CHECK(cudaFree(lin));
  CHECK(cudaFree(pitched));
  CHECK(cudaFreeArray(a));
  std::printf("texture and surface objects: ok\n");
}

void Refusals() {
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  cudaChannelFormatDesc three = cudaCreateChannelDesc(32, 32, 32, 0, cudaChannelFormatKindFloat);
  EXPECT_ERR(cudaMallocArray(&a, &three, 16, 16), cudaErrorInvalidChannelDescriptor);
  EXPECT_ERR(cudaMallocArray(&a, &f, 0, 16), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMalloc3DArray(&a, &f, make_cudaExtent(16, 0, 4), 0), cudaErrorInvalidValue);
  auto forged = reinterpret_cast<cudaArray_t>(0x1234);
  float buf[16] = {};
  EXPECT_ERR(cudaMemcpy2DToArray(forged, 0, 0, buf, 64, 64, 1, cudaMemcpyHostToDevice), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaMemcpyFromArray(buf, forged, 0, 0, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaFreeArray(forged), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaArrayGetInfo(nullptr, nullptr, nullptr, forged), cudaErrorInvalidResourceHandle);
  CHECK(cudaMallocArray(&a, &f, 16, 16));
  CHECK(cudaFreeArray(a));
  EXPECT_ERR(cudaFreeArray(a), cudaErrorInvalidResourceHandle);  // freed twice
  EXPECT_ERR(cudaMemcpyToArray(a, 0, 0, buf, 64, cudaMemcpyHostToDevice), cudaErrorInvalidResourceHandle);
  CHECK(cudaFreeArray(nullptr));
  std::printf("refusals: ok\n");
}

int Quota(size_t limit_mib) {
  // float4 x 1024 x 1024 = 16 MiB each.
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float4>();
  std::vector<cudaArray_t> held;
  for (size_t i = 0; i < limit_mib / 16; i++) {
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &f, 1024, 1024));
    held.push_back(a);
  }
  cudaArray_t extra;
  EXPECT_ERR(cudaMallocArray(&extra, &f, 1024, 1024), cudaErrorMemoryAllocation);
  std::printf("%zu arrays of 16 MiB made, then cudaErrorMemoryAllocation\n", held.size());
  (void)cudaGetLastError();
  cudaMipmappedArray_t mm;
  EXPECT_ERR(cudaMallocMipmappedArray(&mm, &f, make_cudaExtent(64, 64, 0), 2), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  REQUIRE(free_b == 0, "full of arrays, free is %zu", free_b);
  CHECK(cudaFreeArray(held.back()));
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  REQUIRE(free_b == (16u << 20), "after a free, free is %zu", free_b);
  CHECK(cudaMallocArray(&held.back(), &f, 1024, 1024));
  std::printf("PASS arrays quota %zu (exiting with %zu arrays held)\n", limit_mib, held.size());
  return 0;  // the session's end releases them
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "quota") == 0) return Quota(std::strtoull(argv[2], nullptr, 0));
  REQUIRE(argc == 1, "usage: arrays [quota LIMIT_MIB]");
  OneD();
  TwoD();
  ThreeD(false);
  ThreeD(true);
  Mipmaps();
  Objects();
  Refusals();
  std::printf("PASS arrays\n");
  return 0;
}

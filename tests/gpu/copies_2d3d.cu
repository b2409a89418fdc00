// copies_2d3d: pitched 2D and 3D linear memory. cudaMallocPitch, cudaMemcpy2D (H2D, D2D, D2H,
// host pitches different from the width), cudaMemset2D on a sub-rectangle, cudaMemcpy2DAsync,
// kernels addressing rows through the pitch; cudaMalloc3D, cudaMemset3D on a sub-box,
// cudaMemcpy3D H2D / D2D / D2H with srcPos/dstPos offsets (make_cudaPitchedPtr,
// make_cudaExtent, make_cudaPos), cudaMemcpy3DAsync. Everything is checked element by element,
// and the row padding of the pitched allocations (preset with cudaMemset over the whole
// pitch * rows) and of the host buffers must stay untouched.
#define GPU_TEST_NAME "copies_2d3d"
#include "gpu_test.h"

#include <cstring>
#include <vector>

using u32 = uint32_t;

__global__ void transform_2d(u32* base, size_t pitch, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) {
    u32* row = reinterpret_cast<u32*>(reinterpret_cast<char*>(base) + y * pitch);
    row[x] = row[x] * 2u + u32(y);
  }
}

__global__ void transform_3d(cudaPitchedPtr p, int w, int h, int d) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z;
  if (x < w && y < h && z < d) {
    char* slice = static_cast<char*>(p.ptr) + size_t(z) * p.pitch * p.ysize;
    u32* row = reinterpret_cast<u32*>(slice + size_t(y) * p.pitch);
    row[x] = row[x] * 3u + u32(x + 7 * y + 11 * z);
  }
}

static u32 byte_pattern(unsigned char b) { return 0x01010101u * b; }

// Value of row y, column x in a raw dump with the given pitch.
static u32 at(const std::vector<unsigned char>& raw, size_t pitch, int x, int y) {
  u32 v;
  std::memcpy(&v, raw.data() + size_t(y) * pitch + size_t(x) * 4, 4);
  return v;
}

static void check_padding(const std::vector<unsigned char>& raw, size_t pitch, size_t wbytes,
                          int rows, unsigned char pad, const char* what) {
  for (int y = 0; y < rows; ++y)
    for (size_t b = wbytes; b < pitch; ++b)
      if (raw[size_t(y) * pitch + b] != pad)
        gpu_test::fail("%s: padding byte %zu of row %d is 0x%02x, want 0x%02x", what, b, y,
                       raw[size_t(y) * pitch + b], pad);
}

int main() {
  gpu_test::Rng rng(0x5eed000a);
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  size_t padding_bytes_checked = 0;

  // ================================ 2D =======================================================
  const int W = 1000, H = 37;
  const size_t wbytes = W * sizeof(u32);
  u32* d = nullptr;
  size_t pitch = 0;
  CK(cudaMallocPitch(reinterpret_cast<void**>(&d), &pitch, wbytes, H));
  if (pitch < wbytes) gpu_test::fail("cudaMallocPitch pitch %zu < width %zu", pitch, wbytes);
  CK(cudaMemset(d, 0xAB, pitch * H));

  const int hp = W + 13;  // host pitch in elements
  std::vector<u32> hsrc(size_t(hp) * H);
  for (auto& v : hsrc) v = rng.u32();
  CK(cudaMemcpy2D(d, pitch, hsrc.data(), hp * sizeof(u32), wbytes, H, cudaMemcpyHostToDevice));
  std::vector<unsigned char> raw(pitch * H);
  CK(cudaMemcpy(raw.data(), d, pitch * H, cudaMemcpyDeviceToHost));
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      if (at(raw, pitch, x, y) != hsrc[size_t(y) * hp + x])
        gpu_test::fail("cudaMemcpy2D H2D: (%d,%d) = 0x%08x, want 0x%08x", x, y,
                       at(raw, pitch, x, y), hsrc[size_t(y) * hp + x]);
  check_padding(raw, pitch, wbytes, H, 0xAB, "cudaMemcpy2D H2D");
  padding_bytes_checked += (pitch - wbytes) * H;

  // Expected device contents, maintained on the host.
  std::vector<u32> ref(size_t(W) * H);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) ref[size_t(y) * W + x] = hsrc[size_t(y) * hp + x];

  // cudaMemset2D on a sub-rectangle (columns 100..139, rows 20..29).
  const int r0 = 20, c0 = 100, rw = 40, rh = 10;
  CK(cudaMemset2D(reinterpret_cast<char*>(d) + r0 * pitch + c0 * sizeof(u32), pitch, 0x11,
                  rw * sizeof(u32), rh));
  for (int y = r0; y < r0 + rh; ++y)
    for (int x = c0; x < c0 + rw; ++x) ref[size_t(y) * W + x] = byte_pattern(0x11);

  // Kernel through the pitch.
  transform_2d<<<dim3((W + 31) / 32, (H + 7) / 8), dim3(32, 8)>>>(d, pitch, W, H);
  CK_LAUNCH("transform_2d");
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) ref[size_t(y) * W + x] = ref[size_t(y) * W + x] * 2u + u32(y);
  CK(cudaMemcpy(raw.data(), d, pitch * H, cudaMemcpyDeviceToHost));
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      if (at(raw, pitch, x, y) != ref[size_t(y) * W + x])
        gpu_test::fail("after cudaMemset2D + kernel: (%d,%d) = 0x%08x, want 0x%08x", x, y,
                       at(raw, pitch, x, y), ref[size_t(y) * W + x]);
  check_padding(raw, pitch, wbytes, H, 0xAB, "cudaMemset2D + kernel");

  // D2H into a host buffer with a larger pitch: host padding must survive.
  const int hp2 = W + 5;
  std::vector<u32> hdst(size_t(hp2) * H, 0xDEADBEEFu);
  CK(cudaMemcpy2D(hdst.data(), hp2 * sizeof(u32), d, pitch, wbytes, H, cudaMemcpyDeviceToHost));
  for (int y = 0; y < H; ++y) {
    for (int x = 0; x < W; ++x)
      if (hdst[size_t(y) * hp2 + x] != ref[size_t(y) * W + x])
        gpu_test::fail("cudaMemcpy2D D2H: (%d,%d) = 0x%08x, want 0x%08x", x, y,
                       hdst[size_t(y) * hp2 + x], ref[size_t(y) * W + x]);
    for (int x = W; x < hp2; ++x)
      if (hdst[size_t(y) * hp2 + x] != 0xDEADBEEFu)
        gpu_test::fail("cudaMemcpy2D D2H wrote host padding at (%d,%d)", x, y);
  }

  // D2D sub-rectangle into a second pitched allocation of another shape.
  const int W2 = 1500, H2 = 50;
  u32* d2 = nullptr;
  size_t pitch2 = 0;
  CK(cudaMallocPitch(reinterpret_cast<void**>(&d2), &pitch2, W2 * sizeof(u32), H2));
  CK(cudaMemset(d2, 0xCD, pitch2 * H2));
  const int sx = 3, sy = 2, dx = 7, dy = 5, cw = 100, chh = 20;
  CK(cudaMemcpy2D(reinterpret_cast<char*>(d2) + dy * pitch2 + dx * sizeof(u32), pitch2,
                  reinterpret_cast<const char*>(d) + sy * pitch + sx * sizeof(u32), pitch,
                  cw * sizeof(u32), chh, cudaMemcpyDeviceToDevice));
  std::vector<unsigned char> raw2(pitch2 * H2);
  CK(cudaMemcpy(raw2.data(), d2, pitch2 * H2, cudaMemcpyDeviceToHost));
  for (int y = 0; y < H2; ++y)
    for (int x = 0; x < W2; ++x) {
      const bool inside = x >= dx && x < dx + cw && y >= dy && y < dy + chh;
      const u32 want =
          inside ? ref[size_t(y - dy + sy) * W + (x - dx + sx)] : byte_pattern(0xCD);
      if (at(raw2, pitch2, x, y) != want)
        gpu_test::fail("cudaMemcpy2D D2D: (%d,%d) = 0x%08x, want 0x%08x", x, y,
                       at(raw2, pitch2, x, y), want);
    }
  check_padding(raw2, pitch2, W2 * sizeof(u32), H2, 0xCD, "cudaMemcpy2D D2D");
  padding_bytes_checked += (pitch2 - W2 * sizeof(u32)) * H2;

  // cudaMemcpy2DAsync: H2D a block from pinned memory, then D2H all rows into pinned memory.
  u32* pin_src;
  u32* pin_dst;
  const int aw = 64, ah = 16, ax = 900, ay = 9;
  CK(cudaMallocHost(&pin_src, aw * ah * sizeof(u32)));
  CK(cudaMallocHost(&pin_dst, size_t(W) * H * sizeof(u32)));
  for (int i = 0; i < aw * ah; ++i) pin_src[i] = rng.u32();
  CK(cudaMemcpy2DAsync(reinterpret_cast<char*>(d) + ay * pitch + ax * sizeof(u32), pitch,
                       pin_src, aw * sizeof(u32), aw * sizeof(u32), ah, cudaMemcpyHostToDevice,
                       stream));
  CK(cudaMemcpy2DAsync(pin_dst, wbytes, d, pitch, wbytes, H, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  for (int y = 0; y < ah; ++y)
    for (int x = 0; x < aw; ++x) ref[size_t(ay + y) * W + ax + x] = pin_src[y * aw + x];
  for (int i = 0; i < W * H; ++i)
    if (pin_dst[i] != ref[i])
      gpu_test::fail("cudaMemcpy2DAsync: (%d,%d) = 0x%08x, want 0x%08x", i % W, i / W,
                     pin_dst[i], ref[i]);

  // ================================ 3D =======================================================
  const int w = 123, h = 17, dep = 9;
  cudaPitchedPtr pp{};
  CK(cudaMalloc3D(&pp, make_cudaExtent(w * sizeof(u32), h, dep)));
  if (pp.pitch < w * sizeof(u32) || pp.xsize != w * sizeof(u32) || pp.ysize != size_t(h))
    gpu_test::fail("cudaMalloc3D: pitch %zu xsize %zu ysize %zu", pp.pitch, pp.xsize, pp.ysize);
  const size_t slice = pp.pitch * h;
  CK(cudaMemset(pp.ptr, 0x5C, slice * dep));

  // Host volume with its own padding: pitch w+3 elements, h+2 rows per slice.
  const int hw = w + 3, hh = h + 2;
  std::vector<u32> hvol(size_t(hw) * hh * dep);
  for (auto& v : hvol) v = rng.u32();
  auto hv = [&](int x, int y, int z) -> u32& { return hvol[(size_t(z) * hh + y) * hw + x]; };
  cudaMemcpy3DParms p3{};
  p3.srcPtr = make_cudaPitchedPtr(hvol.data(), hw * sizeof(u32), w * sizeof(u32), hh);
  p3.dstPtr = pp;
  p3.extent = make_cudaExtent(w * sizeof(u32), h, dep);
  p3.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&p3));
  std::vector<u32> vref(size_t(w) * h * dep);
  auto vr = [&](int x, int y, int z) -> u32& { return vref[(size_t(z) * h + y) * w + x]; };
  for (int z = 0; z < dep; ++z)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) vr(x, y, z) = hv(x, y, z);

  // cudaMemset3D on a sub-box (x 10..19, y 4..6, z 3..4).
  const int bx = 10, by = 4, bz = 3, bw = 10, bh = 3, bd = 2;
  cudaPitchedPtr sub = make_cudaPitchedPtr(
      static_cast<char*>(pp.ptr) + bz * slice + by * pp.pitch + bx * sizeof(u32), pp.pitch,
      pp.xsize, pp.ysize);
  CK(cudaMemset3D(sub, 0x77, make_cudaExtent(bw * sizeof(u32), bh, bd)));
  for (int z = bz; z < bz + bd; ++z)
    for (int y = by; y < by + bh; ++y)
      for (int x = bx; x < bx + bw; ++x) vr(x, y, z) = byte_pattern(0x77);

  transform_3d<<<dim3((w + 31) / 32, (h + 7) / 8, dep), dim3(32, 8)>>>(pp, w, h, dep);
  CK_LAUNCH("transform_3d");
  for (int z = 0; z < dep; ++z)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) vr(x, y, z) = vr(x, y, z) * 3u + u32(x + 7 * y + 11 * z);

  std::vector<unsigned char> raw3(slice * dep);
  CK(cudaMemcpy(raw3.data(), pp.ptr, slice * dep, cudaMemcpyDeviceToHost));
  for (int z = 0; z < dep; ++z)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        u32 v;
        std::memcpy(&v, raw3.data() + z * slice + y * pp.pitch + x * sizeof(u32), 4);
        if (v != vr(x, y, z))
          gpu_test::fail("3D volume (%d,%d,%d) = 0x%08x, want 0x%08x", x, y, z, v, vr(x, y, z));
      }
  check_padding(raw3, pp.pitch, w * sizeof(u32), h * dep, 0x5C, "cudaMemcpy3D H2D");
  padding_bytes_checked += (pp.pitch - w * sizeof(u32)) * h * dep;

  // D2H of a sub-box through srcPos into a packed host box.
  const int qx = 50, qy = 5, qz = 2, qw = 40, qh = 9, qd = 6;
  std::vector<u32> box(size_t(qw) * qh * qd, 0);
  cudaMemcpy3DParms pd{};
  pd.srcPtr = pp;
  pd.srcPos = make_cudaPos(qx * sizeof(u32), qy, qz);
  pd.dstPtr = make_cudaPitchedPtr(box.data(), qw * sizeof(u32), qw * sizeof(u32), qh);
  pd.extent = make_cudaExtent(qw * sizeof(u32), qh, qd);
  pd.kind = cudaMemcpyDeviceToHost;
  CK(cudaMemcpy3D(&pd));
  for (int z = 0; z < qd; ++z)
    for (int y = 0; y < qh; ++y)
      for (int x = 0; x < qw; ++x)
        if (box[(size_t(z) * qh + y) * qw + x] != vr(qx + x, qy + y, qz + z))
          gpu_test::fail("cudaMemcpy3D D2H sub-box (%d,%d,%d) = 0x%08x, want 0x%08x", x, y, z,
                         box[(size_t(z) * qh + y) * qw + x], vr(qx + x, qy + y, qz + z));

  // D2D into a larger volume at dstPos.
  const int w2 = 200, h2 = 20, dep2 = 12, ox = 4, oy = 1, oz = 2;
  cudaPitchedPtr pp2{};
  CK(cudaMalloc3D(&pp2, make_cudaExtent(w2 * sizeof(u32), h2, dep2)));
  const size_t slice2 = pp2.pitch * h2;
  CK(cudaMemset(pp2.ptr, 0x3E, slice2 * dep2));
  cudaMemcpy3DParms dd{};
  dd.srcPtr = pp;
  dd.dstPtr = pp2;
  dd.dstPos = make_cudaPos(ox * sizeof(u32), oy, oz);
  dd.extent = make_cudaExtent(w * sizeof(u32), h, dep);
  dd.kind = cudaMemcpyDeviceToDevice;
  CK(cudaMemcpy3D(&dd));
  std::vector<unsigned char> raw4(slice2 * dep2);
  CK(cudaMemcpy(raw4.data(), pp2.ptr, slice2 * dep2, cudaMemcpyDeviceToHost));
  for (int z = 0; z < dep2; ++z)
    for (int y = 0; y < h2; ++y)
      for (int x = 0; x < w2; ++x) {
        const bool inside =
            x >= ox && x < ox + w && y >= oy && y < oy + h && z >= oz && z < oz + dep;
        const u32 want = inside ? vr(x - ox, y - oy, z - oz) : byte_pattern(0x3E);
        u32 v;
        std::memcpy(&v, raw4.data() + z * slice2 + y * pp2.pitch + x * sizeof(u32), 4);
        if (v != want)
          gpu_test::fail("cudaMemcpy3D D2D (%d,%d,%d) = 0x%08x, want 0x%08x", x, y, z, v, want);
      }
  check_padding(raw4, pp2.pitch, w2 * sizeof(u32), h2 * dep2, 0x3E, "cudaMemcpy3D D2D");

  // cudaMemcpy3DAsync: whole volume D2H into packed pinned memory.
  u32* pin_vol;
  CK(cudaMallocHost(&pin_vol, size_t(w) * h * dep * sizeof(u32)));
  cudaMemcpy3DParms pa{};
  pa.srcPtr = pp;
  pa.dstPtr = make_cudaPitchedPtr(pin_vol, w * sizeof(u32), w * sizeof(u32), h);
  pa.extent = make_cudaExtent(w * sizeof(u32), h, dep);
  pa.kind = cudaMemcpyDeviceToHost;
  CK(cudaMemcpy3DAsync(&pa, stream));
  CK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < vref.size(); ++i)
    if (pin_vol[i] != vref[i])
      gpu_test::fail("cudaMemcpy3DAsync element %zu = 0x%08x, want 0x%08x", i, pin_vol[i],
                     vref[i]);

  CK(cudaFree(d));
  CK(cudaFree(d2));
  CK(cudaFree(pp.ptr));
  CK(cudaFree(pp2.ptr));
  CK(cudaFreeHost(pin_src));
  CK(cudaFreeHost(pin_dst));
  CK(cudaFreeHost(pin_vol));
  CK(cudaStreamDestroy(stream));
  gpu_test::pass("2D pitch %zu for %zu B rows, 3D pitch %zu; 2D H2D/D2D/D2H/memset/async and "
                 "3D H2D/D2D/D2H/memset/async exact, %zu padding bytes untouched",
                 pitch, wbytes, pp.pitch, padding_bytes_checked);
  return 0;
}

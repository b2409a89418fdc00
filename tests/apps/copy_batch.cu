// The batched and peer copy forms on the host backend: cudaMemcpyBatchAsync (host to device
// from pageable and pinned memory, device to device, device to host; every source access
// order, the source rewritten right after a DuringApiCall batch), cudaMemcpy3DBatchAsync with
// pitched operands, cudaMemcpy3DPeer[Async] on one device and between two; bad batches.
#include <algorithm>
#include <cstdint>

#include "app_check.h"

namespace {

void FlatBatch(cudaStream_t s) {
  const size_t n = 5000;
  std::vector<unsigned char> a = RandomBytes(n, 1), b = RandomBytes(n, 2);
  unsigned char* pinned;
  CHECK(cudaMallocHost(&pinned, n));
  std::memcpy(pinned, b.data(), n);
  unsigned char *d0, *d1, *d2;
  CHECK(cudaMalloc(&d0, n));
  CHECK(cudaMalloc(&d1, n));
  CHECK(cudaMalloc(&d2, n));
  // Three host-to-device copies: a pageable source read during the call, then pinned ones.
  void* dsts[3] = {d0, d1, d2 + 100};
  const void* srcs[3] = {a.data(), pinned, pinned};
  size_t sizes[3] = {n, n, 1000};
  cudaMemcpyAttributes attrs[2] = {};
  attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
  attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idxs[2] = {0, 1};
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idxs, 2, s));
  std::memset(a.data(), 0, n);  // allowed: the batch read it during the call
  CHECK(cudaStreamSynchronize(s));
  // Device to device and back to the host in one batch.
  std::vector<unsigned char> back0(n), back1(n), back2(1000);
  void* dsts2[4] = {d2, back0.data(), back1.data(), back2.data()};
  const void* srcs2[4] = {d0, d0, d1, d2 + 100};
  size_t sizes2[4] = {50, n, n, 1000};
  cudaMemcpyAttributes any{};
  any.srcAccessOrder = cudaMemcpySrcAccessOrderAny;
  size_t zero = 0;
  CHECK(cudaMemcpyBatchAsync(dsts2, srcs2, sizes2, 4, &any, &zero, 1, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<unsigned char> first = RandomBytes(n, 1);
  REQUIRE(back0 == first, "pageable source through a batch came back different");
  REQUIRE(back1 == b, "pinned source through a batch came back different");
  REQUIRE(std::memcmp(back2.data(), b.data(), 1000) == 0, "a batch copy at an offset came back different");
  unsigned char head[50];
  CHECK(cudaMemcpy(head, d2, 50, cudaMemcpyDeviceToHost));
  REQUIRE(std::memcmp(head, first.data(), 50) == 0, "device-to-device copy in a batch");
  // Bad batches.
  EXPECT_ERR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idxs, 2, 0), cudaErrorInvalidValue);
  cudaMemcpyAttributes bad{};
  EXPECT_ERR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &bad, &zero, 1, s), cudaErrorInvalidValue);
  size_t bad_idx[2] = {0, 0};
  EXPECT_ERR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, bad_idx, 2, s), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(d0));
  CHECK(cudaFree(d1));
  CHECK(cudaFree(d2));
}

void Batch3D(cudaStream_t s) {
  // A 3D box of 40 x 6 x 3 bytes: from a packed host buffer into a pitched device volume,
  // then out of it into a host buffer with its own row length and layer height.
  const size_t w = 40, h = 6, d = 3;
  cudaPitchedPtr vol;
  CHECK(cudaMalloc3D(&vol, make_cudaExtent(64, 8, 4)));
  std::vector<unsigned char> src = RandomBytes(w * h * d, 3), dst(50 * 7 * d, 0xee);
  cudaMemcpy3DBatchOp ops[2] = {};
  ops[0].src.type = cudaMemcpyOperandTypePointer;
  ops[0].src.op.ptr.ptr = src.data();  // row length and layer height 0: packed
  ops[0].dst.type = cudaMemcpyOperandTypePointer;
  ops[0].dst.op.ptr.ptr = vol.ptr;
  ops[0].dst.op.ptr.rowLength = vol.pitch;
  ops[0].dst.op.ptr.layerHeight = 8;
  ops[0].extent = make_cudaExtent(w, h, d);
  ops[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  CHECK(cudaMemcpy3DBatchAsync(1, ops, 0, s));
  ops[1].src = ops[0].dst;
  ops[1].dst.type = cudaMemcpyOperandTypePointer;
  ops[1].dst.op.ptr.ptr = dst.data();
  ops[1].dst.op.ptr.rowLength = 50;
  ops[1].dst.op.ptr.layerHeight = 7;
  ops[1].extent = ops[0].extent;
  ops[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  CHECK(cudaMemcpy3DBatchAsync(1, &ops[1], 0, s));
  CHECK(cudaStreamSynchronize(s));
  for (size_t z = 0; z < d; z++)
    for (size_t y = 0; y < 7; y++)
      for (size_t x = 0; x < 50; x++) {
        unsigned char want = (x < w && y < h) ? src[(z * h + y) * w + x] : 0xee;
        REQUIRE(dst[(z * 7 + y) * 50 + x] == want, "3D batch: byte (%zu,%zu,%zu) is %d, expected %d", x, y, z,
                dst[(z * 7 + y) * 50 + x], want);
      }
  ops[0].extent.depth = 0;
  EXPECT_ERR(cudaMemcpy3DBatchAsync(1, ops, 0, s), cudaErrorInvalidValue);
  ops[0].extent.depth = d;
  ops[0].dst.op.ptr.rowLength = 10;  // shorter than a row
  EXPECT_ERR(cudaMemcpy3DBatchAsync(1, ops, 0, s), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaFree(vol.ptr));
}

void Peer3D() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  const size_t w = 30, h = 5, d = 2;
  std::vector<unsigned char> src = RandomBytes(w * h * d, 4);
  cudaPitchedPtr a;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc3D(&a, make_cudaExtent(w, h, d)));
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(src.data(), w, w, h);
  up.dstPtr = a;
  up.extent = make_cudaExtent(w, h, d);
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&up));
  int other = count > 1 ? 1 : 0;
  CHECK(cudaSetDevice(other));
  cudaPitchedPtr b;
  CHECK(cudaMalloc3D(&b, make_cudaExtent(w + 3, h + 1, d)));
  cudaMemcpy3DPeerParms p = {};
  p.srcPtr = a;
  p.srcDevice = 0;
  p.dstPtr = b;
  p.dstPos = make_cudaPos(3, 1, 0);
  p.dstDevice = other;
  p.extent = make_cudaExtent(w, h, d);
  CHECK(cudaMemcpy3DPeer(&p));
  // And back to device 0 asynchronously into a fresh volume, then to the host.
  CHECK(cudaSetDevice(0));
  cudaPitchedPtr c;
  CHECK(cudaMalloc3D(&c, make_cudaExtent(w, h, d)));
  cudaMemcpy3DPeerParms q = {};
  q.srcPtr = b;
  q.srcPos = make_cudaPos(3, 1, 0);
  q.srcDevice = other;
  q.dstPtr = c;
  q.dstDevice = 0;
  q.extent = p.extent;
  CHECK(cudaMemcpy3DPeerAsync(&q, 0));
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> back(w * h * d);
  cudaMemcpy3DParms down = {};
  down.srcPtr = c;
  down.dstPtr = make_cudaPitchedPtr(back.data(), w, w, h);
  down.extent = p.extent;
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  REQUIRE(back == src, "a 3D box through two peer copies came back different");
  CHECK(cudaFree(a.ptr));
  CHECK(cudaFree(c.ptr));
  CHECK(cudaSetDevice(other));
  CHECK(cudaFree(b.ptr));
  CHECK(cudaSetDevice(0));
  std::printf("peer 3D copies between devices 0 and %d\n", other);
}

// Array operands: a batch fills a 3D array of 2-byte elements from a host box and reads it
// back; a 3D peer copy takes the array's box to a linear volume on the other device and
// another brings it into a second array there (staged between devices), then to the host.
void Arrays(cudaStream_t s) {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  const size_t w = 12, h = 5, d = 3, elem = 2;
  std::vector<unsigned char> src = RandomBytes(w * h * d * elem, 5), back(w * h * d * elem, 0);
  cudaChannelFormatDesc f = cudaCreateChannelDesc<unsigned short>();
  cudaArray_t arr;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc3DArray(&arr, &f, make_cudaExtent(w, h, d)));
  cudaMemcpy3DBatchOp ops[2] = {};
  ops[0].src.type = cudaMemcpyOperandTypePointer;
  ops[0].src.op.ptr.ptr = src.data();
  ops[0].dst.type = cudaMemcpyOperandTypeArray;
  ops[0].dst.op.array.array = arr;
  ops[0].extent = make_cudaExtent(w, h, d);  // elements of the array
  ops[0].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
  ops[1].src = ops[0].dst;
  ops[1].dst.type = cudaMemcpyOperandTypePointer;
  ops[1].dst.op.ptr.ptr = back.data();
  ops[1].extent = ops[0].extent;
  ops[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  CHECK(cudaMemcpy3DBatchAsync(2, ops, 0, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(back == src, "a box through a 3D array by a batch came back different");
  int other = count > 1 ? 1 : 0;
  CHECK(cudaSetDevice(other));
  cudaPitchedPtr lin;
  CHECK(cudaMalloc3D(&lin, make_cudaExtent(w * elem, h, d)));
  cudaArray_t arr2;
  CHECK(cudaMalloc3DArray(&arr2, &f, make_cudaExtent(w, h, d)));
  cudaMemcpy3DPeerParms p = {};
  p.srcArray = arr;
  p.srcDevice = 0;
  p.dstPtr = lin;
  p.dstDevice = other;
  p.extent = make_cudaExtent(w, h, d);
  CHECK(cudaMemcpy3DPeer(&p));
  cudaMemcpy3DPeerParms q = {};
  q.srcPtr = lin;
  q.srcDevice = other;
  q.dstArray = arr2;
  q.dstDevice = other;
  q.extent = p.extent;
  CHECK(cudaMemcpy3DPeerAsync(&q, s));
  CHECK(cudaStreamSynchronize(s));
  std::fill(back.begin(), back.end(), 0);
  cudaMemcpy3DParms down = {};
  down.srcArray = arr2;
  down.dstPtr = make_cudaPitchedPtr(back.data(), w * elem, w, h);
  down.extent = p.extent;
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  REQUIRE(back == src, "a box from an array through peer copies came back different");
  CHECK(cudaFreeArray(arr2));
  CHECK(cudaFree(lin.ptr));
  CHECK(cudaSetDevice(0));
  CHECK(cudaFreeArray(arr));
}

}  // namespace

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  FlatBatch(s);
  Batch3D(s);
  Peer3D();
  Arrays(s);
  CHECK(cudaStreamDestroy(s));
  std::printf("PASS copy_batch: flat and 3D batches (every source access order), 3D peer copies, array operands\n");
  return 0;
}

// The pending operations that move a copy's bytes (private to the worker): the layout of
// a copy's device side, the host-to-device and device-to-host ops that DMA chunk by chunk
// as the transport delivers or takes them, and the drain of a refused request's bulk.
// Handlers (ops_transfer.cc) validate and then start these.
//
// Thread-safety: the executor's thread only, as every PendingOp.
#pragma once

#include <algorithm>
#include <memory>

#include "worker/session/executor.h"

namespace remora::worker {

// Where the packed bytes of a copy go on the device: `height` rows of `width` bytes per
// slice, `depth` slices; rows `pitch` apart, slices `rows_per_slice * pitch` apart. A plain
// copy is one row of `width` = size bytes.
struct DeviceLayout {
  DevPtr base = 0;
  uint64_t pitch = 0, rows_per_slice = 1, width = 0, height = 1, depth = 1;
  // A CUDA array instead (the driver's CUarray): the copy's origin in it, x in bytes.
  void* array = nullptr;
  uint64_t x0 = 0, y0 = 0, z0 = 0;

  static DeviceLayout Linear(DevPtr p, uint64_t n) { return {p, n, 1, n, 1, 1}; }
  uint64_t total() const { return width * height * depth; }
  DevPtr Row(uint64_t r) const { return base + ((r / height) * rows_per_slice + r % height) * pitch; }
  // The device range the layout touches, for validation.
  uint64_t extent() const { return total() == 0 ? 0 : ((depth - 1) * rows_per_slice + (height - 1)) * pitch + width; }
  // The device side of `rows` rows from packed row `r`, starting `col` bytes into it.
  CopySide Device(uint64_t r, uint64_t col, uint64_t run_pitch, uint64_t rows) const {
    if (array == nullptr) return CopySide{false, Row(r) + col, run_pitch, rows};
    CopySide s;
    s.array = array;
    s.x = x0 + col;
    s.y = y0 + r % height;
    s.z = z0 + r / height;
    return s;
  }
  // The whole layout as one side of a 3D copy.
  CopySide Whole() const {
    if (array == nullptr) return CopySide{false, base, pitch, rows_per_slice};
    return Device(0, 0, 0, 0);
  }
  bool Linear() const { return array == nullptr && height == 1 && depth == 1; }

  // Calls copy(device side, host side, width, rows) for the packed bytes [off, off + n)
  // living at `host`: a partial first row, whole rows per slice, a partial last row.
  template <typename Copy>
  Status ForEachRun(uint64_t off, uint64_t n, std::byte* host, Copy&& copy) const {
    uint64_t end = off + n;
    while (off < end) {
      uint64_t row = off / width, col = off % width;
      if (col != 0 || end - off < width) {
        uint64_t len = std::min(width - col, end - off);
        RETURN_IF_ERROR(copy(Device(row, col, len, 1), CopySide{true, reinterpret_cast<uint64_t>(host), len, 1}, len, 1));
        off += len;
        host += len;
        continue;
      }
      uint64_t rows = std::min((end - off) / width, height - row % height);  // stay in the slice
      RETURN_IF_ERROR(copy(Device(row, 0, pitch, rows), CopySide{true, reinterpret_cast<uint64_t>(host), width, rows}, width, rows));
      off += rows * width;
      host += rows * width;
    }
    return Status::Ok();
  }
};

// A pending op that reads and drops `total` bytes of a refused request's bulk, then answers
// `tag` (0: none) with `error`: the transport stays in step with the client.
std::unique_ptr<PendingOp> MakeDrainOp(uint64_t tag, uint64_t total, Status error);
// A pending op that DMAs a request's bulk into `dst` on `stream` chunk by chunk as it
// arrives, then answers `tag` (0: an asynchronous copy, errors deferred). `device_only`:
// `dst` is device memory no host can read directly (not pinned, registered or mapped host
// memory), so a small synchronous copy may be answered before its DMA (AnswerEarly).
std::unique_ptr<PendingOp> MakeHtoDOp(uint64_t tag, Executor::Stream stream, DeviceLayout dst, bool device_only = false);
// Starts a device-to-host copy of `src` answered (`tag`) with the bytes as the reply's bulk.
// Replies itself on every path; a non-OK return is a transport failure.
Status StartDtoH(Executor& ex, uint64_t tag, const Executor::Stream& stream, const DeviceLayout& src);

}  // namespace remora::worker

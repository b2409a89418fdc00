#include "worker/loop/call_stats.h"

namespace remora::worker {
namespace {

uint64_t SaturatingVolume(uint64_t w, uint64_t h, uint64_t d) {
  if (w == 0 || h == 0 || d == 0) return 0;
  if (w > UINT64_MAX / h) return UINT64_MAX;
  uint64_t wh = w * h;
  return wh > UINT64_MAX / d ? UINT64_MAX : wh * d;
}

void Add(std::atomic<uint64_t>& c, uint64_t n) {
  // Single writer: load+store is enough and cheaper than a locked add.
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace

void CountRequest(SessionCounters& c, wire::Request::Reader req) {
  Add(c.calls, 1);
  using W = wire::Request;
  switch (req.which()) {
    case W::MEMCPY_HTO_D: Add(c.bytes_to_device, req.getMemcpyHtoD().getSize()); break;
    case W::MEMCPY_DTO_H: Add(c.bytes_from_device, req.getMemcpyDtoH().getSize()); break;
    case W::COPY3_D: {
      auto a = req.getCopy3D();
      uint64_t n = SaturatingVolume(a.getWidth(), a.getHeight(), a.getDepth());
      if (a.getKind() == wire::Copy3D::Kind::HOST_TO_DEVICE) Add(c.bytes_to_device, n);
      else if (a.getKind() == wire::Copy3D::Kind::DEVICE_TO_HOST) Add(c.bytes_from_device, n);
      break;
    }
    default: break;
  }
}

}  // namespace remora::worker

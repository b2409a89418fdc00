#include "worker/backend/array_desc.h"

#include <algorithm>

#include "cuda_hooks.h"

namespace remora::worker {

uint32_t FormatBytes(CUarray_format format) { return api::cuda::ArrayFormatBytes(format); }

Status CheckArrayDesc(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels, uint32_t* elem, uint64_t* bytes) {
  constexpr uint64_t kMaxDim = 1 << 17;
  constexpr unsigned kKnownFlags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
                                   CUDA_ARRAY3D_TEXTURE_GATHER;
  uint32_t f = FormatBytes(d.Format);
  if (f == 0) return Error(Err::kNotSupported, "array format {} is not supported by Remora", static_cast<int>(d.Format));
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4)
    return Error(Err::kInvalidValue, "an array has 1, 2 or 4 channels, not {}", d.NumChannels);
  if ((d.Flags & ~kKnownFlags) != 0)
    return Error(Err::kNotSupported, "array flags 0x{:x} are not supported by Remora", d.Flags & ~kKnownFlags);
  if (d.Width == 0 || d.Width > kMaxDim || d.Height > kMaxDim || d.Depth > kMaxDim)
    return Error(Err::kInvalidValue, "array extent {}x{}x{} is out of range", d.Width, d.Height, d.Depth);
  bool layered = (d.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  if (d.Height == 0 && d.Depth != 0 && !layered)
    return Error(Err::kInvalidValue, "a 3D array needs a height (extent {}x0x{})", d.Width, d.Depth);
  if ((d.Flags & CUDA_ARRAY3D_CUBEMAP) != 0 && (d.Width != d.Height || (layered ? d.Depth % 6 != 0 : d.Depth != 6)))
    return Error(Err::kInvalidValue, "a cubemap array is square with 6 faces (per layer)");
  uint64_t max_dim = std::max<uint64_t>({d.Width, d.Height, layered ? 0 : d.Depth});
  unsigned max_levels = 1;
  while ((max_dim >> max_levels) != 0) max_levels++;
  if (levels == 0 || levels > max_levels)
    return Error(Err::kInvalidValue, "{} mipmap levels for an extent of {} (at most {})", levels, max_dim, max_levels);
  *elem = f * d.NumChannels;
  uint64_t total = 0;
  for (unsigned l = 0; l < levels; l++) {
    uint64_t w = std::max<uint64_t>(d.Width >> l, 1);
    uint64_t h = d.Height == 0 ? 1 : std::max<uint64_t>(d.Height >> l, 1);
    uint64_t z = d.Depth == 0 ? 1 : (layered ? d.Depth : std::max<uint64_t>(d.Depth >> l, 1));
    total += w * h * z * *elem;
  }
  if (total > (1ull << 40)) return Error(Err::kMemoryAllocation, "an array of {} bytes is too large", total);
  *bytes = total;
  return Status::Ok();
}

}  // namespace remora::worker

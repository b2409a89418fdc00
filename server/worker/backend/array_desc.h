// What a CUDA array descriptor asks for: its element size and the bytes its storage needs,
// checked (format, channels, extent, flags). Both backends' arrays and the session's array
// hooks use it. Pure arithmetic.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "remora/base/status.h"

namespace remora::worker {

// Bytes per element of `format`, 0 for a format Remora does not handle.
uint32_t FormatBytes(CUarray_format format);
// Checks a descriptor the application gave (format, channels, extent, flags); on success
// `*elem` is its element size and `*bytes` what its storage needs (all `levels`).
Status CheckArrayDesc(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels, uint32_t* elem, uint64_t* bytes);

}  // namespace remora::worker

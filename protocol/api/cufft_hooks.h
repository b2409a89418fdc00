// Extents of cuFFT arguments: the size expressions protocol/api/cufft.api names on both ends
// of the wire. Pure functions.
#pragma once

#include <cstdint>

namespace remora::api::fft {

// The element count of a dimension array (a negative rank sends none; the library refuses it).
inline int64_t Dims(int64_t n) { return n < 0 ? 0 : n; }

}  // namespace remora::api::fft

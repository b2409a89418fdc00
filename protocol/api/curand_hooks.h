// cuRAND's tables as both ends of the wire size them: the Sobol direction vectors and scramble
// constants of every one of the 20,000 dimensions cuRAND supports (curand.h), which the library
// hands out as pointers into its own host memory. Pure functions.
#pragma once

#include <cstdint>

namespace remora::api::rand {

enum Table : int { kDirections32 = 0, kDirections64 = 1, kScramble32 = 2, kScramble64 = 3 };
inline constexpr uint64_t kDimensions = 20000;

// Bytes of a table (0 for an unknown one).
inline uint64_t TableBytes(int which) {
  switch (which) {
    case kDirections32: return kDimensions * 32 * 4;
    case kDirections64: return kDimensions * 64 * 8;
    case kScramble32: return kDimensions * 4;
    case kScramble64: return kDimensions * 8;
    default: return 0;
  }
}

}  // namespace remora::api::rand

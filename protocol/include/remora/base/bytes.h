// Byte spans used across module boundaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace remora {

using ConstBytes = std::span<const std::byte>;
using MutableBytes = std::span<std::byte>;

inline ConstBytes AsBytes(const void* p, size_t n) { return {static_cast<const std::byte*>(p), n}; }
inline MutableBytes AsWritableBytes(void* p, size_t n) { return {static_cast<std::byte*>(p), n}; }

}  // namespace remora

// memcpy for large staged transfers, split across a few helper threads: one core's copy
// bandwidth, not the DMA engine, bounds a pageable copy through shared staging slots.
// Thread-safe; the helper threads start on first use (and again in a forked child).
#pragma once

#include <cstddef>

namespace remora::shm {

// Copies n bytes, in parallel when n is large enough to gain from it. Blocks until done.
void ParallelCopy(void* dst, const void* src, size_t n);

}  // namespace remora::shm

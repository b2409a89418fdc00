#include "worker/session/pools.h"

namespace remora::worker {

namespace {
constexpr unsigned kDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING
}  // namespace

Result<DEvent> EventPool::Acquire(Driver& d, int gpu) {
  auto& f = free_[gpu];
  if (!f.empty()) {
    DEvent e = f.back();
    f.pop_back();
    return e;
  }
  ASSIGN_OR_RETURN(DEvent e, d.EventCreate(kDisableTiming));
  owned_.emplace_back(gpu, e);
  return e;
}

Result<std::byte*> BouncePool::Acquire(Driver& d) {
  if (!free_.empty()) {
    std::byte* p = free_.back();
    free_.pop_back();
    return p;
  }
  ASSIGN_OR_RETURN(void* p, d.HostAlloc(kBytes));
  owned_.push_back(static_cast<std::byte*>(p));
  return static_cast<std::byte*>(p);
}

void BouncePool::ReleaseAll(Driver& d) {
  for (std::byte* b : owned_) d.HostFree(b);
  owned_.clear();
  free_.clear();
}

}  // namespace remora::worker

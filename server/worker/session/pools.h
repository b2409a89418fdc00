// Pools of reusable driver objects the executor hands to operations: timing-disabled events
// for completion tracking, and 64 KiB pinned bounce buffers for small host-to-device copies.
// Each pool owns what it created and frees it in ReleaseAll. Executor thread only.
#pragma once

#include <cstddef>
#include <map>
#include <utility>
#include <vector>

#include "remora/base/status.h"
#include "worker/backend/driver.h"

namespace remora::worker {

class EventPool {
 public:
  // An event of `gpu` (which must be current).
  Result<DEvent> Acquire(Driver& d, int gpu);
  void Release(int gpu, DEvent e) { free_[gpu].push_back(e); }
  // `set_device` makes a GPU current before its events are destroyed.
  template <typename SetDevice>
  void ReleaseAll(Driver& d, SetDevice&& set_device) {
    for (auto& [gpu, e] : owned_)
      if (set_device(gpu).ok()) (void)d.EventDestroy(e);
    owned_.clear();
    free_.clear();
  }

 private:
  std::map<int, std::vector<DEvent>> free_;
  std::vector<std::pair<int, DEvent>> owned_;
};

class BouncePool {
 public:
  static constexpr size_t kBytes = 64 << 10;
  Result<std::byte*> Acquire(Driver& d);
  void Release(std::byte* p) { free_.push_back(p); }
  void ReleaseAll(Driver& d);

 private:
  std::vector<std::byte*> free_;
  std::vector<std::byte*> owned_;
};

}  // namespace remora::worker

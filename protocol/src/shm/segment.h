// Layout of the shared-memory segment of one shm session. Private to protocol/.
//
// The requester (shim) creates the segment as a sealed memfd and passes it with its Hello;
// the executor (worker) validates every field before use and keeps its own copy of the
// geometry, because the other side is not trusted: a malicious client can at worst confuse
// its own worker, never read outside the mapping or crash it.
//
//   [Control 64 KiB][request ring][reply ring][request slots][reply slots]
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "remora/base/fd.h"
#include "remora/base/status.h"

namespace remora::shm {

inline constexpr uint64_t kMagic = 0x31304d4853524d52ull;  // "RMRSHM01"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMaxSlots = 16;
inline constexpr uint64_t kControlBytes = 64 << 10;
inline constexpr uint32_t kWrapMarker = 0x50415257;  // "WRAP": skip to the ring's start

// Defaults chosen by the requester.
inline constexpr uint64_t kDefaultRingBytes = 2 << 20;
inline constexpr uint64_t kDefaultSlotBytes = 4 << 20;
inline constexpr uint32_t kDefaultSlots = 4;
inline constexpr uint64_t kDefaultInlineBulk = 64 << 10;

// A futex word plus a "sleeping" flag: the other side rings only when someone sleeps.
struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> waiting;
};

struct alignas(64) RingControl {
  alignas(64) std::atomic<uint64_t> head;  // bytes published (producer-owned)
  alignas(64) std::atomic<uint64_t> tail;  // bytes released (consumer-owned)
};

struct alignas(16) SlotControl {
  std::atomic<uint32_t> full;   // 0: free, producer may fill; 1: full, consumer may read
  uint32_t pad;
  std::atomic<uint64_t> bytes;  // valid bytes in a full slot
};

struct Geometry {
  uint64_t ring_bytes = kDefaultRingBytes;
  uint64_t slot_bytes = kDefaultSlotBytes;
  uint32_t slots = kDefaultSlots;
  uint64_t inline_bulk = kDefaultInlineBulk;

  uint64_t total_bytes() const { return kControlBytes + 2 * ring_bytes + 2ull * slots * slot_bytes; }
  uint64_t request_ring() const { return kControlBytes; }
  uint64_t reply_ring() const { return kControlBytes + ring_bytes; }
  uint64_t request_slots() const { return kControlBytes + 2 * ring_bytes; }
  uint64_t reply_slots() const { return request_slots() + uint64_t{slots} * slot_bytes; }
  Status Validate() const;
};

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint64_t ring_bytes;
  uint64_t slot_bytes;
  uint64_t inline_bulk;
  uint64_t total_bytes;
};

struct Control {
  Header header;
  Doorbell to_executor;   // rung by the requester
  Doorbell to_requester;  // rung by the executor
  RingControl request_ring;
  RingControl reply_ring;
  SlotControl request_slots[kMaxSlots];
  SlotControl reply_slots[kMaxSlots];
};
static_assert(sizeof(Control) <= kControlBytes);

// An mmap'ed segment (RAII: unmapped on destruction).
class Segment {
 public:
  // Requester: creates, seals and initialises a memfd segment.
  static Result<Segment> Create(const Geometry& g);
  // Executor: maps a segment received from a client, checking seals, size and geometry.
  static Result<Segment> Attach(Fd memfd);

  Segment() = default;
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  ~Segment();

  Control* control() const { return reinterpret_cast<Control*>(base_); }
  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  const Geometry& geometry() const { return geometry_; }
  int fd() const { return fd_.get(); }

 private:
  std::byte* base_ = nullptr;
  size_t size_ = 0;
  Geometry geometry_;
  Fd fd_;
};

// Wakes the owner of `bell` if it sleeps. Call after publishing what it waits for.
void Ring(Doorbell* bell);
// Waits on `bell` until `ready()` or `timeout_us` passes: spins first, then sleeps on the
// futex. Returns ready().
template <typename Pred>
bool WaitOn(Doorbell* bell, int64_t spin_ns, int64_t timeout_us, Pred ready);
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us);

}  // namespace remora::shm

#include "shm/segment_inl.h"

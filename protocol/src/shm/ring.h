// Single-producer single-consumer structures over the shm segment. Private to protocol/.
// Producers and consumers keep their own cursors; the shared cursors are only published,
// and every value read from shared memory is checked before use.
#pragma once

#include <cstring>
#include <optional>

#include "remora/protocol/frame.h"
#include "shm/segment.h"

namespace remora::shm {

// Bytes a frame occupies in a ring: header, body, and the bulk when it travels inline.
inline uint64_t RecordBytes(const FrameHeader& h, uint64_t inline_limit) {
  uint64_t n = sizeof(FrameHeader) + uint64_t{h.body_words} * 8;
  if (h.bulk_bytes <= inline_limit) n += (h.bulk_bytes + 7) / 8 * 8;
  return n;
}

class RingProducer {
 public:
  RingProducer() = default;
  RingProducer(RingControl* ctl, std::byte* data, uint64_t size)
      : ctl_(ctl), data_(data), size_(size), head_(ctl->head.load(std::memory_order_relaxed)),
        tail_(ctl->tail.load(std::memory_order_relaxed)) {}

  // Contiguous room for `bytes` (a multiple of 8, at most half the ring), or nullptr if the
  // consumer has not released enough yet. Writes a wrap marker when the record would not fit
  // before the ring's end.
  // The consumer's cursor is re-read only when the cached one shows too little room (its
  // cache line then stays with the consumer most of the time).
  std::byte* TryReserve(uint64_t bytes) {
    uint64_t pos = head_ & (size_ - 1);
    uint64_t contiguous = size_ - pos;
    uint64_t need = bytes <= contiguous ? bytes : contiguous + bytes;
    if (!Room(need)) {
      tail_ = ctl_->tail.load(std::memory_order_acquire);
      if (!Room(need)) return nullptr;
    }
    if (bytes > contiguous) {
      std::memcpy(data_ + pos, &kWrapMarker, sizeof(kWrapMarker));
      head_ += contiguous;
      pos = 0;
    }
    return data_ + pos;
  }
  void Publish(uint64_t bytes) {
    head_ += bytes;
    ctl_->head.store(head_, std::memory_order_release);
  }

 private:
  bool Room(uint64_t need) const {
    uint64_t used = head_ - tail_;
    return used <= size_ && size_ - used >= need;
  }

  RingControl* ctl_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;  // the consumer's cursor as last read
};

struct Record {
  FrameHeader header;        // a private copy, validated
  const std::byte* at;       // start of the record in the ring
  uint64_t bytes;            // record size (RecordBytes)
};

class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(RingControl* ctl, std::byte* data, uint64_t size, uint64_t inline_limit)
      : ctl_(ctl), data_(data), size_(size), inline_limit_(inline_limit),
        tail_(ctl->tail.load(std::memory_order_relaxed)), head_(tail_) {}

  // Whether the producer published anything past the first `held` bytes (the record the
  // consumer is still holding).
  bool HasDataBeyond(uint64_t held) {
    if (head_ - tail_ > held) return true;
    head_ = ctl_->head.load(std::memory_order_acquire);
    return head_ - tail_ > held;
  }

  // The next record, nullopt if none; an error if the producer wrote garbage. The producer's
  // cursor is re-read only once everything up to the cached one was consumed.
  Result<std::optional<Record>> Peek() {
    for (;;) {
      if (head_ == tail_) head_ = ctl_->head.load(std::memory_order_acquire);
      uint64_t head = head_;
      if (head == tail_) return std::optional<Record>();
      uint64_t avail = head - tail_;
      if (avail > size_ || avail % 8 != 0) return Error(Err::kInvalidValue, "shm ring cursor is corrupt");
      uint64_t pos = tail_ & (size_ - 1);
      uint32_t magic;
      std::memcpy(&magic, data_ + pos, sizeof(magic));
      if (magic == kWrapMarker) {
        uint64_t skip = size_ - pos;
        if (skip > avail) return Error(Err::kInvalidValue, "shm ring wrap marker is corrupt");
        tail_ += skip;
        ctl_->tail.store(tail_, std::memory_order_release);  // the producer may wait on it
        continue;
      }
      if (avail < sizeof(FrameHeader) || size_ - pos < sizeof(FrameHeader))
        return Error(Err::kInvalidValue, "shm ring record is truncated");
      Record r;
      std::memcpy(&r.header, data_ + pos, sizeof(FrameHeader));
      RETURN_IF_ERROR(ValidateFrameHeader(r.header));
      r.bytes = RecordBytes(r.header, inline_limit_);
      if (r.bytes > avail || r.bytes > size_ - pos) return Error(Err::kInvalidValue, "shm ring record overruns the ring");
      r.at = data_ + pos;
      return std::optional<Record>(r);
    }
  }
  void Release(uint64_t bytes) {
    tail_ += bytes;
    ctl_->tail.store(tail_, std::memory_order_release);
  }

 private:
  RingControl* ctl_ = nullptr;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t inline_limit_ = 0;
  uint64_t tail_ = 0;
  uint64_t head_ = 0;  // the producer's cursor as last read
};

// Staging slots of one direction, used round-robin and in order.
class Slots {
 public:
  Slots() = default;
  Slots(SlotControl* ctl, std::byte* base, uint32_t count, uint64_t slot_bytes)
      : ctl_(ctl), base_(base), count_(count), slot_bytes_(slot_bytes) {}

  uint64_t slot_bytes() const { return slot_bytes_; }

  // Producer: the next free slot (in order), or nullptr.
  std::byte* TryAcquire(uint32_t* index) {
    uint32_t i = static_cast<uint32_t>(acquired_ % count_);
    if (acquired_ - committed_ >= count_ || ctl_[i].full.load(std::memory_order_acquire) != 0) return nullptr;
    acquired_++;
    *index = i;
    return base_ + uint64_t{i} * slot_bytes_;
  }
  // Producer: publishes the oldest acquired slot.
  void Commit(uint64_t bytes) {
    uint32_t i = static_cast<uint32_t>(committed_ % count_);
    ctl_[i].bytes.store(bytes, std::memory_order_relaxed);
    ctl_[i].full.store(1, std::memory_order_release);
    committed_++;
  }
  // Consumer: the next full slot (in order), or nullptr; validates its length.
  Result<std::byte*> TryTake(uint64_t* bytes, uint32_t* index) {
    uint32_t i = static_cast<uint32_t>(taken_ % count_);
    if (taken_ - released_ >= count_ || ctl_[i].full.load(std::memory_order_acquire) == 0)
      return static_cast<std::byte*>(nullptr);
    *bytes = ctl_[i].bytes.load(std::memory_order_relaxed);
    if (*bytes > slot_bytes_) return Error(Err::kInvalidValue, "shm staging slot length is corrupt");
    taken_++;
    *index = i;
    return base_ + uint64_t{i} * slot_bytes_;
  }
  bool NextFull() const {
    return taken_ - released_ < count_ &&
           ctl_[taken_ % count_].full.load(std::memory_order_acquire) != 0;
  }
  bool NextFree() const {
    return acquired_ - committed_ < count_ &&
           ctl_[acquired_ % count_].full.load(std::memory_order_acquire) == 0;
  }
  // Consumer: frees the oldest taken slot.
  void Release() {
    uint32_t i = static_cast<uint32_t>(released_ % count_);
    ctl_[i].full.store(0, std::memory_order_release);
    released_++;
  }

 private:
  SlotControl* ctl_ = nullptr;
  std::byte* base_ = nullptr;
  uint32_t count_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t acquired_ = 0, committed_ = 0;  // producer cursors
  uint64_t taken_ = 0, released_ = 0;      // consumer cursors
};

}  // namespace remora::shm

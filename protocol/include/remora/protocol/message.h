// Cap'n Proto helpers for the data path: building a message without heap allocation and
// reading one from a frame body without copying.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "remora/base/status.h"

namespace remora {

// A MessageBuilder whose first segment is a per-thread scratch area, laid out so that a
// single-segment message is already in flat encoding (the segment table sits in front of
// the segment): Flatten() then returns it without copying. Falls back to the heap when the
// scratch area is in use (nested builders on one thread) or a message outgrows it.
// Not thread-safe; use on the constructing thread only.
class ScratchMessage {
 public:
  ScratchMessage();
  ~ScratchMessage();
  ScratchMessage(const ScratchMessage&) = delete;
  ScratchMessage& operator=(const ScratchMessage&) = delete;

  capnp::MessageBuilder& builder() { return *builder_; }
  template <typename T>
  typename T::Builder InitRoot() { return builder_->initRoot<T>(); }

  // The flat encoding (segment table + segments), valid until this object is destroyed or
  // the message is modified.
  std::span<const uint64_t> Flatten();

 private:
  uint64_t* scratch_ = nullptr;  // [segment table word][segment 0 ...]
  bool owns_thread_scratch_ = false;
  std::vector<uint64_t> flat_;
  std::optional<capnp::MallocMessageBuilder> builder_;  // in place: no allocation per message
};

// Reads a flat body. Structural checks (bounds, traversal limit) are Cap'n Proto's; any
// violation surfaces as kj::Exception from the accessors, which ParseBody callers catch
// through GuardDecode.
class BodyReader {
 public:
  explicit BodyReader(std::span<const uint64_t> body);
  template <typename T>
  typename T::Reader Root() { return reader_.getRoot<T>(); }

 private:
  capnp::FlatArrayMessageReader reader_;
};

// Runs `fn` and turns a Cap'n Proto decoding exception into kInvalidValue, so a malformed
// message from a peer becomes a clear error instead of a crash.
template <typename Fn>
Status GuardDecode(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const kj::Exception& e) {
    return Status(Err::kInvalidValue,
                  std::string("malformed ") + what + ": " + e.getDescription().cStr());
  }
}

}  // namespace remora

// The flat encoding of a generated call's arguments and results (the `args` and
// `apiResult` bytes of wire::ApiCall / wire::Reply): parameters in declaration order, each
// encoded by its role (tools/gen/apigen/roles.py says which bytes each role writes).
// Scalars are the little-endian bytes of the C type, byte-for-byte as the NVIDIA headers
// lay them out on x86-64 and aarch64 (both ends are built from the same headers).
//
// ArgReader never reads past its input: a short or malformed encoding sets an error that
// Finish() reports (and every later Get returns a zero value), so a hostile peer can only
// get its own call refused. Not thread-safe; cheap to create.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "remora/base/status.h"

namespace remora::api {

// How a generated call travels: the one source of truth for whether it is answered (the
// entry's class in its description; the frame's expects-reply flag follows it).
enum class CallClass : uint8_t {
  kSync,     // request and reply carrying the results
  kOrdered,  // posted in stream order, never answered; errors surface at the next synchronising call
  kWait,     // answered once the stream or event an argument names reaches this point
};

// Upper bound of one variable-length argument (an array, a string, an output buffer): the
// frame body limit. Larger payloads are bulk data, which generated calls do not carry.
inline constexpr uint64_t kMaxArgBytes = 4ull << 20;
// A generated call's results of more than kInlineResultBytes are held by the worker instead of
// travelling in the reply (an shm reply must fit in half the session's ring, 2 MiB by
// default) and read back in pieces of at most kHeldPieceBytes, whose own replies (the piece
// and its count) therefore always travel inline; a session holds at most kMaxHeldResultBytes
// (server/worker/session/held_results.h; a reply naming more is malformed).
inline constexpr uint64_t kInlineResultBytes = 512u << 10;
// Symmetrically, a generated call's arguments of more than kInlineArgBytes (cusolverRfSetupHost:
// 17 MB of host matrices) are sent ahead in pieces of at most kHeldPieceBytes (posted
// remoraStageArgsPiece calls) and the call names them (ApiCall.stagedArgs); a session stages at
// most kMaxStagedArgBytes at once (server/worker/session/held_results.h, StagedArgs).
inline constexpr uint64_t kInlineArgBytes = 512u << 10;
inline constexpr uint64_t kMaxStagedArgBytes = 256ull << 20;
inline constexpr uint64_t kHeldPieceBytes = 448u << 10;
inline constexpr uint64_t kMaxHeldResultBytes = 256ull << 20;

class ArgWriter {
 public:
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "arguments travel by value");
    Append(&v, sizeof(T));
  }
  // u8 presence flag, then `n` bytes if `p` is not null.
  void PutOptional(const void* p, size_t n) {
    Put<uint8_t>(p != nullptr);
    if (p != nullptr) Append(p, n);
  }
  // u64 element count, then the elements.
  void PutArray(const void* p, uint64_t count, size_t elem) {
    Put<uint64_t>(count);
    if (count > 0) Append(p, static_cast<size_t>(count * elem));
  }
  void PutString(const char* s) {
    uint64_t n = std::strlen(s);
    PutArray(s, n, 1);
  }
  void Append(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  const std::vector<std::byte>& bytes() const { return bytes_; }
  // Everything written, moved out (the writer is left empty).
  std::vector<std::byte> Take() { return std::exchange(bytes_, {}); }
  void Clear() { bytes_.clear(); }

 private:
  std::vector<std::byte> bytes_;
};

class ArgReader {
 public:
  ArgReader() = default;
  ArgReader(const void* p, size_t n) : p_(static_cast<const std::byte*>(p)), end_(p_ + n) {}

  template <typename T>
  T Get() {
    static_assert(std::is_trivially_copyable_v<T>, "arguments travel by value");
    T v{};
    if (Take(sizeof(T))) std::memcpy(&v, p_ - sizeof(T), sizeof(T));
    return v;
  }
  template <typename T>
  void Get(T* out) {
    *out = Get<T>();
  }
  // Returns whether a value was present (and copied into out, n bytes).
  bool GetOptional(void* out, size_t n) {
    if (Get<uint8_t>() == 0) return false;
    if (Take(n)) std::memcpy(out, p_ - n, n);
    return ok_;
  }
  template <typename T>
  Status GetArray(std::vector<T>* out) {
    uint64_t count = Get<uint64_t>();
    if (!ok_) return error_;
    // Bounded by the bytes left (arguments sent ahead may exceed a request's kMaxArgBytes).
    if (count > static_cast<uint64_t>(end_ - p_) / sizeof(T))
      return Fail("an array argument of {} elements runs past the arguments", count);
    out->resize(static_cast<size_t>(count));
    if (count > 0 && Take(static_cast<size_t>(count) * sizeof(T)))
      std::memcpy(out->data(), p_ - count * sizeof(T), static_cast<size_t>(count) * sizeof(T));
    return ok_ ? Status::Ok() : error_;
  }
  Status GetString(std::string* out) {
    std::vector<char> chars;
    RETURN_IF_ERROR(GetArray(&chars));
    out->assign(chars.begin(), chars.end());
    return Status::Ok();
  }
  // Results: copies `count` elements into the caller's array (which holds at least that).
  void GetArray(void* out, uint64_t capacity, size_t elem) {
    uint64_t count = Get<uint64_t>();
    if (!ok_) return;
    if (count > capacity) {
      (void)Fail("{} elements returned where {} fit", count, capacity);
      return;
    }
    if (count > 0 && Take(static_cast<size_t>(count * elem))) std::memcpy(out, p_ - count * elem, static_cast<size_t>(count * elem));
  }
  void GetString(char* out, uint64_t capacity) {
    uint64_t count = Get<uint64_t>();
    if (!ok_) return;
    if (count > capacity) {
      (void)Fail("a string of {} bytes returned where {} fit", count, capacity);
      return;
    }
    if (count > 0 && Take(static_cast<size_t>(count))) std::memcpy(out, p_ - count, static_cast<size_t>(count));
  }

  bool ok() const { return ok_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  // OK if everything decoded and nothing is left over; else why not.
  Status Finish() const {
    if (!ok_) return error_;
    if (p_ != end_) return Status(Err::kInvalidValue, "malformed request: " + std::to_string(remaining()) + " trailing argument bytes");
    return Status::Ok();
  }

 private:
  bool Take(size_t n) {
    if (!ok_) return false;
    if (static_cast<size_t>(end_ - p_) < n) {
      (void)Fail("the arguments end {} bytes early", n - static_cast<size_t>(end_ - p_));
      return false;
    }
    p_ += n;
    return true;
  }
  template <typename... Args>
  Status Fail(fmt::format_string<Args...> f, Args&&... args) {
    if (ok_) {
      ok_ = false;
      error_ = Status(Err::kInvalidValue, "malformed request: " + fmt::format(f, std::forward<Args>(args)...));
    }
    return error_;
  }

  const std::byte* p_ = nullptr;
  const std::byte* end_ = nullptr;
  bool ok_ = true;
  Status error_;
};

}  // namespace remora::api

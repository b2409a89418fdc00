// Record sealing for encrypted sessions. Private to protocol/.
//
// A record on the wire: u32 length L (little endian, the plaintext bytes, 1..kMaxRecord) |
// L bytes of ciphertext | 16-byte tag. The length is the associated data; the nonce is the
// record's sequence number in its direction (96 bits: 4 zero bytes, u64 little endian), so
// each key seals at most 2^64 records and every reordering, replay, drop or change of a
// record fails to open.
#pragma once

#include <cstddef>
#include <cstdint>

#include "remora/protocol/secure.h"

namespace remora::secure {

inline constexpr size_t kRecordHeader = 4;
inline constexpr size_t kTagBytes = 16;
inline constexpr size_t kMaxRecord = 256 << 10;
inline constexpr size_t kRecordOverhead = kRecordHeader + kTagBytes;

// One direction's sealing or opening state. Not thread-safe.
class RecordCipher {
 public:
  RecordCipher() = default;
  RecordCipher(Cipher cipher, const SessionKey& key);
  ~RecordCipher();
  RecordCipher(RecordCipher&& o) noexcept;
  RecordCipher& operator=(RecordCipher&& o) noexcept;
  RecordCipher(const RecordCipher&) = delete;
  RecordCipher& operator=(const RecordCipher&) = delete;

  bool active() const { return cipher_ != Cipher::kNone; }

  // Writes the record for `n` (1..kMaxRecord) plaintext bytes at `out` (n +
  // kRecordOverhead bytes). `plain` and `out + kRecordHeader` may be the same memory.
  void Seal(const void* plain, size_t n, uint8_t* out);
  // Opens the record whose header is `header` and ciphertext+tag `body` (length from the
  // header + kTagBytes) into `plain` (may equal `body`). False if it was altered, or is not
  // the next record.
  bool Open(const uint8_t header[kRecordHeader], const uint8_t* body, uint8_t* plain);
  // Plaintext length of a record header; 0 if out of range (the stream is then broken).
  static size_t RecordLength(const uint8_t header[kRecordHeader]);

 private:
  void Nonce(uint8_t out[12]) const;
  Cipher cipher_ = Cipher::kNone;
  SessionKey key_{};
  void* aes_state_ = nullptr;  // crypto_aead_aes256gcm_state (aligned), AES only
  uint64_t counter_ = 0;
};

}  // namespace remora::secure

// MD2 (RFC 1319) and HMAC-MD2 (RFC 2104 over MD2's 16-byte block): the keyed hash of the
// static runtime's integrity check (export_integrity.cc). Not for security: MD2 is what the
// runtime computes, so it is what the facade must answer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace remora::shim::driver {

class Md2 {
 public:
  void Update(const void* data, size_t size);
  std::array<uint8_t, 16> Final();  // the digest; the object is then spent

 private:
  void Block();
  uint8_t state_[48] = {};
  uint8_t checksum_[16] = {};
  uint8_t block_[16] = {};
  size_t used_ = 0;
};

class HmacMd2 {
 public:
  explicit HmacMd2(const uint8_t (&key)[16]);
  void Update(const void* data, size_t size) { inner_.Update(data, size); }
  std::array<uint8_t, 16> Final();

 private:
  uint8_t key_[16];
  Md2 inner_;
};

}  // namespace remora::shim::driver

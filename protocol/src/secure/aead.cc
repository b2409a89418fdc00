#include "secure/aead.h"

#include <sodium.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace remora {

Result<EncryptMode> ParseEncryptMode(std::string_view text) {
  if (text == "on" || text == "1" || text == "yes") return EncryptMode::kOn;
  if (text == "off" || text == "0" || text == "no") return EncryptMode::kOff;
  if (text == "auto" || text.empty()) return EncryptMode::kAuto;
  return Error(Err::kInvalidValue, "invalid encryption mode '{}': use on, off or auto", text);
}

const char* EncryptModeName(EncryptMode mode) {
  switch (mode) {
    case EncryptMode::kOff: return "off";
    case EncryptMode::kAuto: return "auto";
    case EncryptMode::kOn: return "on";
  }
  return "?";
}

const char* CipherName(Cipher c) {
  switch (c) {
    case Cipher::kNone: return "none";
    case Cipher::kChaCha20Poly1305: return "chacha20-poly1305";
    case Cipher::kAes256Gcm: return "aes-256-gcm";
  }
  return "?";
}

uint32_t SupportedCiphers() {
  static const uint32_t mask = [] {
    if (sodium_init() < 0) return 0u;
    uint32_t m = 1u << static_cast<int>(Cipher::kChaCha20Poly1305);
    if (crypto_aead_aes256gcm_is_available()) m |= 1u << static_cast<int>(Cipher::kAes256Gcm);
    return m;
  }();
  return mask;
}

namespace secure {

RecordCipher::RecordCipher(Cipher cipher, const SessionKey& key) : cipher_(cipher), key_(key) {
  if (cipher_ == Cipher::kAes256Gcm) {
    void* p = nullptr;
    if (posix_memalign(&p, 16, sizeof(crypto_aead_aes256gcm_state)) != 0) throw std::bad_alloc();
    aes_state_ = p;
    crypto_aead_aes256gcm_beforenm(static_cast<crypto_aead_aes256gcm_state*>(aes_state_), key_.data());
  }
}

RecordCipher::~RecordCipher() {
  sodium_memzero(key_.data(), key_.size());
  if (aes_state_ != nullptr) {
    sodium_memzero(aes_state_, sizeof(crypto_aead_aes256gcm_state));
    std::free(aes_state_);
  }
}

RecordCipher::RecordCipher(RecordCipher&& o) noexcept
    : cipher_(std::exchange(o.cipher_, Cipher::kNone)), key_(o.key_), aes_state_(std::exchange(o.aes_state_, nullptr)),
      counter_(o.counter_) {
  sodium_memzero(o.key_.data(), o.key_.size());
}

RecordCipher& RecordCipher::operator=(RecordCipher&& o) noexcept {
  if (this != &o) {
    this->~RecordCipher();
    new (this) RecordCipher(std::move(o));
  }
  return *this;
}

void RecordCipher::Nonce(uint8_t out[12]) const {
  std::memset(out, 0, 12);
  for (int i = 0; i < 8; i++) out[4 + i] = static_cast<uint8_t>(counter_ >> (8 * i));
}

size_t RecordCipher::RecordLength(const uint8_t header[kRecordHeader]) {
  uint32_t n = uint32_t{header[0]} | uint32_t{header[1]} << 8 | uint32_t{header[2]} << 16 | uint32_t{header[3]} << 24;
  return n == 0 || n > kMaxRecord ? 0 : n;
}

void RecordCipher::Seal(const void* plain, size_t n, uint8_t* out) {
  uint32_t len = static_cast<uint32_t>(n);
  for (int i = 0; i < 4; i++) out[i] = static_cast<uint8_t>(len >> (8 * i));
  uint8_t nonce[12];
  Nonce(nonce);
  counter_++;
  auto* m = static_cast<const unsigned char*>(plain);
  uint8_t* c = out + kRecordHeader;
  uint8_t* tag = c + n;
  if (cipher_ == Cipher::kAes256Gcm) {
    crypto_aead_aes256gcm_encrypt_detached_afternm(c, tag, nullptr, m, n, out, kRecordHeader, nullptr, nonce,
                                                   static_cast<crypto_aead_aes256gcm_state*>(aes_state_));
  } else {
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(c, tag, nullptr, m, n, out, kRecordHeader, nullptr, nonce,
                                                       key_.data());
  }
}

bool RecordCipher::Open(const uint8_t header[kRecordHeader], const uint8_t* body, uint8_t* plain) {
  size_t n = RecordLength(header);
  if (n == 0) return false;
  uint8_t nonce[12];
  Nonce(nonce);
  int rc;
  if (cipher_ == Cipher::kAes256Gcm) {
    rc = crypto_aead_aes256gcm_decrypt_detached_afternm(plain, nullptr, body, n, body + n, header, kRecordHeader, nonce,
                                                        static_cast<crypto_aead_aes256gcm_state*>(aes_state_));
  } else {
    rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(plain, nullptr, body, n, body + n, header, kRecordHeader,
                                                            nonce, key_.data());
  }
  if (rc != 0) return false;
  counter_++;
  return true;
}

}  // namespace secure
}  // namespace remora

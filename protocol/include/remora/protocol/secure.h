// Encryption of a session's data path (docs/PROTOCOL.md, "Encryption"; docs/SECURITY.md).
// The handshake derives one key per direction from an ephemeral X25519 exchange bound to its
// transcript; the TCP transport then seals every byte it sends in records (AEAD with a
// counter nonce, so a record cannot be altered, dropped, replayed or reordered unnoticed).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "remora/base/status.h"

namespace remora {

// REMORA_ENCRYPT (client) and --encrypt (server). on: required; off: refused; auto: on for
// TCP to a non-loopback peer. A client and a server that require opposite things fail the
// handshake with a message saying so.
enum class EncryptMode : uint8_t { kOff = 0, kAuto = 1, kOn = 2 };
Result<EncryptMode> ParseEncryptMode(std::string_view text);
const char* EncryptModeName(EncryptMode mode);

// Record ciphers, strongest-and-fastest first. AES-256-GCM only where the CPU has AES-NI
// and CLMUL (libsodium's implementation needs them); ChaCha20-Poly1305 everywhere.
enum class Cipher : uint8_t { kNone = 0, kChaCha20Poly1305 = 1, kAes256Gcm = 2 };
const char* CipherName(Cipher c);
// Bit (1 << Cipher) for each cipher this process can run.
uint32_t SupportedCiphers();

using SessionKey = std::array<uint8_t, 32>;

// The data-path keys of one session (both ends derive the same ones).
struct SessionKeys {
  Cipher cipher = Cipher::kNone;
  SessionKey client_to_server{};
  SessionKey server_to_client{};
};

}  // namespace remora

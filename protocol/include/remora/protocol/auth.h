// Tenant tokens and the SCRAM-style proofs built on them (HMAC-SHA-256 via libsodium):
//   ClientKey = HMAC(secret, "Remora Client Key")      StoredKey = SHA-256(ClientKey)
//   ServerKey = HMAC(secret, "Remora Server Key")
//   ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
//   ServerSignature = HMAC(ServerKey, AuthMessage)
// The server keeps the verifier (StoredKey, ServerKey), never the token: it recovers
// ClientKey from a proof and checks its hash, and proves in turn that it knows ServerKey.
// AuthMessage is the caller's: the session handshake binds it to its transcript and to an
// ephemeral key exchange (handshake.cc, docs/SECURITY.md says what the verifier reveals);
// the admin login uses AdminAuthMessage. The two never share a label.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "remora/base/status.h"

namespace remora {

using Secret = std::array<uint8_t, 32>;
using Key = std::array<uint8_t, 32>;
using Nonce = std::array<uint8_t, 32>;

struct Token {
  std::string tenant;
  Secret secret{};
};

// "remora1.<tenant>.<base64url secret>"
std::string FormatToken(const Token& token);
Result<Token> ParseToken(std::string_view text);
// Tenant names: 1-63 of [a-z0-9_-], starting with a letter or digit.
Status ValidateTenantName(std::string_view name);

Secret RandomSecret();
Nonce RandomNonce();

// What a server stores for a token.
struct Verifier {
  Key stored_key{};
  Key server_key{};
};
Verifier VerifierFor(const Secret& secret);
Key StoredKeyFor(const Secret& secret);
Key ServerKeyFor(const Secret& secret);

Key ClientProof(const Secret& secret, std::string_view auth_message);
// Constant time in everything but the length of auth_message.
bool VerifyProof(const Key& stored_key, std::string_view auth_message, const Key& proof);
Key ServerSignature(const Key& server_key, std::string_view auth_message);
// Constant-time comparison of a received signature with the expected one.
bool VerifyServerSignature(const Key& server_key, std::string_view auth_message, const Key& signature);

// The admin login (AdminLogin over TCP, inside the sealed admin channel of
// server/common/admin_channel.h): "remora-admin-v2|" clientNonce serverNonce binding, the
// binding being the channel's (so a proof made on one channel is refused on any other).
std::string AdminAuthMessage(const Nonce& client_nonce, const Nonce& server_nonce, const std::array<uint8_t, 32>& binding);

std::string ToHex(const uint8_t* data, size_t n);
Result<Key> KeyFromHex(std::string_view hex);

}  // namespace remora

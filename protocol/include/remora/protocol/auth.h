// Tenant tokens and the challenge-response that proves one without sending it (SCRAM-like,
// HMAC-SHA-256 via libsodium):
//   ClientKey = HMAC(secret, "Remora Client Key")      StoredKey = SHA-256(ClientKey)
//   AuthMessage = "remora-auth-v1" | tenant | clientNonce | serverNonce
//   ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
// The server keeps only StoredKey; it recovers ClientKey from the proof and checks its hash,
// so neither the wire nor a stolen database reveals a usable token.
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
Key StoredKeyFor(const Secret& secret);
Key ClientProof(const Secret& secret, std::string_view tenant, const Nonce& client_nonce,
                const Nonce& server_nonce);
bool VerifyProof(const Key& stored_key, std::string_view tenant, const Nonce& client_nonce,
                 const Nonce& server_nonce, const Key& proof);

std::string ToHex(const uint8_t* data, size_t n);
Result<Key> KeyFromHex(std::string_view hex);

}  // namespace remora

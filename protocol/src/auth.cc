#include "remora/protocol/auth.h"

#include <sodium.h>

#include <cstring>

#include "remora/base/util.h"

namespace remora {
namespace {

void EnsureSodium() {
  static const bool ok = sodium_init() >= 0;
  (void)ok;
}

Key Hmac(const uint8_t* key, size_t key_len, const uint8_t* msg, size_t msg_len) {
  Key out;
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key, key_len);
  crypto_auth_hmacsha256_update(&st, msg, msg_len);
  crypto_auth_hmacsha256_final(&st, out.data());
  return out;
}

Key ClientKey(const Secret& secret) {
  static const char kLabel[] = "Remora Client Key";
  return Hmac(secret.data(), secret.size(), reinterpret_cast<const uint8_t*>(kLabel), sizeof(kLabel) - 1);
}

Key ServerKeyOf(const Secret& secret) {
  static const char kLabel[] = "Remora Server Key";
  return Hmac(secret.data(), secret.size(), reinterpret_cast<const uint8_t*>(kLabel), sizeof(kLabel) - 1);
}

Key HmacOf(const Key& key, std::string_view m) {
  return Hmac(key.data(), key.size(), reinterpret_cast<const uint8_t*>(m.data()), m.size());
}

}  // namespace

Status ValidateTenantName(std::string_view name) {
  if (name.empty() || name.size() > 63)
    return Error(Err::kInvalidValue, "tenant name must be 1 to 63 characters");
  for (size_t i = 0; i < name.size(); i++) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && !(i > 0 && (c == '-' || c == '_')))
      return Error(Err::kInvalidValue,
                   "invalid tenant name '{}': use lowercase letters, digits, '-' and '_'", Printable(name));
  }
  return Status::Ok();
}

std::string FormatToken(const Token& token) {
  EnsureSodium();
  char b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];
  sodium_bin2base64(b64, sizeof(b64), token.secret.data(), token.secret.size(),
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  return "remora1." + token.tenant + "." + b64;
}

Result<Token> ParseToken(std::string_view text) {
  EnsureSodium();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  constexpr std::string_view kPrefix = "remora1.";
  if (text.substr(0, kPrefix.size()) != kPrefix)
    return Error(Err::kInvalidValue, "not a Remora token (expected 'remora1.<tenant>.<secret>')");
  text.remove_prefix(kPrefix.size());
  size_t dot = text.rfind('.');
  if (dot == std::string_view::npos) return Error(Err::kInvalidValue, "malformed Remora token");
  Token t;
  t.tenant = std::string(text.substr(0, dot));
  RETURN_IF_ERROR(ValidateTenantName(t.tenant));
  std::string b64(text.substr(dot + 1));
  size_t len = 0;
  if (sodium_base642bin(t.secret.data(), t.secret.size(), b64.c_str(), b64.size(), nullptr, &len,
                        nullptr, sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
      len != t.secret.size())
    return Error(Err::kInvalidValue, "malformed Remora token secret");
  return t;
}

Secret RandomSecret() {
  EnsureSodium();
  Secret s;
  randombytes_buf(s.data(), s.size());
  return s;
}

Nonce RandomNonce() {
  EnsureSodium();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

Key StoredKeyFor(const Secret& secret) {
  EnsureSodium();
  Key ck = ClientKey(secret);
  Key stored;
  crypto_hash_sha256(stored.data(), ck.data(), ck.size());
  sodium_memzero(ck.data(), ck.size());
  return stored;
}

Key ServerKeyFor(const Secret& secret) {
  EnsureSodium();
  return ServerKeyOf(secret);
}

Verifier VerifierFor(const Secret& secret) { return Verifier{StoredKeyFor(secret), ServerKeyFor(secret)}; }

Key ClientProof(const Secret& secret, std::string_view auth_message) {
  EnsureSodium();
  Key ck = ClientKey(secret);
  Key stored;
  crypto_hash_sha256(stored.data(), ck.data(), ck.size());
  Key sig = HmacOf(stored, auth_message);
  Key proof;
  for (size_t i = 0; i < proof.size(); i++) proof[i] = ck[i] ^ sig[i];
  sodium_memzero(ck.data(), ck.size());
  return proof;
}

bool VerifyProof(const Key& stored_key, std::string_view auth_message, const Key& proof) {
  EnsureSodium();
  Key sig = HmacOf(stored_key, auth_message);
  Key ck;
  for (size_t i = 0; i < ck.size(); i++) ck[i] = proof[i] ^ sig[i];
  Key h;
  crypto_hash_sha256(h.data(), ck.data(), ck.size());
  sodium_memzero(ck.data(), ck.size());
  return sodium_memcmp(h.data(), stored_key.data(), h.size()) == 0;
}

Key ServerSignature(const Key& server_key, std::string_view auth_message) {
  EnsureSodium();
  return HmacOf(server_key, auth_message);
}

bool VerifyServerSignature(const Key& server_key, std::string_view auth_message, const Key& signature) {
  Key expected = ServerSignature(server_key, auth_message);
  return sodium_memcmp(expected.data(), signature.data(), expected.size()) == 0;
}

std::string AdminAuthMessage(const Nonce& cn, const Nonce& sn, const std::array<uint8_t, 32>& binding) {
  std::string m = "remora-admin-v2|";
  m.append(reinterpret_cast<const char*>(cn.data()), cn.size());
  m.append(reinterpret_cast<const char*>(sn.data()), sn.size());
  m.append(reinterpret_cast<const char*>(binding.data()), binding.size());
  return m;
}

std::string ToHex(const uint8_t* data, size_t n) {
  std::string s(n * 2 + 1, '\0');
  sodium_bin2hex(s.data(), s.size(), data, n);
  s.pop_back();
  return s;
}

Result<Key> KeyFromHex(std::string_view hex) {
  Key k;
  size_t len = 0;
  if (sodium_hex2bin(k.data(), k.size(), hex.data(), hex.size(), nullptr, &len, nullptr) != 0 || len != k.size())
    return Error(Err::kInvalidValue, "malformed key hex");
  return k;
}

}  // namespace remora

#include "secure/handshake_crypto.h"

#include <sodium.h>

#include <cstdlib>
#include <cstring>

namespace remora::handshake {
namespace {

constexpr char kKdfContext[crypto_kdf_CONTEXTBYTES + 1] = "RemoraHS";
constexpr uint64_t kProofKeyId = 1, kClientToServerId = 2, kServerToClientId = 3, kBindingId = 4, kDataKeyId = 5;
constexpr char kProofAd[] = "remora-v2-proof";
static_assert(kShareBytes == crypto_scalarmult_BYTES);
static_assert(kSealedProofBytes == 32 + crypto_aead_chacha20poly1305_ietf_ABYTES);

void HashWords(crypto_generichash_state* st, std::span<const uint64_t> words) {
  uint64_t n = words.size_bytes();
  crypto_generichash_update(st, reinterpret_cast<const unsigned char*>(&n), sizeof(n));
  crypto_generichash_update(st, reinterpret_cast<const unsigned char*>(words.data()), n);
}

}  // namespace

KeyExchange::KeyExchange() {
  if (sodium_init() < 0) std::abort();
  randombytes_buf(secret.data(), secret.size());
  crypto_scalarmult_base(share.data(), secret.data());
}

KeyExchange::~KeyExchange() { sodium_memzero(secret.data(), secret.size()); }

Derived::~Derived() {
  sodium_memzero(proof_key.data(), proof_key.size());
  sodium_memzero(c2s.data(), c2s.size());
  sodium_memzero(s2c.data(), s2c.size());
  sodium_memzero(data_key.data(), data_key.size());
}

bool Derive(const KeyExchange& mine, const std::array<uint8_t, kShareBytes>& theirs, std::span<const uint64_t> hello,
            std::span<const uint64_t> challenge, Derived* out) {
  uint8_t shared[crypto_scalarmult_BYTES];
  if (crypto_scalarmult(shared, mine.secret.data(), theirs.data()) != 0) return false;
  static const char kLabel[] = "remora-v2-transcript";
  uint8_t transcript[32];
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, sizeof(transcript));
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kLabel), sizeof(kLabel) - 1);
  HashWords(&st, hello);
  HashWords(&st, challenge);
  crypto_generichash_final(&st, transcript, sizeof(transcript));
  uint8_t master[crypto_kdf_KEYBYTES];
  crypto_generichash(master, sizeof(master), transcript, sizeof(transcript), shared, sizeof(shared));
  sodium_memzero(shared, sizeof(shared));
  crypto_kdf_derive_from_key(out->proof_key.data(), 32, kProofKeyId, kKdfContext, master);
  crypto_kdf_derive_from_key(out->c2s.data(), 32, kClientToServerId, kKdfContext, master);
  crypto_kdf_derive_from_key(out->s2c.data(), 32, kServerToClientId, kKdfContext, master);
  crypto_kdf_derive_from_key(out->binding.data(), 32, kBindingId, kKdfContext, master);
  crypto_kdf_derive_from_key(out->data_key.data(), 32, kDataKeyId, kKdfContext, master);
  sodium_memzero(master, sizeof(master));
  return true;
}

std::array<uint8_t, 32> DataMac(const SessionKey& data_key, uint64_t session_id, uint32_t index) {
  static const char kLabel[] = "remora-data-v1|";
  uint8_t msg[sizeof(kLabel) - 1 + 8 + 4];
  std::memcpy(msg, kLabel, sizeof(kLabel) - 1);
  std::memcpy(msg + sizeof(kLabel) - 1, &session_id, 8);
  std::memcpy(msg + sizeof(kLabel) - 1 + 8, &index, 4);
  std::array<uint8_t, 32> mac{};
  crypto_auth_hmacsha256(mac.data(), msg, sizeof(msg), data_key.data());
  return mac;
}

std::string AuthMessage(std::string_view tenant, const SessionKey& binding) {
  std::string m = "remora-auth-v2|";
  m.append(tenant);
  m.push_back('|');
  m.append(reinterpret_cast<const char*>(binding.data()), binding.size());
  return m;
}

std::string WelcomeMessage(std::string_view auth_message, const SessionInfo& info) {
  std::string m(auth_message);
  m += "|welcome|";
  m.append(reinterpret_cast<const char*>(&info.session_id), sizeof(info.session_id));
  m += info.tenant;
  m.push_back('|');
  m += info.backend;
  m.push_back(info.emulated ? '1' : '0');
  // A locate answer's servers (none in a session's Welcome, whose message is unchanged).
  for (const auto& [url, gpus] : info.pool_servers) {
    m += "|pool|";
    m += url;
    m.push_back('|');
    m += std::to_string(gpus);
  }
  return m;
}

std::array<uint8_t, kSealedProofBytes> SealProof(const Key& proof, const SessionKey& key) {
  std::array<uint8_t, kSealedProofBytes> out{};
  uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES] = {};
  crypto_aead_chacha20poly1305_ietf_encrypt(out.data(), nullptr, proof.data(), proof.size(),
                                            reinterpret_cast<const unsigned char*>(kProofAd), sizeof(kProofAd) - 1,
                                            nullptr, nonce, key.data());
  return out;
}

bool OpenProof(const uint8_t* sealed, size_t size, const SessionKey& key, Key* proof) {
  if (size != kSealedProofBytes) return false;
  uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES] = {};
  return crypto_aead_chacha20poly1305_ietf_decrypt(proof->data(), nullptr, nullptr, sealed, size,
                                                   reinterpret_cast<const unsigned char*>(kProofAd),
                                                   sizeof(kProofAd) - 1, nonce, key.data()) == 0;
}

}  // namespace remora::handshake

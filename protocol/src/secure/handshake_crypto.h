// The cryptography of the session handshake (handshake.cc): the ephemeral X25519 exchange,
// what both ends derive from it and the transcript, the messages the SCRAM proof and the
// server's signature cover, and the sealing of the proof. Private to protocol/ (and its
// tests, which play a man in the middle with it).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "remora/protocol/auth.h"
#include "remora/protocol/handshake.h"
#include "remora/protocol/secure.h"

namespace remora::handshake {

inline constexpr size_t kShareBytes = 32;
inline constexpr size_t kSealedProofBytes = 32 + 16;

// One side's ephemeral key pair (the secret is wiped on destruction).
struct KeyExchange {
  std::array<uint8_t, kShareBytes> secret{}, share{};
  KeyExchange();
  ~KeyExchange();
  KeyExchange(const KeyExchange&) = delete;
  KeyExchange& operator=(const KeyExchange&) = delete;
};

// What both ends derive from the shared secret and the transcript (Hello and Challenge
// bodies): the proof's sealing key, the data-path keys and the channel binding.
// `data_key` authenticates the session's tcp data connections (DataMac).
struct Derived {
  SessionKey proof_key{}, c2s{}, s2c{}, binding{}, data_key{};
  ~Derived();
};

// False if `theirs` is a low-order point (the shared secret would be all zero).
bool Derive(const KeyExchange& mine, const std::array<uint8_t, kShareBytes>& theirs, std::span<const uint64_t> hello,
            std::span<const uint64_t> challenge, Derived* out);

// HMAC-SHA-256(data_key, "remora-data-v1|" session_id | index): a data connection's proof
// that it belongs to the session.
std::array<uint8_t, 32> DataMac(const SessionKey& data_key, uint64_t session_id, uint32_t index);

// "remora-auth-v2|" tenant "|" binding: what the SCRAM proof covers.
std::string AuthMessage(std::string_view tenant, const SessionKey& binding);
// What the Welcome's signature covers: the authenticated exchange and the session it opens.
std::string WelcomeMessage(std::string_view auth_message, const SessionInfo& info);

// The proof sealed under the proof key (ChaCha20-Poly1305, nonce 0: the key is used once).
std::array<uint8_t, kSealedProofBytes> SealProof(const Key& proof, const SessionKey& key);
bool OpenProof(const uint8_t* sealed, size_t size, const SessionKey& key, Key* proof);

}  // namespace remora::handshake

// The sealed channel of the admin API over TCP (docs/PROTOCOL.md, "The admin API over TCP";
// docs/SECURITY.md, N7). Before any Cap'n Proto message the two ends exchange ephemeral X25519
// shares in the clear:
//
//   client -> server  "RMADMIN2" | client share (32 bytes)
//   server -> client  "RMADMIN2" | server share (32 bytes)
//                 or  "RMADMNO!" | u32 length (little endian, at most 1024) | that much text,
//                     a refusal (too many connections from the client's address...), then EOF
//
// and derive, as a session handshake does (handshake::Derive over the shared secret and both
// messages), one key per direction and a channel binding. Every byte after that travels in
// sealed records (secure/aead.h: ChaCha20-Poly1305, the record's sequence number as its
// nonce): a relay can neither read the RPC (the tokens createTenant answers and
// migrateSession carries) nor change, drop, replay or reorder a byte of it unnoticed. The
// exchange alone authenticates no one: the login inside the channel (AdminLogin, SCRAM with
// the admin token) covers the binding (AdminAuthMessage, auth.h), so a man in the middle who
// substitutes its own shares holds two channels whose proofs the real ends refuse.
//
// Thread-safety: none; a SealedStream belongs to the kj event loop of its thread.
#pragma once

#include <kj/async-io.h>

#include <functional>
#include <string>

#include "remora/base/status.h"
#include "remora/protocol/auth.h"
#include "remora/protocol/secure.h"

namespace remora::admin {

inline constexpr size_t kChannelHelloBytes = 40;
inline constexpr size_t kMaxRefusalBytes = 1024;

// What both ends derive from the exchange (wiped on destruction).
struct ChannelKeys {
  SessionKey client_to_server{}, server_to_client{}, binding{};
  ChannelKeys() = default;
  ChannelKeys(const ChannelKeys&) = default;
  ChannelKeys& operator=(const ChannelKeys&) = default;
  ~ChannelKeys();
};

// The client's side of the exchange on a connected, blocking TCP socket: sends its hello and
// reads the server's, each within timeout_ms. A refusal is kDevicesUnavailable with the
// server's text; anything else that is not the server's hello (an older server, which
// expects Cap'n Proto at once, closes the connection) is kDevicesUnavailable saying so.
Result<ChannelKeys> ClientKeyExchange(int fd, int timeout_ms);

// The server's side on a freshly accepted connection: reads the client's hello (the caller
// bounds the time), answers with its own and fills `keys` (which must outlive the promise).
// Fails (a kj exception) if the peer sent something else.
kj::Promise<void> ServerKeyExchange(kj::AsyncIoStream& raw, ChannelKeys& keys);

// Writes a refusal (the text is cut at kMaxRefusalBytes). The caller closes the stream after.
kj::Promise<void> SendRefusal(kj::AsyncIoStream& raw, const std::string& text);

// `raw` after the exchange, every byte sealed: writes under this side's key, reads opened
// with the other's. A record that does not open (altered, replayed, reordered, truncated)
// breaks the stream (a DISCONNECTED exception, and `broken` is told why), as does a peer that
// stops inside a record.
kj::Own<kj::AsyncIoStream> SealStream(kj::Own<kj::AsyncIoStream> raw, const ChannelKeys& keys, bool server_side,
                                      std::function<void(const char* why)> broken = nullptr);

}  // namespace remora::admin

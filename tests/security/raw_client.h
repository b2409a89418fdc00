// A hostile client for the security tests (docs/SECURITY.md): Remora's own framing and
// handshake (protocol/), but requests built by hand, so a test can send what the shim never
// would (forged hashes, overflowing shapes, floods) to a real remora-server.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remora.capnp.h"
#include "remora/protocol/api_args.h"
#include "remora/protocol/message.h"
#include "remora/protocol/transport.h"

namespace remora::security {

struct RawReply {
  Err error = Err::kSuccess;
  std::string message;
  std::vector<uint64_t> body;  // the Reply, for the caller to decode
  std::vector<std::byte> bulk;
  template <typename Fn>
  auto Decode(Fn&& fn) const;
};

class RawSession {
 public:
  using Build = std::function<void(wire::Request::Builder&)>;

  // Connects to `url` as the token's tenant (or anonymously) with the real handshake.
  static Result<std::unique_ptr<RawSession>> Open(const std::string& url, const std::string& token = "",
                                                  ConnectOptions options = {});

  // Sends one request and waits for its reply (bulk of the reply is kept in RawReply::bulk).
  Result<RawReply> Call(Build build, ConstBytes bulk = {}, int device = 0, int timeout_ms = 20000);
  // Sends one request expecting no reply.
  Status Post(Build build, ConstBytes bulk = {}, int device = 0);
  // Sends one request that expects a reply, without waiting for it.
  Status Send(Build build, ConstBytes bulk = {}, int device = 0);
  Connection& connection() { return *conn_; }
  const SessionInfo& session() const { return session_; }

 private:
  std::unique_ptr<Connection> conn_;
  SessionInfo session_;
  uint64_t next_tag_ = 1;
};

template <typename Fn>
auto RawReply::Decode(Fn&& fn) const {
  BodyReader reader(body);
  return fn(reader.Root<wire::Reply>());
}

// A plain TCP connection to 127.0.0.1:port (blocking).
Fd TcpConnectForTest(uint16_t port);

// BLAKE2b-256 of `bytes` (what the shim sends as a module's hash).
std::vector<uint8_t> ModuleHash(const std::vector<std::byte>& bytes);
// A fat binary image of `size` bytes (the emulated driver checks the magic) whose content
// is `seed`-dependent.
std::vector<std::byte> FakeFatbin(size_t size, uint8_t seed);

// A generated driver-API call (protocol/api/cuda.api's @function), its arguments encoded as
// the shim's stub would, waited for.
Result<RawReply> ApiCall(RawSession& s, uint32_t function, const api::ArgWriter& args, int device = 0);
// A stream (cuStreamCreateWithPriority) or an event (cuEventCreate) of the session: its
// handle in `handle` when `error` is kSuccess.
struct Created {
  Err error = Err::kUnknown;
  std::string message;
  uint64_t handle = 0;
};
Created CreateStream(RawSession& s, unsigned flags = 0, int device = 0);
Created CreateEvent(RawSession& s, unsigned flags = 0, int device = 0);

// Result of moduleLoad: a handle, or needImage, or an error.
struct ModuleAnswer {
  Err error = Err::kSuccess;
  std::string message;
  uint64_t handle = 0;
  bool need_image = false;
};
ModuleAnswer LoadModule(RawSession& s, const std::vector<uint8_t>& hash, const std::vector<std::byte>* image,
                        uint64_t size);

}  // namespace remora::security

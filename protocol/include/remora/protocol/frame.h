// The frame: Remora's unit of transmission on every transport (docs/PROTOCOL.md).
//
//   FrameHeader (32 bytes, little endian) | body (body_words x 8 bytes: a Cap'n Proto
//   message in standard flat encoding) | bulk (bulk_bytes, out of band of the encoding)
//
// Where the bulk travels is the transport's business: right after the body on TCP (a streamed
// trailer), inline in the ring record or through staging slots on shm, by one-sided reads and
// writes on RDMA. The body never contains bulk data, so a frame can be parsed without
// touching its payload.
#pragma once

#include <cstdint>
#include <span>

#include "remora/base/status.h"

namespace remora {

enum class FrameKind : uint16_t {
  kHandshake = 1,  // wire::HandshakeMessage
  kRequest = 2,    // wire::Request
  kReply = 3,      // wire::Reply
  kNotice = 4,     // wire::Notice (server-initiated, tag 0)
  kHeartbeat = 5,  // liveness only, either direction, tag 0, no bulk; the body (one zero word)
                   // is never read. See docs/ARCHITECTURE.md, "Failure model".
};

enum FrameFlags : uint16_t {
  kFlagExpectsReply = 1 << 0,  // the requester waits for a Reply with the same tag
};

inline constexpr uint32_t kFrameMagic = 0x31524d52;  // "RMR1"
inline constexpr uint32_t kMaxBodyWords = 1u << 20;   // 8 MiB of encoded message
inline constexpr uint64_t kMaxBulkBytes = 1ull << 40;

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t kind = 0;
  uint16_t flags = 0;
  uint32_t body_words = 0;
  uint32_t reserved = 0;  // must be zero
  uint64_t tag = 0;       // request sequence number; replies echo it
  uint64_t bulk_bytes = 0;
};
static_assert(sizeof(FrameHeader) == 32);

// Rejects headers a well-behaved peer never sends (bad magic, unknown kind, oversize).
Status ValidateFrameHeader(const FrameHeader& h);

// A frame to send. `body` is the flat Cap'n Proto encoding (see message.h).
struct OutFrame {
  FrameKind kind = FrameKind::kRequest;
  uint16_t flags = 0;
  uint64_t tag = 0;
  std::span<const uint64_t> body;
};

// The header announcing `f` followed by `bulk_bytes` of bulk.
inline FrameHeader HeaderOf(const OutFrame& f, uint64_t bulk_bytes) {
  FrameHeader h;
  h.kind = static_cast<uint16_t>(f.kind);
  h.flags = f.flags;
  h.tag = f.tag;
  h.body_words = static_cast<uint32_t>(f.body.size());
  h.bulk_bytes = bulk_bytes;
  return h;
}

// A heartbeat frame (its body is static: one zero word).
inline OutFrame HeartbeatFrame() {
  static constexpr uint64_t kEmpty[1] = {0};
  OutFrame f;
  f.kind = FrameKind::kHeartbeat;
  f.body = kEmpty;
  return f;
}

// A received frame. `body` points into transport-owned memory; see Connection for how long
// it stays valid.
struct InFrame {
  FrameHeader header;
  std::span<const uint64_t> body;
  FrameKind kind() const { return static_cast<FrameKind>(header.kind); }
};

}  // namespace remora

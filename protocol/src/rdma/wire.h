// Wire formats private to the RDMA transport (see README.md in this folder for the whole
// protocol). Pure encoding and decoding, no verbs: unit-tested on any host.
//
// All integers are little endian. Nothing here is exposed to the layers above: the
// FrameHeader and the body keep exactly the meaning they have on every transport; the RDMA
// transport only wraps them in its own record.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remora/base/bytes.h"
#include "remora/base/status.h"
#include "remora/protocol/connection.h"
#include "remora/protocol/frame.h"

namespace remora::rdma {

inline constexpr uint16_t kWireVersion = 1;
using Secret = std::array<uint8_t, 16>;

// ---- bootstrap message ------------------------------------------------------------------
// Sent once by the worker to the client over the TCP socket, right after the handshake's
// Welcome: where the worker's rdma_cm listener is and the secret the client must present
// when it connects there (so only the authenticated client can take the queue pair).
//
//   0  u32 magic "RMRB"     4  u16 version     6  u16 address family (AF_INET / AF_INET6)
//   8  u16 port             10 u16 message length (bytes after the fixed part)
//   12 u32 status (0, or an Err code: the worker could not set up RDMA; the message says why)
//   16 u8[16] address (IPv4 in the first 4 bytes)  32 u8[16] secret  48 u8[16] zero
//   64 message (UTF-8, no terminator)
inline constexpr uint32_t kBootstrapMagic = 0x42524d52;  // "RMRB"
inline constexpr size_t kBootstrapFixedBytes = 64;
inline constexpr size_t kBootstrapMaxMessage = 1024;

struct Bootstrap {
  Err status = Err::kSuccess;
  std::string message;       // why status is not kSuccess
  sockaddr_storage address{};  // family, address and port of the rdma_cm listener
  Secret secret{};
};

std::vector<std::byte> EncodeBootstrap(const Bootstrap& b);
// Decodes the fixed part; returns the length of the message that follows it.
Result<size_t> DecodeBootstrapFixed(ConstBytes fixed, Bootstrap* out);

// ---- rdma_cm private data ---------------------------------------------------------------
// Carried by the connect request (client -> worker, with the bootstrap secret) and by the
// accept (worker -> client, secret zero). 32 bytes, under the 56 that RC connects allow.
//   0 u32 magic "RMRC"  4 u16 version  6 u16 zero  8 u8[16] secret  24 u32 receive slots
//   28 u32 slot bytes (the sender's receive queue: the peer's initial credits and largest
//   message)
inline constexpr uint32_t kConnectMagic = 0x43524d52;  // "RMRC"
inline constexpr size_t kConnectDataBytes = 32;

struct ConnectData {
  Secret secret{};
  uint32_t recv_slots = 0;
  uint32_t slot_bytes = 0;
};

std::array<std::byte, kConnectDataBytes> EncodeConnectData(const ConnectData& c);
Result<ConnectData> DecodeConnectData(const void* data, size_t size);

// ---- slot messages ----------------------------------------------------------------------
// Every SEND carries one message of at most the receiver's slot size, starting with:
enum class MsgType : uint8_t {
  kFrame = 1,     // first part of a frame record; aux = record bytes (more follow as kFragment)
  kFragment = 2,  // next part of the record being reassembled
  kSegment = 3,   // requester -> executor: a BulkDesc of the bulk of the last frame record
  kAck = 4,       // executor -> requester: aux remote bulk sources (segments) fully read
  kCredit = 5,    // nothing but the credits field
};

struct SlotHeader {
  uint8_t type = 0;
  uint8_t flags = 0;     // kFrame: RecordFlags
  uint16_t credits = 0;  // receive slots the sender re-posted since its previous message
  uint32_t bytes = 0;    // payload bytes after this header
  uint64_t aux = 0;
};
static_assert(sizeof(SlotHeader) == 16);

// Remote memory: registered with the peer's HCA, reachable by RDMA READ or WRITE.
struct BulkDesc {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t reserved = 0;
  uint64_t length = 0;
};
static_assert(sizeof(BulkDesc) == 24);

// ---- frame records ----------------------------------------------------------------------
// A frame record is the logical payload of a kFrame message (plus its kFragments):
//   FrameHeader | [BulkDesc source] | [BulkDesc reply target] | body | [embedded bulk]
// Where the frame's bulk is (at most one of the first four; none when bulk_bytes is 0):
enum RecordFlags : uint8_t {
  kEmbeddedBulk = 1 << 0,    // the bulk follows the body inside the record
  kSourceWhole = 1 << 1,     // the source BulkDesc covers the whole bulk: READ it
  kSourceSegments = 1 << 2,  // kSegment messages describing the bulk follow the record
  kBulkWritten = 1 << 3,     // (reply) the bulk was RDMA-written to the request's reply target
  kReplyTarget = 1 << 4,     // (request) a BulkDesc where the reply's bulk may be written
};
inline constexpr uint8_t kBulkModeFlags = kEmbeddedBulk | kSourceWhole | kSourceSegments | kBulkWritten;

FrameHeader MakeFrameHeader(const OutFrame& frame, uint64_t bulk_bytes);

// The part of a record before its body (header and descriptors), built in place.
struct RecordPrefix {
  alignas(8) std::array<std::byte, sizeof(FrameHeader) + 2 * sizeof(BulkDesc)> bytes{};
  size_t size = 0;
  ConstBytes span() const { return {bytes.data(), size}; }
};
RecordPrefix MakeRecordPrefix(const FrameHeader& h, uint8_t flags, const BulkDesc* source, const BulkDesc* reply);
// Total record bytes for a header and flags (embedded bulk included).
uint64_t RecordBytes(const FrameHeader& h, uint8_t flags);

struct ParsedRecord {
  FrameHeader header;
  uint8_t flags = 0;
  std::optional<BulkDesc> source;
  std::optional<BulkDesc> reply;
  std::span<const uint64_t> body;
  ConstBytes embedded;
};
// Validates a record from the peer (8-byte aligned): header, flag combination, sizes.
// Errors are kInvalidValue: the peer broke the protocol.
Result<ParsedRecord> ParseRecord(uint8_t flags, ConstBytes record);

}  // namespace remora::rdma

#include "rdma/wire.h"

#include <netinet/in.h>

#include <cstring>

namespace remora::rdma {
namespace {

// Little-endian field access (the structs above are only layouts; the bytes are written
// field by field so that the encoding does not depend on the host).
void Put16(std::byte* p, uint16_t v) {
  for (int i = 0; i < 2; i++) p[i] = std::byte(v >> (8 * i));
}
void Put32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = std::byte(v >> (8 * i));
}
uint16_t Get16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) | std::to_integer<uint16_t>(p[1]) << 8);
}
uint32_t Get32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | std::to_integer<uint32_t>(p[i]);
  return v;
}

}  // namespace

std::vector<std::byte> EncodeBootstrap(const Bootstrap& b) {
  size_t msg = std::min(b.message.size(), kBootstrapMaxMessage);
  std::vector<std::byte> out(kBootstrapFixedBytes + msg);
  std::byte* p = out.data();
  Put32(p, kBootstrapMagic);
  Put16(p + 4, kWireVersion);
  Put16(p + 6, b.address.ss_family);
  if (b.address.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&b.address);
    Put16(p + 8, ntohs(a->sin_port));
    std::memcpy(p + 16, &a->sin_addr, 4);
  } else if (b.address.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&b.address);
    Put16(p + 8, ntohs(a->sin6_port));
    std::memcpy(p + 16, &a->sin6_addr, 16);
  }
  Put16(p + 10, static_cast<uint16_t>(msg));
  Put32(p + 12, static_cast<uint32_t>(b.status));
  std::memcpy(p + 32, b.secret.data(), b.secret.size());
  std::memcpy(p + kBootstrapFixedBytes, b.message.data(), msg);
  return out;
}

Result<size_t> DecodeBootstrapFixed(ConstBytes fixed, Bootstrap* out) {
  if (fixed.size() < kBootstrapFixedBytes) return Error(Err::kInvalidValue, "RDMA bootstrap message is truncated");
  const std::byte* p = fixed.data();
  if (Get32(p) != kBootstrapMagic) return Error(Err::kInvalidValue, "bad RDMA bootstrap message (magic 0x{:08x})", Get32(p));
  if (Get16(p + 4) != kWireVersion)
    return Error(Err::kNotSupported, "the server's RDMA transport speaks version {}, this client {}", Get16(p + 4), kWireVersion);
  size_t msg = Get16(p + 10);
  if (msg > kBootstrapMaxMessage) return Error(Err::kInvalidValue, "RDMA bootstrap message too long ({})", msg);
  *out = Bootstrap();
  out->status = static_cast<Err>(Get32(p + 12));
  std::memcpy(out->secret.data(), p + 32, out->secret.size());
  uint16_t family = Get16(p + 6);
  uint16_t port = Get16(p + 8);
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&out->address);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    std::memcpy(&a->sin_addr, p + 16, 4);
  } else if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out->address);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    std::memcpy(&a->sin6_addr, p + 16, 16);
  } else if (out->status == Err::kSuccess) {
    return Error(Err::kInvalidValue, "RDMA bootstrap message has address family {}", family);
  }
  return msg;
}

std::array<std::byte, kConnectDataBytes> EncodeConnectData(const ConnectData& c) {
  std::array<std::byte, kConnectDataBytes> out{};
  Put32(out.data(), kConnectMagic);
  Put16(out.data() + 4, kWireVersion);
  std::memcpy(out.data() + 8, c.secret.data(), c.secret.size());
  Put32(out.data() + 24, c.recv_slots);
  Put32(out.data() + 28, c.slot_bytes);
  return out;
}

Result<ConnectData> DecodeConnectData(const void* data, size_t size) {
  // The CM may pad private data with zeros; only the first 32 bytes are ours.
  if (data == nullptr || size < kConnectDataBytes) return Error(Err::kInvalidValue, "RDMA connection data missing ({} bytes)", size);
  auto* p = static_cast<const std::byte*>(data);
  if (Get32(p) != kConnectMagic) return Error(Err::kInvalidValue, "RDMA connection data has a bad magic");
  if (Get16(p + 4) != kWireVersion) return Error(Err::kNotSupported, "RDMA connection data version {} (expected {})", Get16(p + 4), kWireVersion);
  ConnectData c;
  std::memcpy(c.secret.data(), p + 8, c.secret.size());
  c.recv_slots = Get32(p + 24);
  c.slot_bytes = Get32(p + 28);
  if (c.recv_slots < 4 || c.recv_slots > 65535 || c.slot_bytes < 4096 || c.slot_bytes > (64u << 20) || c.slot_bytes % 64 != 0)
    return Error(Err::kInvalidValue, "RDMA peer announced a receive queue of {} x {} bytes", c.recv_slots, c.slot_bytes);
  return c;
}

FrameHeader MakeFrameHeader(const OutFrame& frame, uint64_t bulk_bytes) {
  FrameHeader h;
  h.kind = static_cast<uint16_t>(frame.kind);
  h.flags = frame.flags;
  h.tag = frame.tag;
  h.body_words = static_cast<uint32_t>(frame.body.size());
  h.bulk_bytes = bulk_bytes;
  return h;
}

RecordPrefix MakeRecordPrefix(const FrameHeader& h, uint8_t flags, const BulkDesc* source, const BulkDesc* reply) {
  RecordPrefix p;
  std::memcpy(p.bytes.data(), &h, sizeof(h));
  p.size = sizeof(h);
  if (flags & kSourceWhole) {
    std::memcpy(p.bytes.data() + p.size, source, sizeof(BulkDesc));
    p.size += sizeof(BulkDesc);
  }
  if (flags & kReplyTarget) {
    std::memcpy(p.bytes.data() + p.size, reply, sizeof(BulkDesc));
    p.size += sizeof(BulkDesc);
  }
  return p;
}

uint64_t RecordBytes(const FrameHeader& h, uint8_t flags) {
  uint64_t n = sizeof(FrameHeader) + uint64_t{h.body_words} * 8;
  if (flags & kSourceWhole) n += sizeof(BulkDesc);
  if (flags & kReplyTarget) n += sizeof(BulkDesc);
  if (flags & kEmbeddedBulk) n += h.bulk_bytes;
  return n;
}

Result<ParsedRecord> ParseRecord(uint8_t flags, ConstBytes record) {
  ParsedRecord r;
  if (record.size() < sizeof(FrameHeader)) return Error(Err::kInvalidValue, "RDMA frame record of {} bytes is truncated", record.size());
  if (reinterpret_cast<uintptr_t>(record.data()) % 8 != 0) return Error(Err::kUnknown, "RDMA frame record is misaligned");
  std::memcpy(&r.header, record.data(), sizeof(FrameHeader));
  RETURN_IF_ERROR(ValidateFrameHeader(r.header));
  if (flags & ~(kBulkModeFlags | kReplyTarget)) return Error(Err::kInvalidValue, "RDMA frame record has unknown flags 0x{:02x}", flags);
  uint8_t mode = flags & kBulkModeFlags;
  if (mode & (mode - 1)) return Error(Err::kInvalidValue, "RDMA frame record has conflicting bulk flags 0x{:02x}", flags);
  if ((mode == 0) != (r.header.bulk_bytes == 0))
    return Error(Err::kInvalidValue, "RDMA frame record with {} bulk bytes has bulk flags 0x{:02x}", r.header.bulk_bytes, flags);
  if (record.size() != RecordBytes(r.header, flags))
    return Error(Err::kInvalidValue, "RDMA frame record is {} bytes, its header says {}", record.size(), RecordBytes(r.header, flags));
  size_t at = sizeof(FrameHeader);
  if (flags & kSourceWhole) {
    BulkDesc d;
    std::memcpy(&d, record.data() + at, sizeof(d));
    at += sizeof(d);
    if (d.length != r.header.bulk_bytes)
      return Error(Err::kInvalidValue, "RDMA bulk source of {} bytes for a frame with {} bulk bytes", d.length, r.header.bulk_bytes);
    r.source = d;
  }
  if (flags & kReplyTarget) {
    BulkDesc d;
    std::memcpy(&d, record.data() + at, sizeof(d));
    at += sizeof(d);
    r.reply = d;
  }
  r.flags = flags;
  r.body = {reinterpret_cast<const uint64_t*>(record.data() + at), r.header.body_words};
  at += r.header.body_words * size_t{8};
  if (flags & kEmbeddedBulk) r.embedded = record.subspan(at, r.header.bulk_bytes);
  return r;
}

}  // namespace remora::rdma

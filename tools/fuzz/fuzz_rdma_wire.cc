// Fuzz target `rdma_wire`: the RDMA transport's own wire formats (protocol/src/rdma/wire.*):
// the bootstrap message the worker sends over TCP, the rdma_cm private data of both sides and
// the frame records carried by SEND messages.
//
// Input: a selector byte (0 bootstrap, 1 connect data, 2 frame record), then for records one
// flags byte, then the bytes. Besides memory safety: whatever decodes re-encodes to the same
// bytes (bootstrap and connect data); an accepted record's parts (header, descriptors, body,
// embedded bulk) lie inside the record, do not overlap, and cover it exactly.
#include <netinet/in.h>

#include <cstring>
#include <vector>

#include "fuzz_input.h"
#include "rdma/wire.h"

namespace remora::fuzz {
namespace {

using namespace remora::rdma;

void Bootstrap(std::span<const uint8_t> b) {
  rdma::Bootstrap out;
  auto bytes = std::as_bytes(b);
  auto msg = DecodeBootstrapFixed(bytes, &out);
  if (!msg.ok()) return;
  if (*msg > kBootstrapMaxMessage) Finding("a bootstrap message longer than its limit was accepted");
  if (b.size() >= kBootstrapFixedBytes + *msg)
    out.message.assign(reinterpret_cast<const char*>(b.data()) + kBootstrapFixedBytes, *msg);
  std::vector<std::byte> again = EncodeBootstrap(out);
  rdma::Bootstrap twice;
  auto msg2 = DecodeBootstrapFixed(again, &twice);
  if (!msg2.ok() || *msg2 != std::min(out.message.size(), kBootstrapMaxMessage) || twice.status != out.status ||
      twice.secret != out.secret || twice.address.ss_family != out.address.ss_family)
    Finding("bootstrap message does not survive decode/encode/decode");
}

void Connect(std::span<const uint8_t> b) {
  auto c = DecodeConnectData(b.data(), b.size());
  if (!c.ok()) return;
  auto again = EncodeConnectData(*c);
  // Bytes 6-7 are reserved (sent as zero, not checked).
  if (b.size() < again.size() || std::memcmp(again.data(), b.data(), 6) != 0 ||
      std::memcmp(again.data() + 8, b.data() + 8, again.size() - 8) != 0)
    Finding("connect data does not re-encode to the same bytes");
}

void Record(uint8_t flags, std::span<const uint8_t> b) {
  // Records arrive 8-byte aligned (receive slots and the reassembly buffer are).
  std::vector<uint64_t> aligned((b.size() + 7) / 8);
  if (!b.empty()) std::memcpy(aligned.data(), b.data(), b.size());
  ConstBytes rec(reinterpret_cast<const std::byte*>(aligned.data()), b.size());
  auto r = ParseRecord(flags, rec);
  if (!r.ok()) return;
  const std::byte* end = rec.data() + rec.size();
  auto body_begin = reinterpret_cast<const std::byte*>(r->body.data());
  auto body_end = body_begin + r->body.size_bytes();
  if (body_begin < rec.data() + sizeof(FrameHeader) || body_end > end) Finding("record body outside the record");
  if (r->header.body_words != r->body.size()) Finding("record body size differs from its header");
  size_t descs = (r->source ? 1 : 0) + (r->reply ? 1 : 0);
  if (body_begin != rec.data() + sizeof(FrameHeader) + descs * sizeof(BulkDesc)) Finding("record body misplaced");
  if (!r->embedded.empty()) {
    if (r->embedded.data() != body_end || r->embedded.data() + r->embedded.size() != end)
      Finding("embedded bulk misplaced");
    if (r->embedded.size() != r->header.bulk_bytes) Finding("embedded bulk size differs from its header");
  } else if (body_end != end && !(flags & kEmbeddedBulk && r->header.bulk_bytes == 0)) {
    Finding("record has bytes past its body");
  }
  if (r->source && r->source->length != r->header.bulk_bytes) Finding("bulk source length differs from the header");
  uint64_t x = 0;
  for (uint64_t w : r->body) x ^= w;
  (void)x;
}

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    rdma::Bootstrap boot;
    auto* a = reinterpret_cast<sockaddr_in*>(&boot.address);
    a->sin_family = AF_INET;
    a->sin_port = htons(18515);
    a->sin_addr.s_addr = htonl(0x7f000001);
    boot.secret[0] = 1;
    auto eb = EncodeBootstrap(boot);
    SeedWriter w0;
    w0.Put<uint8_t>(0).Bytes(eb.data(), eb.size());
    s.emplace_back("bootstrap", w0.bytes());
    boot.status = Err::kNotSupported;
    boot.message = "no RDMA device";
    eb = EncodeBootstrap(boot);
    SeedWriter w1;
    w1.Put<uint8_t>(0).Bytes(eb.data(), eb.size());
    s.emplace_back("bootstrap-error", w1.bytes());
    ConnectData cd;
    cd.recv_slots = 64;
    cd.slot_bytes = 16384;
    auto ec = EncodeConnectData(cd);
    SeedWriter w2;
    w2.Put<uint8_t>(1).Bytes(ec.data(), ec.size());
    s.emplace_back("connect", w2.bytes());
    for (uint8_t flags : {uint8_t{0}, uint8_t{kEmbeddedBulk}, uint8_t{kSourceWhole | kReplyTarget}, uint8_t{kSourceSegments}}) {
      FrameHeader h;
      h.kind = 2;
      h.body_words = 2;
      h.bulk_bytes = flags == 0 ? 0 : 24;
      BulkDesc d{0x1000, 7, 0, 24};
      RecordPrefix p = MakeRecordPrefix(h, flags, &d, &d);
      SeedWriter w;
      w.Put<uint8_t>(2).Put(flags).Bytes(p.bytes.data(), p.size);
      uint64_t body[2] = {0x0000000100000000ull, 0};
      w.Bytes(body, sizeof(body));
      if (flags & kEmbeddedBulk) {
        uint8_t bulk[24] = {1, 2, 3};
        w.Bytes(bulk, sizeof(bulk));
      }
      s.emplace_back("record-" + std::to_string(flags), w.bytes());
    }
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  remora::fuzz::FuzzInput in(data, size);
  switch (in.Byte() % 3) {
    case 0: remora::fuzz::Bootstrap(in.Rest()); break;
    case 1: remora::fuzz::Connect(in.Rest()); break;
    default: {
      uint8_t flags = in.Byte();
      remora::fuzz::Record(flags, in.Rest());
    }
  }
  return 0;
}

// Fuzz target `shm_ring`: the worker's side of the shared-memory transport facing a hostile
// client, which owns the segment and may write anything anywhere in it at any time: ring
// records, cursors, staging slots and their flags, the reply ring's consumer cursor.
//
// Input: a program. One segment (the smallest valid geometry) is reset for each input; a
// first byte with bit 0 set lets the next 48 bytes overwrite the segment header before the
// worker attaches. Then ops until the input ends (op = byte % 12):
//   0 write bytes into the request ring    (u16 offset, u16 length, bytes)
//   1 publish a request-ring head           (u32, added to the last one; u8 bit 0: absolute)
//   2 append a well-formed record and publish it (u16 body bytes + body, u32 bulk bytes,
//     u8 inline bulk pattern) - so that the mutator starts from records that parse
//   3 fill a request staging slot           (u8 slot, u32 length field, u8 full flag, u16 n + bytes)
//   4 Poll                                   5 PollBulkChunk         6 release the oldest chunk
//   7 Post a reply (u16 body words, u32 bulk bytes)  8 Acquire+Commit a reply bulk chunk (u32)
//   9 Progress                               10 set the reply ring's tail (u32)
//   11 set a reply slot's full flag          (u8 slot, u8 value)
// Checks besides memory safety: every frame handed up passed ValidateFrameHeader and its body
// is the worker's private copy, outside the ring the client can still write; every bulk chunk lies inside the ring or one staging slot,
// in order, within the frame's bulk; the connection returns its staging memory.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include "fuzz_input.h"
#include "fuzz_staging.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "shm/shm_connection.h"

namespace remora::fuzz {
namespace {

shm::Geometry SmallGeometry() {
  shm::Geometry g;
  g.ring_bytes = 64 << 10;
  g.slot_bytes = 64 << 10;
  g.slots = 2;
  g.inline_bulk = 16 << 10;
  return g;
}

struct Client {
  shm::Segment seg;
  Client() {
    auto s = shm::Segment::Create(SmallGeometry());
    if (!s.ok()) Finding("cannot create a segment", s.status().ToString());
    seg = std::move(*s);
  }
  void Reset() {
    const shm::Geometry& g = seg.geometry();
    shm::Header h = seg.control()->header;
    std::memset(seg.base(), 0, g.total_bytes());
    new (seg.base()) shm::Control();
    seg.control()->header = h;
  }
};

bool Inside(const void* p, uint64_t n, const std::byte* base, uint64_t size) {
  auto* b = static_cast<const std::byte*>(p);
  return b >= base && n <= size && static_cast<uint64_t>(b - base) <= size - n;
}

bool Overlaps(const void* p, uint64_t n, const std::byte* base, uint64_t size) {
  auto* b = static_cast<const std::byte*>(p);
  return b < base + size && base < b + n;
}

void Run(FuzzInput& in, Client& client) {
  shm::Segment& seg = client.seg;
  const shm::Geometry g = seg.geometry();
  shm::Control* ctl = seg.control();
  std::byte* ring = seg.base() + g.request_ring();
  std::byte* slots = seg.base() + g.request_slots();
  if (in.Byte() & 1) {
    auto h = in.Bytes(sizeof(shm::Header));
    if (!h.empty()) std::memcpy(&ctl->header, h.data(), h.size());
  }
  auto attached = shm::Segment::Attach(Fd(::fcntl(seg.fd(), F_DUPFD_CLOEXEC, 0)));
  if (!attached.ok()) return;
  // The executor checked the geometry it keeps; the test uses the same one.
  const shm::Geometry eg = attached->geometry();
  std::byte* ering = attached->base() + eg.request_ring();
  std::byte* eslots = attached->base() + eg.request_slots();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  Fd client_sock(sv[0]);
  CountingStaging staging;
  {
    auto conn = MakeShmExecutor(Fd(sv[1]), std::move(*attached), "fuzz");
    conn->SetStaging(&staging);
    uint64_t head = 0;
    std::optional<InFrame> frame;
    uint64_t bulk_seen = 0;
    std::deque<BulkChunk> chunks;
    uint64_t out_total = 0, out_done = 0;
    bool failed = false;
    for (int ops = 0; !in.empty() && ops < 512 && !failed; ops++) {
      switch (in.Byte() % 12) {
        case 0: {
          uint16_t off = in.Take<uint16_t>();
          auto b = in.Bytes(in.Take<uint16_t>());
          size_t n = std::min<size_t>(b.size(), g.ring_bytes - off % g.ring_bytes);
          if (n) std::memcpy(ring + off % g.ring_bytes, b.data(), n);
          break;
        }
        case 1: {
          uint32_t v = in.Take<uint32_t>();
          head = (in.Byte() & 1) ? v : head + v;
          ctl->request_ring.head.store(head, std::memory_order_release);
          break;
        }
        case 2: {
          auto body = in.Bytes(in.Take<uint16_t>());
          uint32_t bulk = in.Take<uint32_t>() % (256 << 10);
          uint8_t pattern = in.Byte();
          FrameHeader h;
          h.kind = static_cast<uint16_t>(FrameKind::kRequest);
          h.body_words = static_cast<uint32_t>((body.size() + 7) / 8);
          h.bulk_bytes = bulk;
          uint64_t bytes = shm::RecordBytes(h, g.inline_bulk);
          if (bytes > g.ring_bytes / 2) break;
          uint64_t pos = head & (g.ring_bytes - 1);
          if (bytes > g.ring_bytes - pos) {
            std::memcpy(ring + pos, &shm::kWrapMarker, sizeof(shm::kWrapMarker));
            head += g.ring_bytes - pos;
            pos = 0;
          }
          std::memset(ring + pos, 0, bytes);
          std::memcpy(ring + pos, &h, sizeof(h));
          if (!body.empty()) std::memcpy(ring + pos + sizeof(h), body.data(), body.size());
          if (bulk <= g.inline_bulk) std::memset(ring + pos + sizeof(h) + h.body_words * 8, pattern, bulk);
          head += bytes;
          ctl->request_ring.head.store(head, std::memory_order_release);
          break;
        }
        case 3: {
          uint32_t i = in.Byte() % g.slots;
          uint32_t len = in.Take<uint32_t>();
          uint8_t full = in.Byte();
          auto b = in.Bytes(in.Take<uint16_t>());
          if (!b.empty()) std::memcpy(slots + uint64_t{i} * g.slot_bytes, b.data(), std::min<size_t>(b.size(), g.slot_bytes));
          ctl->request_slots[i].bytes.store(len, std::memory_order_relaxed);
          ctl->request_slots[i].full.store(full, std::memory_order_release);
          break;
        }
        case 4: {
          if (frame && (bulk_seen < frame->header.bulk_bytes || !chunks.empty())) break;  // contract
          auto f = conn->Poll();
          if (!f.ok()) {
            failed = true;
            break;
          }
          frame = *f;
          bulk_seen = 0;
          if (!frame) break;
          if (!ValidateFrameHeader(frame->header).ok()) Finding("a frame with an invalid header was handed up");
          // The worker decodes a private copy of each body (SECURITY.md F2): a body still in
          // the ring is memory the client can rewrite after it was checked.
          if (frame->body.size_bytes() > 0 && Overlaps(frame->body.data(), frame->body.size_bytes(), ering, eg.ring_bytes))
            Finding("a frame body handed up in place, in memory the client can still write");
          uint64_t x = 0;
          for (uint64_t w : frame->body) x ^= w;
          (void)x;
          break;
        }
        case 5: {
          auto c = conn->PollBulkChunk();
          if (!c.ok()) {
            failed = true;
            break;
          }
          if (!c->has_value()) break;
          const BulkChunk& k = **c;
          if (!frame || k.offset != bulk_seen || k.size == 0 || k.size > frame->header.bulk_bytes - bulk_seen)
            Finding("a bulk chunk out of order or past the frame's bulk");
          bool in_ring = Inside(k.data, k.size, ering, eg.ring_bytes);
          bool in_slot = false;
          for (uint32_t i = 0; i < eg.slots; i++)
            in_slot |= Inside(k.data, k.size, eslots + uint64_t{i} * eg.slot_bytes, eg.slot_bytes);
          if (!in_ring && !in_slot) Finding("a bulk chunk outside the ring and the staging slots");
          bulk_seen += k.size;
          chunks.push_back(k);
          break;
        }
        case 6:
          if (!chunks.empty()) {
            conn->ReleaseBulkChunk(chunks.front());
            chunks.pop_front();
          }
          break;
        case 7: {
          uint16_t words = static_cast<uint16_t>(in.Take<uint16_t>() % 512 + 1);
          uint32_t bulk = in.Take<uint32_t>() % (256 << 10);
          if (out_done < out_total) break;  // contract: the previous bulk first
          std::vector<uint64_t> body(words, 0x0000000100000000ull);
          OutFrame f;
          f.kind = FrameKind::kReply;
          f.body = body;
          if (!conn->Post(f, bulk).ok()) {
            failed = true;
            break;
          }
          out_total = bulk;
          out_done = 0;
          break;
        }
        case 8: {
          uint32_t max = in.Take<uint32_t>() % (128 << 10) + 1;
          if (out_done >= out_total) break;
          auto c = conn->AcquireBulkChunk(max);
          if (!c.ok()) {
            failed = true;
            break;
          }
          if (!c->has_value()) break;
          std::memset((*c)->data, 0x5a, (*c)->size);
          out_done += (*c)->size;
          if (!conn->CommitBulkChunk(**c, (*c)->size).ok()) failed = true;
          break;
        }
        case 9:
          if (!conn->Progress().ok()) failed = true;
          break;
        case 10:
          ctl->reply_ring.tail.store(in.Take<uint32_t>(), std::memory_order_release);
          break;
        case 11: {
          uint32_t i = in.Byte() % g.slots;
          ctl->reply_slots[i].full.store(in.Byte(), std::memory_order_release);
          break;
        }
      }
    }
    while (!chunks.empty()) {
      conn->ReleaseBulkChunk(chunks.front());
      chunks.pop_front();
    }
  }
  if (staging.live() != 0) Finding("the shm executor leaked staging buffers", std::to_string(staging.live()));
}

class SeedProgram {
 public:
  SeedProgram() { w_.Put<uint8_t>(0); }
  SeedProgram& Record(size_t body_bytes, uint32_t bulk) {
    w_.Put<uint8_t>(2).Put<uint16_t>(static_cast<uint16_t>(body_bytes));
    std::vector<uint8_t> body(body_bytes, 0);
    if (body_bytes >= 8) body[4] = 1;  // a segment table: one segment
    w_.Bytes(body.data(), body.size()).Put<uint32_t>(bulk).Put<uint8_t>(0x11);
    return *this;
  }
  SeedProgram& Slot(uint8_t i, uint32_t len, size_t n) {
    w_.Put<uint8_t>(3).Put(i).Put(len).Put<uint8_t>(1).Put<uint16_t>(static_cast<uint16_t>(n));
    std::vector<uint8_t> data(n, 0x22);
    w_.Bytes(data.data(), data.size());
    return *this;
  }
  SeedProgram& Op(uint8_t op) {
    w_.Put(op);
    return *this;
  }
  SeedProgram& Post(uint16_t words, uint32_t bulk) {
    w_.Put<uint8_t>(7).Put(words).Put(bulk);
    return *this;
  }
  SeedProgram& Commit(uint32_t max) {
    w_.Put<uint8_t>(8).Put(max);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return w_.bytes(); }

 private:
  SeedWriter w_;
};

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    s.emplace_back("one-record", SeedProgram().Record(16, 0).Op(4).Op(9).bytes());
    s.emplace_back("inline-bulk", SeedProgram().Record(16, 1000).Op(4).Op(5).Op(6).Op(4).bytes());
    s.emplace_back("slot-bulk",
                   SeedProgram().Record(16, 100000).Op(4).Slot(0, 65536, 64).Op(5).Slot(1, 34464, 64).Op(5).Op(6).Op(6).Op(4).bytes());
    s.emplace_back("wrap", [] {
      SeedProgram p;
      for (int i = 0; i < 12; i++) p.Record(4096, 1000).Op(4).Op(5).Op(6);
      return p.bytes();
    }());
    s.emplace_back("replies", SeedProgram().Post(4, 0).Post(4, 2000).Commit(4096).Post(4, 200000).Commit(65536).Commit(65536).Op(9).bytes());
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static remora::fuzz::Client* client = new remora::fuzz::Client();
  client->Reset();
  remora::fuzz::FuzzInput in(data, size);
  remora::fuzz::Run(in, *client);
  return 0;
}

// Fuzz target `reply`: the shim's end of a session facing a hostile or broken server - its
// Client (shim/src/link/client.cc) routing replies, notices and bulk to the calls waiting for
// them over the TCP transport, which lets the server lie in every header field.
//
// Input: u16 length + the bytes the server sends (all written into a socketpair, then
// end-of-stream), then the client's calls, one op byte each (% 6):
//   0 Call (u16: size of the reply bulk it expects)  1 Post        2 PostExpectingBulk (u16)
//   3 Pump                                            4 TakeAsyncError / sticky / broken
//   5 Flush
// Call's reply reader walks the whole reply (as the shim's entry points read theirs).
// Checks besides memory safety: once the server is gone every call fails with
// cudaErrorDevicesUnavailable and none hangs; the bulk a reply lands in never exceeds what
// the call asked for.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "client.h"
#include "fuzz_input.h"
#include "remora/protocol/message.h"
#include "tcp/tcp_connection.h"

namespace remora::fuzz {
namespace {

uint64_t Walk(wire::Reply::Reader& r) {
  uint64_t x = r.totalSize().wordCount + r.getError() + r.getAsyncError() + r.getDeviceGeneration();
  x += r.getMessage().size() + r.getAsyncMessage().size();
  switch (r.which()) {
    case wire::Reply::DEVICES:
      for (auto d : r.getDevices()) {
        x += d.getName().size() + d.getUuid().size() + d.getPciBusId().size() + d.getTotalMemory();
        for (int32_t a : d.getAttributes()) x += static_cast<uint32_t>(a);
      }
      break;
    case wire::Reply::FUNCTION:
      for (auto p : r.getFunction().getParams()) x += p.getOffset() + p.getSize();
      for (int32_t a : r.getFunction().getAttributes()) x += static_cast<uint32_t>(a);
      break;
    case wire::Reply::MODULE: x += r.getModule().getHandle(); break;
    case wire::Reply::GLOBAL: x += r.getGlobal().getPtr() + r.getGlobal().getSize(); break;
    case wire::Reply::ATTRIBUTES:
      for (int32_t a : r.getAttributes()) x += static_cast<uint32_t>(a);
      break;
    default: break;
  }
  return x;
}

void Run(FuzzInput& in) {
  auto server_bytes = in.Bytes(in.Take<uint16_t>());
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  int sz = 1 << 20;
  ::setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  ::setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  ::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  ::setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  size_t off = 0;
  while (off < server_bytes.size()) {
    ssize_t w = ::write(sv[1], server_bytes.data() + off, server_bytes.size() - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  ::shutdown(sv[1], SHUT_WR);
  Fd server(sv[1]);  // keeps reading possible for the client's writes until the end
  SessionInfo info;
  info.session_id = 1;
  shim::Client client(MakeTcpRequester(Fd(sv[0]), "fuzz"), info);
  std::vector<uint64_t> callbacks;
  client.SetCallbackSink([&](shim::Client::CallbackEvent, uint64_t id) { callbacks.push_back(id); });
  std::vector<std::unique_ptr<std::vector<std::byte>>> async_bulk;  // must outlive the client's use
  bool gone = false;
  for (int ops = 0; !in.empty() && ops < 64; ops++) {
    switch (in.Byte() % 6) {
      case 0: {
        std::vector<std::byte> bulk(in.Take<uint16_t>());
        uint64_t seen = 0;
        Status st = client.Call(
            0, [](wire::Request::Builder& r) { r.setPing(); },
            [&](wire::Reply::Reader& r) -> Status {
              seen = Walk(r);
              return Status::Ok();
            },
            {}, bulk);
        (void)seen;
        if (gone && st.code() != Err::kDevicesUnavailable)
          Finding("a call after the server left did not fail with cudaErrorDevicesUnavailable", st.ToString());
        break;
      }
      case 1:
        (void)client.Post(0, [](wire::Request::Builder& r) { r.initMemFree().setPtr(0); });
        break;
      case 2: {
        async_bulk.push_back(std::make_unique<std::vector<std::byte>>(in.Take<uint16_t>()));
        (void)client.PostExpectingBulk(0, [](wire::Request::Builder& r) { r.initMemcpyDtoH().setSize(1); },
                                       *async_bulk.back());
        break;
      }
      case 3: client.Pump(0); break;
      case 4:
        (void)client.TakeAsyncError();
        (void)client.sticky();
        break;
      case 5: (void)client.Flush(); break;
    }
    gone = !client.broken().ok();
    if (gone && client.broken().code() != Err::kDevicesUnavailable)
      Finding("a broken session reports something other than cudaErrorDevicesUnavailable", client.broken().ToString());
  }
}

std::vector<uint8_t> Frame(FrameKind kind, uint64_t tag, ScratchMessage& msg, size_t bulk) {
  auto body = msg.Flatten();
  FrameHeader h;
  h.kind = static_cast<uint16_t>(kind);
  h.tag = tag;
  h.body_words = static_cast<uint32_t>(body.size());
  h.bulk_bytes = bulk;
  std::vector<uint8_t> out(sizeof(h) + body.size_bytes() + bulk, 0x33);
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), body.data(), body.size_bytes());
  return out;
}

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    auto add = [&](const std::string& name, std::vector<std::vector<uint8_t>> frames, std::vector<uint8_t> ops) {
      std::vector<uint8_t> stream;
      for (auto& f : frames) stream.insert(stream.end(), f.begin(), f.end());
      SeedWriter w;
      w.Put<uint16_t>(static_cast<uint16_t>(stream.size())).Bytes(stream.data(), stream.size()).Bytes(ops.data(), ops.size());
      s.emplace_back(name, w.bytes());
    };
    ScratchMessage ok;
    ok.InitRoot<wire::Reply>().setPointer(0x200000000000ull);
    ScratchMessage devices;
    {
      auto r = devices.InitRoot<wire::Reply>();
      auto list = r.initDevices(2);
      for (unsigned i = 0; i < 2; i++) {
        list[i].setOrdinal(static_cast<int32_t>(i));
        list[i].setName("Remora host-emulated GPU");
        uint8_t uuid[16] = {1};
        list[i].setUuid(capnp::Data::Reader(uuid, 16));
        auto a = list[i].initAttributes(4);
        for (unsigned j = 0; j < 4; j++) a.set(j, static_cast<int32_t>(j));
      }
    }
    ScratchMessage failed;
    {
      auto r = failed.InitRoot<wire::Reply>();
      r.setError(2);
      r.setMessage("out of memory");
      r.setAsyncError(700);
      r.setAsyncMessage("illegal address");
    }
    ScratchMessage cb;
    cb.InitRoot<wire::Notice>().setHostCallback(7);
    ScratchMessage ending;
    ending.InitRoot<wire::Notice>().setSessionEnding("server shutting down");
    ScratchMessage changed;
    changed.InitRoot<wire::Notice>().setDevicesChanged(2);
    add("call-reply", {Frame(FrameKind::kReply, 1, ok, 0)}, {0, 0, 0});
    add("devices", {Frame(FrameKind::kReply, 1, devices, 0)}, {0, 0, 0});
    add("bulk-reply", {Frame(FrameKind::kReply, 1, ok, 16)}, {0, 16, 0});
    add("async-bulk", {Frame(FrameKind::kReply, 1, ok, 32), Frame(FrameKind::kReply, 2, failed, 0)},
        {2, 32, 0, 0, 0, 0, 4});
    add("notices", {Frame(FrameKind::kNotice, 0, cb, 0), Frame(FrameKind::kNotice, 0, changed, 0),
                    Frame(FrameKind::kReply, 1, ok, 0), Frame(FrameKind::kNotice, 0, ending, 0)},
        {3, 3, 0, 0, 0, 0, 0, 0, 1, 5});
    add("unknown-tag", {Frame(FrameKind::kReply, 99, ok, 8), Frame(FrameKind::kReply, 1, ok, 0)}, {0, 0, 0});
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  remora::fuzz::FuzzInput in(data, size);
  remora::fuzz::Run(in);
  return 0;
}

// Windows (Hello.window, docs/PROTOCOL.md): an application using GPUs of several servers
// gives each server its own window, and every handle and (host backend) device address that
// server's session mints lies in it - so objects of two servers never collide in the
// application, and one session's handle means nothing to the other. Real remora-server
// processes, real sockets and shared memory.
#include <set>

#include "raw_client.h"
#include "security_support.h"

namespace remora::security {
namespace {

constexpr uint64_t kWindowBits = 0xffull << 48;
// The host backend's first emulated GPU's address in window 0, and a window's span
// (server/worker/backend/host/host_emulation.h): the test states them rather than including the worker.
constexpr uint64_t kDeviceBase = 0x200000000000ull;
constexpr uint64_t kWindowSpan = 16ull << 40;

struct Minted {
  uint64_t pointer[2] = {};  // device 0, device 1
  uint64_t stream = 0, event = 0;
};

Minted Mint(RawSession& s) {
  Minted m;
  for (int dev = 0; dev < 2; dev++) {
    auto r = s.Call([](wire::Request::Builder& q) { q.initMemAlloc().setSize(1 << 20); }, {}, dev);
    EXPECT_TRUE(r.ok() && r->error == Err::kSuccess) << (r.ok() ? r->message : r.status().ToString());
    if (r.ok()) m.pointer[dev] = r->Decode([](wire::Reply::Reader rep) { return rep.getPointer(); });
  }
  Created st = CreateStream(s);
  EXPECT_EQ(st.error, Err::kSuccess) << st.message;
  m.stream = st.handle;
  Created ev = CreateEvent(s);
  EXPECT_EQ(ev.error, Err::kSuccess) << ev.message;
  m.event = ev.handle;
  return m;
}

TEST(Windows, TwoSessionsOfOneApplicationNeverShareAHandleOrAnAddress) {
  TenancyServer s;
  ASSERT_TRUE(s.Start(2));
  std::string token = s.CreateTenant("alice", {"--gpus", "0,1"});
  for (const char* transport : {"shm", "tcp"}) {
    SCOPED_TRACE(transport);
    ConnectOptions first_options, second_options;
    second_options.window = 9;
    auto first = RawSession::Open(s.server.Url(transport), token, first_options);
    auto second = RawSession::Open(s.server.Url(transport), token, second_options);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    Minted a = Mint(**first), b = Mint(**second);

    // Window 0 is what a single-server application always had.
    EXPECT_EQ(a.stream & kWindowBits, 0u);
    EXPECT_EQ(a.event & kWindowBits, 0u);
    EXPECT_EQ(b.stream & kWindowBits, 9ull << 48) << std::hex << b.stream;
    EXPECT_EQ(b.event & kWindowBits, 9ull << 48) << std::hex << b.event;
    for (int dev = 0; dev < 2; dev++) {
      EXPECT_GE(a.pointer[dev], kDeviceBase);
      EXPECT_LT(a.pointer[dev], kDeviceBase + kWindowSpan);
      EXPECT_GE(b.pointer[dev], kDeviceBase + 9 * kWindowSpan) << std::hex << b.pointer[dev];
      EXPECT_LT(b.pointer[dev], kDeviceBase + 10 * kWindowSpan) << std::hex << b.pointer[dev];
    }
    std::set<uint64_t> all = {a.pointer[0], a.pointer[1], a.stream, a.event,
                              b.pointer[0], b.pointer[1], b.stream, b.event};
    EXPECT_EQ(all.size(), 8u);

    // One session's handles and pointers are not the other's: refused, nothing touched.
    api::ArgWriter destroy;  // cuStreamDestroy_v2 of the first session's stream
    destroy.Put<uint64_t>(a.stream);
    destroy.Put<uint8_t>(0);
    auto wrong = ApiCall(**second, 49, destroy);
    ASSERT_TRUE(wrong.ok()) << wrong.status().ToString();
    EXPECT_NE(wrong->error, Err::kSuccess);
    auto wrong_free = (*second)->Call([&](wire::Request::Builder& q) { q.initMemFree().setPtr(a.pointer[0]); });
    ASSERT_TRUE(wrong_free.ok());
    EXPECT_NE(wrong_free->error, Err::kSuccess);
    auto own = ApiCall(**first, 49, destroy);
    ASSERT_TRUE(own.ok());
    EXPECT_EQ(own->error, Err::kSuccess) << own->message;
  }
}

}  // namespace
}  // namespace remora::security

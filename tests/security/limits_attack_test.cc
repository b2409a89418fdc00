// F5 and F8 (docs/SECURITY.md): a tenant tries to make its worker (or the server) hold more
// than its share - unread replies, backlogged data, streams and threads, sessions, memory
// outside its quota - and to overflow Memset3D. Real server (host backend), hand-built
// requests; each answer is a CUDA error or back-pressure, never an out-of-memory worker.
#include <sys/mman.h>
#include <sys/syscall.h>

#include "remora/protocol/api_args.h"
#include "security_support.h"

namespace remora::security {
namespace {

uint64_t RssKb(pid_t pid) {
  std::string v = ProcStatus(pid, "VmRSS:");
  return v.empty() ? 0 : std::stoull(v);
}

int Threads(pid_t pid) {
  std::string v = ProcStatus(pid, "Threads:");
  return v.empty() ? -1 : std::stoi(v);
}

class LimitsAttack : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}) {
    ASSERT_TRUE(s_.Start(1, "", std::move(extra)));
    alice_ = s_.CreateTenant("alice");
    tiny_ = s_.CreateTenant("tiny", {"--memory", "1MiB"});
  }
  std::unique_ptr<RawSession> Open(const std::string& token, const std::string& transport = "tcp") {
    auto r = RawSession::Open(s_.server.Url(transport), token);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  // The worker of the newest session.
  pid_t Worker() {
    auto pids = WorkerPids(s_);
    EXPECT_FALSE(pids.empty()) << s_.Ctl({"--json", "session", "list"}).output;
    return pids.empty() ? -1 : pids.back();
  }
  uint64_t Alloc(RawSession& s, uint64_t size) {
    auto r = s.Call([&](wire::Request::Builder& q) { q.initMemAlloc().setSize(size); });
    EXPECT_TRUE(r.ok() && r->error == Err::kSuccess) << (r.ok() ? r->message : r.status().ToString());
    return r.ok() ? r->Decode([](wire::Reply::Reader rep) { return rep.getPointer(); }) : 0;
  }

  TenancyServer s_;
  std::string alice_, tiny_;
};

// The review's "noread": 1,000,000 getDevices sent, no reply read, worker RSS 930 MB. The
// worker now stops reading once 8 MiB of replies wait: the client blocks in its own send.
TEST_F(LimitsAttack, UnreadRepliesStopTheReadingNotTheMemory) {
  Start();
  auto s = Open(alice_);
  ASSERT_TRUE(s);
  pid_t worker = Worker();
  ASSERT_GT(worker, 0);
  std::atomic<int> sent{0};
  std::thread flood([&] {
    for (int i = 0; i < 1000000; i++) {
      if (!s->Send([](wire::Request::Builder& q) { q.setGetDevices(); }).ok()) return;
      sent++;
    }
  });
  // Wait until the flood stalls (the worker stopped reading) or ends.
  int last = -1;
  for (int i = 0; i < 100 && sent.load() != last; i++) {
    last = sent.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  uint64_t rss = RssKb(worker);
  std::printf("unread replies: the client stalled after %d requests; worker RSS %llu kB\n", sent.load(),
              static_cast<unsigned long long>(rss));
  EXPECT_LT(sent.load(), 1000000) << "the worker read every request without the replies being read";
  EXPECT_LT(rss, 200u * 1024) << "worker RSS " << rss << " kB after " << sent.load() << " unread replies";
  ::kill(worker, SIGKILL);  // ends the session: the blocked send fails
  flood.join();
}

// The review's "backlog": a host function that never completes holds a stream, a copy waits
// behind it and holds the queue, and 40 frames of 6 MiB behind that went to memory (257 MB).
// Read-ahead is now bounded (--session-limit spill-bytes, 16 MiB here): the rest waits in
// the transport.
TEST_F(LimitsAttack, BackloggedDataIsBounded) {
  Start({"--session-limit", "spill-bytes=16MiB"});
  auto s = Open(alice_);
  ASSERT_TRUE(s);
  pid_t worker = Worker();
  uint64_t dev = Alloc(*s, 8 << 20);
  ASSERT_TRUE(s->Post([](wire::Request::Builder& q) {
    auto h = q.initHostFunc();
    h.initStream().setHandle(0);
    h.setId(1);
  }).ok());
  ASSERT_TRUE(s->Send([&](wire::Request::Builder& q) {
    auto c = q.initMemcpyDtoH();
    c.setSrc(dev);
    c.setSize(1 << 20);
    c.initStream().setHandle(0);
  }).ok());
  std::vector<std::byte> chunk(6 << 20, std::byte{0x5a});
  std::atomic<int> sent{0};
  std::thread flood([&] {
    for (int i = 0; i < 40; i++) {
      if (!s->Post([&](wire::Request::Builder& q) {
             auto c = q.initMemcpyHtoD();
             c.setDst(dev);
             c.setSize(chunk.size());
             c.initStream().setHandle(0);
             c.setAsync(true);
           }, chunk).ok())
        return;
      sent++;
    }
  });
  int last = -1;
  for (int i = 0; i < 50 && sent.load() != last; i++) {
    last = sent.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  uint64_t rss = RssKb(worker);
  std::printf("backlog: %d of 40 x 6 MiB sent behind a held queue; worker RSS %llu kB\n", sent.load(),
              static_cast<unsigned long long>(rss));
  EXPECT_LT(rss, 120u * 1024) << "worker RSS " << rss << " kB with " << sent.load() << " x 6 MiB behind a held queue";
  ::kill(worker, SIGKILL);
  flood.join();
}

// The review's "streams": 2,000 streams gave 2,001 threads. Threads are now a fixed pool,
// and streams (per-thread ones included) are limited (--session-limit streams, 100 here)
// with cudaErrorMemoryAllocation naming the limit.
TEST_F(LimitsAttack, StreamsAndThreadsAreBounded) {
  Start({"--session-limit", "streams=100"});
  auto s = Open(alice_);
  ASSERT_TRUE(s);
  pid_t worker = Worker();
  int created = 0;
  Err refusal = Err::kSuccess;
  std::string message;
  for (int i = 0; i < 300; i++) {
    Created r = CreateStream(*s);
    if (r.error != Err::kSuccess) {
      refusal = r.error;
      message = r.message;
      break;
    }
    uint64_t h = r.handle;
    created++;
    // Work queued behind a host function that never returns: on the old backend, a thread
    // per stream.
    ASSERT_TRUE(s->Post([&](wire::Request::Builder& q) {
      auto f = q.initHostFunc();
      f.initStream().setHandle(h);
      f.setId(1000 + static_cast<uint64_t>(i));
    }).ok());
  }
  EXPECT_EQ(created, 100);
  EXPECT_EQ(refusal, Err::kMemoryAllocation);
  EXPECT_NE(message.find("--session-limit streams="), std::string::npos) << message;
  // Per-thread default streams count too: a client naming new thread ids gets no more.
  // cuStreamQuery (generated: library 1, function 40) of stream 0, per-thread.
  api::ArgWriter args;
  args.Put<uint64_t>(0);
  args.Put<uint8_t>(1);
  auto r = s->Call([&](wire::Request::Builder& q) {
    q.setThread(424242);
    auto a = q.initApiCall();
    a.setLibrary(1);
    a.setFunction(40);
    a.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(args.bytes().data()), args.bytes().size()));
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->error, Err::kMemoryAllocation) << r->message;
  int threads = Threads(worker);
  std::printf("streams: %d created, then refused; worker threads %d\n", created, threads);
  EXPECT_LT(threads, 40) << "worker threads: " << threads;
}

// Sessions per tenant are capped (--max-sessions-per-tenant), so one tenant cannot use up
// the server's session slots; another tenant still gets in.
TEST_F(LimitsAttack, SessionsPerTenantAreCapped) {
  Start({"--max-sessions-per-tenant", "3"});
  std::vector<std::unique_ptr<RawSession>> held;
  for (int i = 0; i < 3; i++) held.push_back(Open(alice_, "shm"));
  auto fourth = RawSession::Open(s_.server.Url("shm"), alice_);
  ASSERT_FALSE(fourth.ok());
  EXPECT_NE(fourth.status().message().find("limit of 3 sessions"), std::string::npos) << fourth.status().message();
  EXPECT_TRUE(Open(tiny_, "shm")) << "another tenant is not affected";
}

// Memory outside the quota (the review's "global": tiny, 1 MiB quota, got a 1 GiB variable):
// variables the emulated driver backs, context limits and pinned host regions are charged
// or refused.
TEST_F(LimitsAttack, MemoryOutsideTheQuotaIsChargedOrRefused) {
  Start({"--session-limit", "pinned-bytes=64MiB"});
  auto tiny = Open(tiny_, "shm");
  ASSERT_TRUE(tiny);
  pid_t worker = Worker();
  std::vector<std::byte> image = FakeFatbin(4096, 9);
  ModuleAnswer m = LoadModule(*tiny, ModuleHash(image), &image, image.size());
  ASSERT_EQ(m.error, Err::kSuccess) << m.message;
  auto g = tiny->Call([&](wire::Request::Builder& q) {
    auto a = q.initGetGlobal();
    a.setModule(m.handle);
    a.setName("big");
    a.setSize(1ull << 30);
  });
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->error, Err::kMemoryAllocation) << g->message;
  EXPECT_LT(RssKb(worker), 100u * 1024);
  // cudaDeviceSetLimit(cudaLimitMallocHeapSize, 1 GiB) is memory too.
  // The generated call cuCtxSetLimit (library 1, function 8): (CUlimit, size_t), the enum
  // 4 bytes. CU_LIMIT_PRINTF_FIFO_SIZE 1, MALLOC_HEAP_SIZE 2, DEV_RUNTIME_SYNC_DEPTH 3.
  enum : int32_t { CU_LIMIT_PRINTF_FIFO_SIZE = 1, CU_LIMIT_MALLOC_HEAP_SIZE = 2, CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH = 3 };
  auto set_limit = [&](int32_t limit, uint64_t value) {
    api::ArgWriter args;
    args.Put(limit);
    args.Put(static_cast<uint64_t>(value));
    return tiny->Call([&](wire::Request::Builder& q) {
      auto a = q.initApiCall();
      a.setLibrary(1);
      a.setFunction(8);
      const auto& b = args.bytes();
      a.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(b.data()), b.size()));
    });
  };
  auto heap = set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, 1ull << 30);
  ASSERT_TRUE(heap.ok());
  EXPECT_EQ(heap->error, Err::kMemoryAllocation) << heap->message;
  // Within the quota it is granted and charged, a new value replacing the old one's charge:
  // 512 KiB then 768 KiB fit a 1 MiB quota only if the second replaces the first.
  for (uint64_t kib : {512, 768}) {
    auto ok = set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, kib << 10);
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->error, Err::kSuccess) << kib << " KiB: " << ok->message;
  }
  auto over = set_limit(CU_LIMIT_PRINTF_FIFO_SIZE, 512u << 10);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->error, Err::kMemoryAllocation) << "768 KiB heap + 512 KiB FIFO > 1 MiB";
  auto depth = set_limit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 1u << 20);
  ASSERT_TRUE(depth.ok());
  EXPECT_EQ(depth->error, Err::kInvalidValue) << depth->message;
  // A pinned host region beyond the session's limit (a sparse 1 GiB memfd).
  int fd = static_cast<int>(::syscall(SYS_memfd_create, "region", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1ll << 30), 0);
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  ASSERT_TRUE(tiny->connection().PassFd(fd).ok());
  auto reg = tiny->Call([](wire::Request::Builder& q) {
    auto r = q.initRegisterHostRegion();
    r.setId(1);
    r.setSize(1ull << 30);
  });
  ::close(fd);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->error, Err::kMemoryAllocation) << reg->message;
  EXPECT_NE(reg->message.find("pinned-bytes"), std::string::npos) << reg->message;
  RunResult usage = s_.Ctl({"--json", "tenant", "list"});
  EXPECT_NE(usage.output.find("\"name\":\"tiny\""), std::string::npos);
}

// F8: the review's Memset3D shapes - an extent that wraps to 16 bytes, one that loops 2^40
// times, one that made the worker reserve 2^58 rows - are refused at once; a real 3D memset
// still sets exactly its bytes.
TEST_F(LimitsAttack, Memset3DShapesThatOverflowAreRefused) {
  Start();
  auto s = Open(alice_);
  ASSERT_TRUE(s);
  uint64_t a = Alloc(*s, 4096);
  uint64_t b = Alloc(*s, 1 << 20);
  struct Shape {
    uint64_t pitch, rows_per_slice, width, height, depth;
  };
  const Shape hostile[] = {
      {12288, ((1ull << 52) - 1) / 3, 4112, 1, 2},  // (d-1)*rps*pitch wraps: extent 16
      {1ull << 32, 1ull << 32, 1, 1, 1ull << 40},   // 2^40 slices
      {1, (1ull << 60) + 4, 1, (1ull << 58) + 2, 2},  // 2^58 rows
  };
  for (const Shape& sh : hostile) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = s->Call([&](wire::Request::Builder& q) {
      auto m = q.initMemset3D();
      m.setDst(a);
      m.setPitch(sh.pitch);
      m.setRowsPerSlice(sh.rows_per_slice);
      m.setValue(0xee);
      m.setWidth(sh.width);
      m.setHeight(sh.height);
      m.setDepth(sh.depth);
      m.initStream().setHandle(0);
    });
    ASSERT_TRUE(r.ok()) << r.status().ToString() << " (the worker died?)";
    EXPECT_NE(r->error, Err::kSuccess) << "pitch " << sh.pitch << " depth " << sh.depth;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  }
  // b's neighbour a is untouched, and a genuine 3D memset of b sets exactly its box.
  auto set = s->Call([&](wire::Request::Builder& q) {
    auto m = q.initMemset3D();
    m.setDst(b);
    m.setPitch(256);
    m.setRowsPerSlice(8);
    m.setValue(0x11);
    m.setWidth(100);
    m.setHeight(4);
    m.setDepth(3);
    m.initStream().setHandle(0);
  });
  ASSERT_TRUE(set.ok());
  ASSERT_EQ(set->error, Err::kSuccess) << set->message;
  auto back = s->Call([&](wire::Request::Builder& q) {
    auto c = q.initMemcpyDtoH();
    c.setSrc(b);
    c.setSize(3 * 8 * 256);
    c.initStream().setHandle(0);
  });
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->bulk.size(), 3u * 8 * 256);
  for (size_t z = 0; z < 3; z++)
    for (size_t y = 0; y < 8; y++)
      for (size_t x = 0; x < 256; x++) {
        bool inside = y < 4 && x < 100;
        uint8_t v = static_cast<uint8_t>(back->bulk[(z * 8 + y) * 256 + x]);
        if (inside) ASSERT_EQ(v, 0x11) << z << "," << y << "," << x;
        else ASSERT_NE(v, 0x11) << z << "," << y << "," << x;
      }
}

}  // namespace
}  // namespace remora::security

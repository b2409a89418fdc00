// GPUs of several servers in one application (docs/ARCHITECTURE.md, "GPUs of several
// servers"): REMORA_SERVER names two real remora-server processes (host backend), the
// application sees one device list, copies between the servers' devices work, and losing one
// server fails only its devices. Over shm and tcp.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

class MultiServer : public ::testing::TestWithParam<std::string> {};

uint64_t PointerOf(const std::string& answer) {  // "ok ID 0xPTR"
  size_t x = answer.find("0x");
  return x == std::string::npos ? 0 : std::strtoull(answer.c_str() + x, nullptr, 16);
}
std::string IdOf(const std::string& answer) {  // "ok ID 0xPTR"
  size_t a = answer.find(' '), b = answer.find(' ', a + 1);
  return a == std::string::npos ? "" : answer.substr(a + 1, b - a - 1);
}

TEST_P(MultiServer, OneDeviceListCopiesBetweenServersAndLosingOneFailsOnlyItsDevices) {
  const std::string transport = GetParam();
  TenancyServer a, b;
  ASSERT_TRUE(a.Start(2, "", {"--deadline", "2"}));
  ASSERT_TRUE(b.Start(1, "", {"--deadline", "2"}));
  std::string token_a = a.CreateTenant("alice", {"--gpus", "0,1"});
  std::string token_b = b.CreateTenant("alice");
  auto env = ShimEnv(a.server.Url(transport) + "," + b.server.Url(transport));
  env["REMORA_TOKEN"] = token_a + "," + token_b;  // one token per server, in order
  env["REMORA_DEADLINE_S"] = "2";
  MemShell sh(a.server.dir(), env);
  ASSERT_TRUE(sh.ok());

  // One list: server a's two devices, then server b's.
  EXPECT_EQ(sh.Do("count"), "count 3");
  std::string on0 = sh.Do("alloc 0 4"), on1 = sh.Do("alloc 1 4"), on2 = sh.Do("alloc 2 4");
  ASSERT_EQ(on0.rfind("ok ", 0), 0u) << on0;
  ASSERT_EQ(on1.rfind("ok ", 0), 0u) << on1;
  ASSERT_EQ(on2.rfind("ok ", 0), 0u) << on2;
  std::string d0 = IdOf(on0), d1 = IdOf(on1), d2 = IdOf(on2);
  // Server b's memory lies in the second window (the host backend's, 16 TiB further).
  EXPECT_LT(PointerOf(on0), 0x200000000000ull + (16ull << 40)) << on0;
  EXPECT_GE(PointerOf(on2), 0x200000000000ull + (16ull << 40)) << on2;
  for (const std::string& id : {d0, d1, d2}) EXPECT_EQ(sh.Do("check " + id), "ok") << "allocation " << id;

  // Copies, data checked: between the servers (staged through the application), and within
  // one (the server's own peer copy).
  EXPECT_EQ(sh.Do("copy peer " + d2 + " " + d0), "ok");
  EXPECT_EQ(sh.Do("copy default " + d0 + " " + d2), "ok");
  EXPECT_EQ(sh.Do("copy async " + d2 + " " + d1), "ok");
  EXPECT_EQ(sh.Do("copy async " + d1 + " " + d2), "ok");
  EXPECT_EQ(sh.Do("copy peer " + d1 + " " + d0), "ok");
  EXPECT_EQ(sh.Do("peer 0 2"), "peer 0") << "devices of two servers are never peers";
  // Each server charged the tenant for its own devices' memory only.
  auto used = [](TenancyServer& s) { return s.MemoryUsed("alice"); };
  EXPECT_EQ(used(a), 8ull << 20);
  EXPECT_EQ(used(b), 4ull << 20);

  // A host function on the second server's stream is run and answered there (its stream
  // would never get past it otherwise), beside one on the first server's
  // (the kernel's module loads there).
  std::string s2 = sh.Do("stream 2"), s0 = sh.Do("stream 0");
  ASSERT_EQ(s2.rfind("ok ", 0), 0u) << s2;
  ASSERT_EQ(s0.rfind("ok ", 0), 0u) << s0;
  s2 = s2.substr(3);
  s0 = s0.substr(3);
  EXPECT_EQ(sh.Do("hostfn " + s2), "ok");
  EXPECT_EQ(sh.Do("hostfn " + s0), "ok");
  EXPECT_EQ(sh.Do("launch " + s2), "ok");
  EXPECT_EQ(sh.Do("sync " + s2, 10), "ok");
  EXPECT_EQ(sh.Do("sync " + s0, 10), "ok");
  // A stream waiting for another server's event (the shim waits for it), and within one.
  EXPECT_EQ(sh.Do("xwait " + s0 + " " + s2 + " 2", 10), "ok");
  EXPECT_EQ(sh.Do("xwait " + s2 + " " + s0 + " 0", 10), "ok");
  std::string s1 = sh.Do("stream 1");
  ASSERT_EQ(s1.rfind("ok ", 0), 0u) << s1;
  EXPECT_EQ(sh.Do("xwait " + s0 + " " + s1.substr(3) + " 1", 10), "ok");
  EXPECT_EQ(sh.Do("peer 2 1"), "peer 0");

  // Server b dies with a host function queued on its stream (its worker stopped first, so it
  // is never reached): its device fails (devices unavailable), server a's carry on, and
  // nothing waits for the lost host function (a copy from pageable memory waits for the
  // host functions queued before it).
  std::vector<pid_t> workers = ChildrenNamed(b.server.pid(), "remora-worker");
  ASSERT_EQ(workers.size(), 1u);
  ::kill(workers[0], SIGSTOP);
  EXPECT_EQ(sh.Do("hostfn " + s2), "ok");
  ::kill(b.server.pid(), SIGKILL);
  ::kill(workers[0], SIGKILL);
  std::string lost;
  ASSERT_TRUE(Eventually([&] {
    lost = sh.Do("check " + d2);
    return lost != "ok";
  }, 15000)) << lost;
  EXPECT_EQ(lost, "err cudaErrorDevicesUnavailable");
  EXPECT_EQ(sh.Do("info 2"), "err cudaErrorDevicesUnavailable");
  EXPECT_EQ(sh.Do("copy peer " + d2 + " " + d0), "err cudaErrorDevicesUnavailable");
  EXPECT_EQ(sh.Do("check " + d0, 10), "ok");
  EXPECT_EQ(sh.Do("check " + d1), "ok");
  EXPECT_EQ(sh.Do("hostfn " + s2), "err cudaErrorDevicesUnavailable");
  EXPECT_EQ(sh.Do("hostfn " + s0), "ok");
  EXPECT_EQ(sh.Do("sync " + s0, 10), "ok");
  EXPECT_EQ(sh.Do("copy peer " + d1 + " " + d0), "ok");
  std::string more = sh.Do("alloc 1 2");
  EXPECT_EQ(more.rfind("ok ", 0), 0u) << more;
  EXPECT_EQ(sh.Do("count"), "count 3") << "a lost server's devices keep their ordinals";
  EXPECT_EQ(sh.Do("quit"), "bye");
  EXPECT_EQ(sh.process().Wait(30), 0) << sh.process().Output();
  EXPECT_TRUE(Eventually([&] { return used(a) == 0; })) << "server a got its memory back";
  b.server.Stop();
}

INSTANTIATE_TEST_SUITE_P(Transports, MultiServer, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace remora::testing

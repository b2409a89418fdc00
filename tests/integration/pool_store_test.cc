// server/pool/ against a real etcd (Debian's etcd-server, one member on loopback): the JSON
// gateway client (ranges, transactions with compares over a range, leases, watches, a dead
// endpoint skipped), and PoolAgents of three "servers" borrowing one tenant's pool-wide limit
// at once (their hosts are test doubles behind PoolHost: the local limits they are told to
// set are checked against the store after every change). Skipped without etcd.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "pool/etcd_client.h"
#include "pool/pool_admin.h"
#include "pool/pool_agent.h"
#include "process_harness.h"

namespace remora::pool {
namespace {

int FreePort() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// Polls `done` every 20 ms for up to `seconds`; whether it came true. (The agents act on their
// refresh, 500 ms here; the bounds are for a machine busy with builds beside the test: CI runs
// 23 and 32 saw 6 s and 4 s not be enough.)
template <typename Pred>
bool WaitUntil(Pred done, int seconds = 20) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// One etcd member in a temporary directory, for the whole test program.
class Etcd {
 public:
  bool Start() {
    if (std::system("command -v etcd >/dev/null 2>&1") != 0) return false;
    client = "http://127.0.0.1:" + std::to_string(FreePort());
    std::string peer = "http://127.0.0.1:" + std::to_string(FreePort());
    std::string log = dir_.path() + "/etcd.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execlp("etcd", "etcd", "--name", "t", "--data-dir", (dir_.path() + "/data").c_str(), "--listen-client-urls",
               client.c_str(), "--advertise-client-urls", client.c_str(), "--listen-peer-urls", peer.c_str(),
               "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster", ("t=" + peer).c_str(),
               "--heartbeat-interval", "50", "--election-timeout", "500", nullptr);
      ::_exit(127);
    }
    auto http = NewCurlHttpClient({});
    if (!http.ok()) return false;
    auto c = EtcdClient::Create({{client}, 1000}, std::move(*http));
    for (int i = 0; i < 200; i++) {
      if ((*c)->Range("x", "").ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  ~Etcd() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::string client;

 private:
  testing::TempDir dir_;
  pid_t pid_ = -1;
};

Etcd* g_etcd = nullptr;

std::unique_ptr<EtcdClient> Client(std::vector<std::string> endpoints = {}) {
  if (endpoints.empty()) endpoints = {g_etcd->client};
  auto http = NewCurlHttpClient({});
  EXPECT_TRUE(http.ok());
  auto c = EtcdClient::Create({endpoints, 1000}, std::move(*http));
  EXPECT_TRUE(c.ok());
  return std::move(*c);
}

class PoolStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (g_etcd == nullptr) GTEST_SKIP() << "etcd is not installed (Debian's etcd-server)";
    prefix_ = "/t" + std::to_string(counter_++) + "/";
  }
  std::string prefix_;
  static inline int counter_ = 0;
};

TEST_F(PoolStoreTest, RangeTxnLeaseAndWatch) {
  auto c = Client();
  std::string a = prefix_ + "a", b = prefix_ + "b";
  // A put only if absent, a second time refused; the failure branch reads.
  auto put = [&](const std::string& key, const std::string& value) {
    return c->Txn({Compare{Compare::Target::kVersion, Compare::Op::kEqual, key, "", 0, ""}},
                  {TxnOp{TxnOp::Kind::kPut, key, "", value, 0}}, {TxnOp{TxnOp::Kind::kRange, key, "", "", 0}});
  };
  auto t1 = put(a, std::string("one\0two", 7));
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  EXPECT_TRUE(t1->succeeded);
  auto t2 = put(a, "again");
  ASSERT_TRUE(t2.ok());
  EXPECT_FALSE(t2->succeeded);
  ASSERT_EQ(t2->ranges.size(), 1u);
  EXPECT_EQ(t2->ranges[0].kvs[0].value, std::string("one\0two", 7)) << "bytes survive base64";
  // A compare over a range: nothing under the prefix changed since a revision.
  auto r = c->Range(prefix_, PrefixEnd(prefix_));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->kvs.size(), 1u);
  Compare unchanged{Compare::Target::kMod, Compare::Op::kLess, prefix_, PrefixEnd(prefix_), r->revision + 1, ""};
  auto t3 = c->Txn({unchanged}, {TxnOp{TxnOp::Kind::kPut, b, "", "2", 0}}, {});
  ASSERT_TRUE(t3.ok());
  EXPECT_TRUE(t3->succeeded);
  auto t4 = c->Txn({unchanged}, {TxnOp{TxnOp::Kind::kPut, b, "", "3", 0}}, {});
  ASSERT_TRUE(t4.ok());
  EXPECT_FALSE(t4->succeeded) << "b changed after that revision";
  // Leases: keys go with them.
  auto lease = c->GrantLease(2);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  auto leased = c->Txn({}, {TxnOp{TxnOp::Kind::kPut, prefix_ + "leased", "", "x", lease->id}}, {});
  ASSERT_TRUE(leased.ok());
  auto ttl = c->KeepAlive(lease->id);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_GT(*ttl, 0);
  // A watch sees the revoke's delete, then a put.
  std::atomic<bool> stop{false};
  std::vector<WatchEvent> seen;
  std::thread w([&] {
    Status st = c->Watch(prefix_, PrefixEnd(prefix_), leased->revision + 1, 5000,
                         [&](int64_t, const std::vector<WatchEvent>& ev) {
                           seen.insert(seen.end(), ev.begin(), ev.end());
                           return seen.size() < 2;
                         },
                         &stop);
    EXPECT_TRUE(st.ok()) << st.ToString();
  });
  ASSERT_TRUE(c->RevokeLease(lease->id).ok());
  EXPECT_EQ(c->KeepAlive(lease->id).status().code(), Err::kInvalidValue) << "a revoked lease is gone";
  ASSERT_TRUE(c->Txn({}, {TxnOp{TxnOp::Kind::kPut, prefix_ + "later", "", "y", 0}}, {}).ok());
  w.join();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(seen[0].kv.key, prefix_ + "leased");
  EXPECT_EQ(seen[1].type, WatchEvent::Type::kPut);
  EXPECT_EQ(seen[1].kv.value, "y");
  // Errors: a put under a lease that does not exist.
  auto bad = c->Txn({}, {TxnOp{TxnOp::Kind::kPut, prefix_ + "z", "", "z", 12345}}, {});
  EXPECT_EQ(bad.status().code(), Err::kInvalidValue) << bad.status().ToString();
}

TEST_F(PoolStoreTest, ADeadEndpointIsSkipped) {
  auto c = Client({"http://127.0.0.1:" + std::to_string(FreePort()), g_etcd->client});
  auto r = c->Range(prefix_, "");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  auto none = Client({"http://127.0.0.1:" + std::to_string(FreePort())});
  EXPECT_EQ(none->Range(prefix_, "").status().code(), Err::kDevicesUnavailable);
  auto http = NewCurlHttpClient({});
  ASSERT_TRUE(http.ok());
  EXPECT_FALSE(EtcdClient::Create({{"ftp://x"}, 1000}, std::move(*http)).ok());
}

// A server's side as the agent sees it: local limits (the ledger's total limits), checked
// against the store every time one is raised.
class FakeHost final : public PoolHost {
 public:
  FakeHost(KvStore& store, PoolKeys keys, std::string name) : store_(store), keys_(std::move(keys)), name_(name) {}
  ServerRecord LocalRecord() override { return ServerRecord{}; }
  void Apply(const PoolView&, bool) override { applied++; }
  void LeaseGranted(int64_t lease) override {
    std::lock_guard<std::mutex> l(mu);
    lease_ = lease;
  }
  void Fence(const std::string&) override {
    std::lock_guard<std::mutex> l(mu);
    lease_ = 0;
    local.clear();
    fenced++;
  }
  void RaiseShare(int64_t lease, const std::string& tenant, uint64_t bytes) override {
    std::lock_guard<std::mutex> l(mu);
    if (lease != lease_) return;
    // The store already holds at least this much for us.
    auto r = store_.Range(keys_.Share(tenant, name_), "");
    if (!r.ok() || r->kvs.empty() || std::strtoull(r->kvs[0].value.c_str(), nullptr, 10) < bytes) violations++;
    local[tenant] = bytes;
  }
  uint64_t LowerShare(const std::string& tenant, uint64_t bytes) override {
    std::lock_guard<std::mutex> l(mu);
    local[tenant] = bytes;
    return used[tenant];
  }
  std::map<std::string, Claim> Claims() override {
    std::lock_guard<std::mutex> l(mu);
    std::map<std::string, Claim> out;
    for (auto& [t, u] : used) out[t] = Claim{u, 1};
    return out;
  }
  // An allocation of `bytes`: within the local limit, or after borrowing.
  bool Allocate(PoolAgent& agent, const std::string& tenant, uint64_t bytes) {
    for (int attempt = 0; attempt < 2; attempt++) {
      uint64_t need = 0;
      {
        std::lock_guard<std::mutex> l(mu);
        if (used[tenant] + bytes <= local[tenant]) {
          used[tenant] += bytes;
          return true;
        }
        if (attempt == 1) return false;
        need = used[tenant] + bytes - local[tenant];
      }
      std::promise<Status> done;
      agent.Borrow(tenant, need, [&](Status st) { done.set_value(st); });
      if (!done.get_future().get().ok()) return false;
    }
    return false;
  }
  std::mutex mu;
  std::map<std::string, uint64_t> local, used;
  int violations = 0;
  std::atomic<int> fenced{0};  // written by the agent's lease thread, read by the test
  std::atomic<int> applied{0};

 private:
  KvStore& store_;
  PoolKeys keys_;
  std::string name_;
  int64_t lease_ = 0;
};

TEST_F(PoolStoreTest, AgentsNeverHoldMoreThanTheLimitTogether) {
  auto store = Client();
  PoolKeys keys(prefix_);
  PoolAdmin admin(*store, keys);
  PoolTenant t;
  t.name = "alice";
  t.pool_limit = 64ull << 20;
  ASSERT_TRUE(admin.CreateTenant(t).ok());
  std::vector<std::unique_ptr<FakeHost>> hosts;
  std::vector<std::unique_ptr<PoolAgent>> agents;
  for (int i = 0; i < 3; i++) {
    std::string name = "s" + std::to_string(i);
    hosts.push_back(std::make_unique<FakeHost>(*store, keys, name));
    AgentOptions o;
    o.prefix = prefix_;
    o.server_name = name;
    // (A lease long enough that a busy machine's late refresh never loses it; the lost lease
    // below is revoked, not expired.)
    o.ttl_s = 15;
    o.refresh_ms = 500;
    agents.push_back(std::make_unique<PoolAgent>(*store, *hosts.back(), o));
    agents.back()->Start();
  }
  for (auto& a : agents) EXPECT_TRUE(WaitUntil([&] { return a->lease() != 0; })) << "an agent registered";
  // Three servers allocate 1 MiB at a time at once until refused.
  std::vector<std::thread> threads;
  std::vector<uint64_t> got(3, 0);
  for (int i = 0; i < 3; i++)
    threads.emplace_back([&, i] {
      while (hosts[i]->Allocate(*agents[i], "alice", 1ull << 20)) got[i] += 1ull << 20;
    });
  for (auto& th : threads) th.join();
  uint64_t total = got[0] + got[1] + got[2], chunk = PoolAgent::Chunk(64ull << 20);
  EXPECT_LE(total, 64ull << 20);
  // A server stops at its first refusal, while the others may hold a chunk of headroom each.
  EXPECT_GE(total, (64ull << 20) - 3 * (chunk + (1ull << 20)));
  auto view = admin.View();
  ASSERT_TRUE(view.ok());
  EXPECT_LE(view->SharesOf("alice"), 64ull << 20);
  for (auto& h : hosts) EXPECT_EQ(h->violations, 0) << "a local limit above the store's share";
  // Freed on one server: its trim returns the share (it keeps one chunk while active); the
  // others can take it.
  {
    std::lock_guard<std::mutex> l(hosts[0]->mu);
    hosts[0]->used["alice"] = 0;
  }
  uint64_t more = 0;
  // (s0's trim runs every refresh.)
  WaitUntil([&] {
    if (hosts[1]->Allocate(*agents[1], "alice", 1ull << 20)) more += 1ull << 20;
    return more + chunk >= got[0];
  });
  EXPECT_GE(more + chunk, got[0]) << "what s0 freed went back to the pool";
  // A lost lease: the agent fences its host and registers again.
  ASSERT_TRUE(store->RevokeLease(agents[2]->lease()).ok());
  EXPECT_TRUE(WaitUntil([&] { return hosts[2]->fenced != 0; })) << "fenced after the lease was revoked";
  EXPECT_EQ(hosts[2]->fenced, 1);
  EXPECT_TRUE(WaitUntil([&] { return agents[2]->lease() != 0; }));
  EXPECT_NE(agents[2]->lease(), 0) << "registered again";
  view = admin.View();
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->shares["alice"].count("s2"), 0u) << "the revoked lease took s2's share";
  EXPECT_EQ(view->servers.size(), 3u);
  for (auto& a : agents) a->Stop(true);
  view = admin.View();
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(view->servers.empty()) << "a clean stop leaves the pool at once";
  EXPECT_EQ(view->SharesOf("alice"), 0u);
}

}  // namespace
}  // namespace remora::pool

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  remora::pool::Etcd etcd;
  if (etcd.Start()) remora::pool::g_etcd = &etcd;
  return RUN_ALL_TESTS();
}

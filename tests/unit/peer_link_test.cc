// PeerLinks (server/supervisor/peer_link.h): two servers' links on one cluster key carry sealed
// messages both ways; a server without the key is refused; only listed peers are dialled; a
// link whose peer goes away is reported down.
#include "supervisor/peer_link.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>

namespace remora::server {
namespace {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string KeyFile(const std::string& name, const std::string& key) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << key << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

// What one side's handlers saw, posted as the supervisor's loop would run them.
struct Side {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> calls;
  std::vector<std::string> messages;
  std::vector<std::string> downs;
  uint64_t from = 0;
  PeerLinks::Poster Poster() {
    return [this](std::function<void()> fn) {
      std::lock_guard<std::mutex> lock(mu);
      calls.push_back(std::move(fn));
      cv.notify_all();
    };
  }
  PeerLinks::Handlers Handlers() {
    PeerLinks::Handlers h;
    h.message = [this](uint64_t, uint64_t server, std::vector<uint8_t> m) {
      messages.emplace_back(m.begin(), m.end());
      from = server;
    };
    h.down = [this](uint64_t, uint64_t, const std::string& why) { downs.push_back(why); };
    return h;
  }
  // Runs posted calls until `done` holds or 10 s pass.
  template <typename Fn>
  bool Until(Fn done) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu);
        if (!cv.wait_until(lock, end, [&] { return !calls.empty(); })) return done();
        fn = std::move(calls.front());
        calls.pop_front();
      }
      fn();
    }
    return true;
  }
};

TEST(PeerLinks, TwoServersOnOneKeyExchangeMessagesBothWays) {
  std::string key = KeyFile("cluster.key", "a-cluster-key-of-more-than-thirty-two-bytes-0123456789");
  int pa = FreePort();
  Side a, b;
  PeerOptions oa;
  oa.listen = "tcp://127.0.0.1:" + std::to_string(pa);
  oa.key_file = key;
  auto la = PeerLinks::Start(oa, 0xa, a.Poster(), a.Handlers());
  ASSERT_TRUE(la.ok()) << la.status().ToString();
  PeerOptions ob;
  ob.allowed = {"127.0.0.1:" + std::to_string(pa)};
  ob.key_file = key;
  auto lb = PeerLinks::Start(ob, 0xb, b.Poster(), b.Handlers());
  ASSERT_TRUE(lb.ok()) << lb.status().ToString();
  // Dialling an address the operator did not list is refused.
  EXPECT_FALSE((*lb)->Dial("127.0.0.1:1").ok());
  auto link = (*lb)->Dial("127.0.0.1:" + std::to_string(pa));
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  (*lb)->Send(*link, std::vector<uint8_t>{'h', 'i'});
  ASSERT_TRUE(a.Until([&] { return !a.messages.empty(); }));
  EXPECT_EQ(a.messages[0], "hi");
  EXPECT_EQ(a.from, 0xbu);
  // The same link back (the origin answers on the link a question came on).
  (*la)->Send(1, std::vector<uint8_t>{'y', 'o'});
  ASSERT_TRUE(b.Until([&] { return !b.messages.empty(); }));
  EXPECT_EQ(b.messages[0], "yo");
  EXPECT_EQ(b.from, 0xau);
  // Server a goes away: b's link is reported down.
  la->reset();
  EXPECT_TRUE(b.Until([&] { return !b.downs.empty(); }));
}

TEST(PeerLinks, AServerWithoutTheKeyIsRefused) {
  int pa = FreePort();
  Side a, b;
  PeerOptions oa;
  oa.listen = "tcp://127.0.0.1:" + std::to_string(pa);
  oa.key_file = KeyFile("right.key", "the-right-cluster-key-0123456789abcdefghijklmnop");
  auto la = PeerLinks::Start(oa, 0xa, a.Poster(), a.Handlers());
  ASSERT_TRUE(la.ok());
  PeerOptions ob;
  ob.allowed = {"127.0.0.1:" + std::to_string(pa)};
  ob.key_file = KeyFile("wrong.key", "a-wrong-cluster-key-0123456789abcdefghijklmnopqr");
  auto lb = PeerLinks::Start(ob, 0xb, b.Poster(), b.Handlers());
  ASSERT_TRUE(lb.ok());
  auto link = (*lb)->Dial("127.0.0.1:" + std::to_string(pa));
  ASSERT_TRUE(link.ok());
  (*lb)->Send(*link, std::vector<uint8_t>{'x'});
  ASSERT_TRUE(b.Until([&] { return !b.downs.empty(); }));
  EXPECT_NE(b.downs[0].find("cluster key"), std::string::npos) << b.downs[0];
  EXPECT_TRUE(a.Until([&] { return !a.downs.empty(); }));
  EXPECT_TRUE(a.messages.empty()) << "a message crossed without the key";
}

TEST(PeerLinks, AKeyFileOthersCanReadOrTooShortIsRefused) {
  std::string open = ::testing::TempDir() + "/open.key";
  std::ofstream(open) << "a-cluster-key-of-more-than-thirty-two-bytes-0123456789\n";
  ::chmod(open.c_str(), 0644);
  Side s;
  PeerOptions o;
  o.key_file = open;
  EXPECT_FALSE(PeerLinks::Start(o, 1, s.Poster(), s.Handlers()).ok());
  o.key_file = KeyFile("short.key", "short");
  EXPECT_FALSE(PeerLinks::Start(o, 1, s.Poster(), s.Handlers()).ok());
}

}  // namespace
}  // namespace remora::server

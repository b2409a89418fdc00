// The shared part of the RDMA transport's tests (rdma_transport_test.cc: set-up and the program's
// main; rdma_transport_bulk_test.cc; rdma_transport_progress_test.cc): where the RDMA device is,
// connecting, the fixture with an in-process server, and a server in a child process. The
// child processes are this program run again (SpawnSelf; main in rdma_transport_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "rdma/connections.h"
#include "rdma_test_util.h"
#include "remora/base/util.h"
#include "transport_internal.h"

extern char** environ;

namespace remora::rdmatest {

inline constexpr size_t kMiB = 1 << 20;

inline std::string RdmaAddress() {
  for (const char* var : {"REMORA_RDMA_ADDR", "REMORA_VM_RDMA_ADDR"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return v;
  return "";
}

// Skips (outside the VM) or fails (inside it) when there is no RDMA to test on.
#define REQUIRE_RDMA()                                                                                   \
  do {                                                                                                   \
    std::string why = RdmaUnavailableReason();                                                           \
    if (RdmaAddress().empty()) why = "REMORA_RDMA_ADDR is not set";                                      \
    if (!why.empty()) {                                                                                  \
      if (std::getenv("REMORA_VM") != nullptr) FAIL() << "no RDMA inside the test VM: " << why;          \
      GTEST_SKIP() << "no RDMA here (" << why << "); run through tests/rdma/vm-run.sh or ctest -L rdma"; \
    }                                                                                                    \
  } while (0)

inline Result<std::unique_ptr<Connection>> ConnectTo(const std::string& url, int timeout_ms = 15000) {
  ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(url));
  ConnectOptions o;
  o.timeout_ms = timeout_ms;
  ASSIGN_OR_RETURN(Connected c, Connect(ep, o));
  return std::move(c.connection);
}

inline std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  FillRandom(v, seed);
  return v;
}

inline double Seconds(uint64_t since_ns) { return double(MonotonicNanos() - since_ns) / 1e9; }

inline pid_t SpawnSelf(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

inline int Reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

class RdmaTransport : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_RDMA();
    server_ = std::make_unique<TestServer>(RdmaAddress());
    ASSERT_TRUE(server_->status().ok()) << server_->status().ToString();
    auto c = ConnectTo(server_->url());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    conn_ = std::move(c).value();
  }
  void TearDown() override {
    conn_.reset();
    server_.reset();
  }

  // H2D then D2H of `data` (from / into the given memory), compared byte for byte.
  void RoundTrip(ConstBytes data, MutableBytes back) {
    SCOPED_TRACE(fmt::format("{} bytes", data.size()));
    uint64_t t0 = MonotonicNanos();
    auto stored = Call(*conn_, ++tag_, Body(kStore), data);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    EXPECT_EQ(stored->body.at(1), Hash(data));
    EXPECT_EQ(stored->body.at(2), data.size());
    double h2d = Seconds(t0);
    std::memset(back.data(), 0xee, back.size());
    t0 = MonotonicNanos();
    auto fetched = Call(*conn_, ++tag_, Body(kFetch, data.size()), {}, back.first(data.size()));
    ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
    double d2h = Seconds(t0);
    EXPECT_EQ(fetched->header.bulk_bytes, data.size());
    EXPECT_EQ(fetched->body.at(1), Hash(data));
    ASSERT_EQ(std::memcmp(back.data(), data.data(), data.size()), 0) << "D2H data differs";
    if (data.size() >= kMiB)
      std::printf("    %zu bytes: H2D %.3f s, D2H %.3f s (Soft-RoCE under TCG: functional figures only)\n", data.size(), h2d, d2h);
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Connection> conn_;
  uint64_t tag_ = 0;
};

// A server in a child process (so that it can die), and a requester here.
class ChildServer {
 public:
  explicit ChildServer(const std::string& mode) {
    port_file_ = fmt::format("/tmp/rdma-child-server-{}-{}", ::getpid(), counter_++);
    ::unlink(port_file_.c_str());
    pid_ = SpawnSelf({"--child-server", RdmaAddress(), port_file_, mode});
    for (int i = 0; i < 600 && pid_ > 0; i++) {
      std::ifstream in(port_file_);
      if (std::getline(in, url_) && !url_.empty() && url_.back() == '$') {
        url_.pop_back();
        return;
      }
      url_.clear();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ChildServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Reap(pid_);
    }
    ::unlink(port_file_.c_str());
  }
  const std::string& url() const { return url_; }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  std::string port_file_;
  std::string url_;
};

}  // namespace remora::rdmatest

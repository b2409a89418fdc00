// Shared harness of the transport tests: both ends of a pipe, shm or tcp connection in
// one process, and the executor-side loops (non-blocking, bounded) the worker would run.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "remora/protocol/transport.h"
#include "test_util.h"

namespace remora::transport_test {

// kTcpSecure: tcp with the data path encrypted (REMORA_ENCRYPT=on).
enum class Kind { kPipe, kShm, kTcp, kTcpSecure };
inline const char* Name(Kind k) {
  return k == Kind::kPipe ? "pipe" : k == Kind::kShm ? "shm" : k == Kind::kTcp ? "tcp" : "tcp_secure";
}
// What capabilities().transport says for each kind.
inline const char* TransportOf(Kind k) { return k == Kind::kTcpSecure ? "tcp" : Name(k); }

inline constexpr int kDeadlineMs = 20000;  // any single wait in these tests; a hang fails, not blocks
inline constexpr uint64_t kInline = 64 << 10;  // shm inline bulk limit

// Both ends of one connection. `staging` outlives the executor end, which frees into it.
struct Ends {
  std::unique_ptr<test::TempDir> dir;
  test::AlignedStaging staging;
  std::unique_ptr<Connection> requester;
  std::unique_ptr<Connection> executor;
};

// Pipe: MakePipeConnectionPair. shm/tcp: Listen, a server thread doing Accept ->
// RunServerHandshake (no auth) -> SendWelcome -> AdoptConnection, and Connect.
void MakeEnds(Kind kind, Ends* e);

// ---- executor side (non-blocking connection, bounded loops) ----
// One Progress + WaitForActivity; kTimeout once `start` is kDeadlineMs old.
Status Idle(Connection& c, uint64_t start, const char* what);
// Polls until a frame arrives.
Result<InFrame> ExecPoll(Connection& c);
// Reads the bulk of the last polled frame, holding up to 3 chunks before releasing the
// oldest (as the worker does while their DMA runs); checks chunk offsets.
Result<std::vector<std::byte>> ExecReadBulk(Connection& c, uint64_t total);
// Posts `frame` with `data` as its bulk, acquiring chunks of at most `max_chunk` bytes and
// keeping up to `max_inflight` acquired before committing the oldest.
Status ExecPostBulk(Connection& c, const OutFrame& frame, ConstBytes data, size_t max_chunk = SIZE_MAX,
                    size_t max_inflight = 1);
// Keeps the executor's queued output moving until `done`.
Status Pump(Connection& c, const std::atomic<bool>& done);

// Runs the executor side in a thread. On failure it destroys the executor end, so a
// requester blocked on it fails instead of hanging. `done` (passed to the function) is set
// by Join() and by the destructor, so an early return of the test (a failed ASSERT) still
// ends the thread.
class ExecThread {
 public:
  using Fn = std::function<Status(Connection&, const std::atomic<bool>& done)>;
  ExecThread(std::unique_ptr<Connection>& conn, Fn fn)
      : thread_([this, &conn, fn = std::move(fn)] {
          status_ = fn(*conn, done_);
          if (!status_.ok()) conn.reset();
        }) {}
  ~ExecThread() {
    if (thread_.joinable()) (void)Join();
  }
  // Lets a pumping executor finish, waits for it and returns its outcome.
  Status Join() {
    done_ = true;
    thread_.join();
    return status_;
  }

 private:
  std::atomic<bool> done_{false};
  Status status_;
  std::thread thread_;
};

// ---- frames and data ----
// A request body that names the tag and size it travels with.
std::vector<uint64_t> RequestBody(uint64_t tag, uint64_t size);
std::vector<uint64_t> ReplyBody(uint64_t tag, const std::string& text = "");
OutFrame Frame(FrameKind kind, uint64_t tag, const std::vector<uint64_t>& body, uint16_t flags = 0);
bool SameBody(const InFrame& f, const std::vector<uint64_t>& body);
// A window of 64 MiB + 64 KiB of random bytes made once; `index` picks the window.
ConstBytes Payload(size_t size, size_t index);
// "" if equal, else where they differ.
std::string FirstMismatch(ConstBytes want, ConstBytes got);

// Parameterised over the transport; both ends are ready in every test.
class TransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    MakeEnds(GetParam(), &ends_);
    ASSERT_NE(ends_.requester, nullptr);
    ASSERT_NE(ends_.executor, nullptr);
  }
  // Whatever the test did, the executor end gives all its staging memory back.
  void TearDown() override {
    ends_.executor.reset();
    EXPECT_EQ(ends_.staging.live(), 0) << "staging buffers leaked by the executor end";
  }
  Connection& req() { return *ends_.requester; }
  Ends ends_;
};

}  // namespace remora::transport_test

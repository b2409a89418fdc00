// server/worker/stall_watch: a unit of work that outlasts the threshold is named in the log,
// with the stalled thread's stack, while it still runs, and again when it returns; short ones,
// and a watch that is off, say nothing.
#include "worker/session/stall_watch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "remora/base/log.h"
#include "remora.capnp.h"

namespace remora::worker::unit {
namespace {

// The process's log lines, written to a temporary file while it lives.
class LogCapture {
 public:
  LogCapture() : file_(std::tmpfile()) { SetLogFd(fileno(file_)); }
  ~LogCapture() {
    SetLogFd(2);
    std::fclose(file_);
  }
  std::string Text() {
    std::string out;
    std::rewind(file_);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) out.append(buf, n);
    return out;
  }

 private:
  std::FILE* file_;
};

constexpr uint64_t kMs = 1'000'000;
const int kMemFree = static_cast<int>(wire::Request::MEM_FREE);

TEST(StallWatch, NamesAUnitOfWorkWhileItOutlastsTheThresholdAndWhenItReturns) {
  LogCapture log;
  {
    StallWatch w(7, 50 * kMs);
    w.Enter(kMemFree);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    std::string during = log.Text();
    EXPECT_NE(during.find("session 7: the worker has been in memFree for"), std::string::npos) << during;
    EXPECT_EQ(during.find("returned"), std::string::npos) << "it has not returned yet: " << during;
    // With the stalled thread's stack: here, asleep (what a driver call that waits would show).
    EXPECT_NE(during.find("the executor's stack:"), std::string::npos) << during;
    EXPECT_NE(during.find("nanosleep"), std::string::npos) << during;
    w.Leave();
  }
  std::string after = log.Text();
  EXPECT_NE(after.find("session 7: memFree returned after"), std::string::npos) << after;
  // Reported once, however long it lasted.
  size_t first = after.find("has been in");
  EXPECT_EQ(after.find("has been in", first + 1), std::string::npos) << after;
}

TEST(StallWatch, AGeneratedCallIsNamedByItsFunction) {
  LogCapture log;
  {
    StallWatch w(3, 50 * kMs);
    w.Enter(static_cast<int>(wire::Request::API_CALL));
    w.Name("cuMemHostRegister_v2");
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    w.Leave();
    w.Enter(-1);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    w.Leave();
  }
  std::string text = log.Text();
  EXPECT_NE(text.find("has been in cuMemHostRegister_v2 for"), std::string::npos) << text;
  EXPECT_NE(text.find("cuMemHostRegister_v2 returned after"), std::string::npos) << text;
  EXPECT_NE(text.find("has been in polling the pending operations for"), std::string::npos) << text;
}

TEST(StallWatch, ShortUnitsAndAWatchThatIsOffSayNothing) {
  LogCapture log;
  {
    StallWatch w(1, 300 * kMs);
    for (int i = 0; i < 200; i++) {
      w.Enter(kMemFree);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      w.Leave();
    }
    StallWatch off(2, 0);
    off.Enter(kMemFree);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    off.Leave();
  }
  EXPECT_EQ(log.Text(), "");
}

TEST(StallWatch, TheThresholdComesFromTheEnvironment) {
  ::setenv("REMORA_WORKER_STALL_WARN_S", "0.25", 1);
  EXPECT_EQ(StallWatch::WarnAfterFromEnv(), 250 * kMs);
  ::setenv("REMORA_WORKER_STALL_WARN_S", "0", 1);
  EXPECT_EQ(StallWatch::WarnAfterFromEnv(), 0u);
  ::setenv("REMORA_WORKER_STALL_WARN_S", "ten", 1);
  EXPECT_EQ(StallWatch::WarnAfterFromEnv(), 10'000 * kMs);
  ::unsetenv("REMORA_WORKER_STALL_WARN_S");
  EXPECT_EQ(StallWatch::WarnAfterFromEnv(), 10'000 * kMs);
}

}  // namespace
}  // namespace remora::worker::unit

#include "worker/session/stall_watch.h"

#include <cxxabi.h>
#include <errno.h>
#include <execinfo.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/request_names.h"

namespace remora::worker {
namespace {

// One stack at a time, taken by the executor thread in the signal handler (backtrace is
// async-signal-safe once loaded, which the constructor does) and read by the watch thread.
constexpr int kMaxFrames = 48;
void* g_frames[kMaxFrames];
std::atomic<int> g_frame_count{-1};  // -1: not taken yet
std::mutex g_stack_mu;               // one ExecutorStack at a time (several sessions' watches)

void TakeStack(int) {
  int saved = errno;
  g_frame_count.store(backtrace(g_frames, kMaxFrames), std::memory_order_release);
  errno = saved;
}

}  // namespace

std::string StallWatch::ExecutorStack() {
  if (!has_thread_.load(std::memory_order_acquire)) return {};
  std::lock_guard<std::mutex> lock(g_stack_mu);
  g_frame_count.store(-1, std::memory_order_release);
  if (pthread_kill(executor_thread_, SIGURG) != 0) return {};
  for (int i = 0; i < 1000 && g_frame_count.load(std::memory_order_acquire) < 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int n = g_frame_count.load(std::memory_order_acquire);
  if (n <= 0) return {};
  std::string out;
  if (char** names = backtrace_symbols(g_frames, n)) {
    for (int i = 2; i < n; i++) (out += "\n    ") += names[i];  // past the handler and the signal frame
    std::free(names);
  }
  return out;
}

uint64_t StallWatch::WarnAfterFromEnv() {
  const char* v = std::getenv("REMORA_WORKER_STALL_WARN_S");
  if (v == nullptr || v[0] == '\0') return 10'000'000'000ull;
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s >= 0) || s > 1e6) {
    LOG_WARN("REMORA_WORKER_STALL_WARN_S={}: not a number of seconds; the default (10) is used", v);
    return 10'000'000'000ull;
  }
  return static_cast<uint64_t>(s * 1e9);
}

StallWatch::StallWatch(uint64_t session, uint64_t warn_after_ns) : session_(session), warn_after_ns_(warn_after_ns) {
  if (warn_after_ns_ == 0) return;
  static std::once_flag once;
  std::call_once(once, [] {
    void* warm[1];
    (void)backtrace(warm, 1);  // loads the unwinder now, not in the signal handler
    struct sigaction sa = {};
    sa.sa_handler = TakeStack;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGURG, &sa, nullptr);
  });
  thread_ = std::thread([this] { Watch(); });
}

StallWatch::~StallWatch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallWatch::Enter(int kind) {
  if (warn_after_ns_ == 0) return;
  if (!has_thread_.load(std::memory_order_relaxed)) {
    executor_thread_ = pthread_self();
    has_thread_.store(true, std::memory_order_release);
  }
  kind_.store(kind, std::memory_order_relaxed);
  name_.store(nullptr, std::memory_order_relaxed);
  since_ns_.store(MonotonicNanos(), std::memory_order_relaxed);
  seq_.fetch_add(1, std::memory_order_release);  // odd: inside
}

void StallWatch::Leave() {
  if (warn_after_ns_ == 0) return;
  uint64_t seq = seq_.fetch_add(1, std::memory_order_release);  // even: outside
  if (reported_seq_.load(std::memory_order_acquire) == seq) {
    double s = static_cast<double>(MonotonicNanos() - since_ns_.load(std::memory_order_relaxed)) / 1e9;
    LOG_WARN("session {}: {} returned after {:.1f} s", session_,
             Describe(kind_.load(std::memory_order_relaxed), name_.load(std::memory_order_relaxed)), s);
  }
}

std::string StallWatch::Describe(int kind, const char* name) {
  if (name != nullptr) {
    // A pending operation is named by its type (typeid's name, mangled).
    int status = -1;
    char* plain = name[0] == 'N' ? abi::__cxa_demangle(name, nullptr, nullptr, &status) : nullptr;
    if (plain == nullptr) return name;
    std::string out = plain;
    std::free(plain);
    return out;
  }
  if (kind < 0) return "polling the pending operations";
  const char* n = RequestName(static_cast<wire::Request::Which>(kind));
  if (n != nullptr) return n;
  return "an unknown request";
}

void StallWatch::Watch() {
  uint64_t period_ns = std::min<uint64_t>(warn_after_ns_ / 4 + 1, 1'000'000'000ull);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::nanoseconds(period_ns), [this] { return stop_; })) {
    uint64_t seq = seq_.load(std::memory_order_acquire);
    if ((seq & 1) == 0 || reported_seq_.load(std::memory_order_relaxed) == seq) continue;
    uint64_t since = since_ns_.load(std::memory_order_relaxed);
    int kind = kind_.load(std::memory_order_relaxed);
    const char* name = name_.load(std::memory_order_relaxed);
    uint64_t now = MonotonicNanos();
    // Read again: the fields belong to `seq` only if it has not moved meanwhile.
    if (seq_.load(std::memory_order_acquire) != seq || now < since || now - since < warn_after_ns_) continue;
    reported_seq_.store(seq, std::memory_order_release);
    lock.unlock();
    std::string stack = ExecutorStack();
    lock.lock();
    LOG_WARN("session {}: the worker has been in {} for {:.1f} s and serves nothing else meanwhile (a driver call "
             "that waits for the GPU while a stream waits on one of the client's host functions never returns; "
             "docs/OPERATIONS.md, \"A session that stops\"){}{}",
             session_, Describe(kind, name), static_cast<double>(now - since) / 1e9,
             stack.empty() ? "" : "; the executor's stack:", stack);
  }
}

}  // namespace remora::worker

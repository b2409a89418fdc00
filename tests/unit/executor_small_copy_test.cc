// server/worker: a small synchronous host-to-device copy whose bytes sit in the worker's
// bounce buffer is answered before its DMA finishes (ops/pending_transfer.cc, AnswerEarly), and the
// session's later requests wait until it has. The driver is the host-emulated one behind a
// wrapper that plays a DMA still in flight: after an armed copy its stream and the events
// recorded on it report "not ready" until the test lets the DMA finish (or fail).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "executor_harness.h"
#include "test_util.h"
#include "worker/backend/driver_wrapper.h"

namespace remora::worker::unit {
namespace {

class DmaInFlight final : public DriverWrapper {
 public:
  explicit DmaInFlight(Driver& host) : DriverWrapper(host) {}

  // The next host-to-device copy stays "in flight" until Finish; `fault` is then what its
  // stream reports (a device fault during the DMA), or success.
  void Arm(Status fault = Status::Ok()) {
    fault_ = std::move(fault);
    armed_ = true;
  }
  void Finish() { finished_ = true; }
  bool in_flight() const { return in_flight_ && !finished_; }
  int reads() const { return reads_; }
  int reads_before_finish() const { return reads_before_finish_; }

  Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream s) override {
    RETURN_IF_ERROR(target().MemcpyHtoD(dst, src, n, s));
    if (armed_.exchange(false)) {
      stream_ = s;
      in_flight_ = true;
    }
    return Status::Ok();
  }
  Status EventRecord(DEvent e, DStream s) override {
    // Behind the copy: done when it is. `in_flight_`, not in_flight(): the test may have let
    // the DMA finish while the executor was between its spin and this record, and the event
    // must still report the copy's outcome (it is reported once, by whichever query asks first).
    if (s == stream_ && in_flight_) event_ = e;
    return target().EventRecord(e, s);
  }
  Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream s) override {
    reads_++;
    if (in_flight()) reads_before_finish_++;
    return target().MemcpyDtoH(dst, src, n, s);
  }
  Status StreamQuery(DStream s) override { return s == stream_ ? Held(target().StreamQuery(s)) : target().StreamQuery(s); }
  Status EventQuery(DEvent e) override { return e == event_ ? Held(target().EventQuery(e)) : target().EventQuery(e); }
  Status StreamSynchronize(DStream s) override {
    while (s == stream_ && in_flight()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    return s == stream_ ? Held(target().StreamSynchronize(s)) : target().StreamSynchronize(s);
  }

 private:
  // What the copy's stream says: not ready while its DMA runs, then its outcome (once).
  Status Held(Status real) {
    if (!in_flight_) return real;
    if (!finished_) return Status(Err::kNotReady, "");
    in_flight_ = false;
    return fault_.ok() ? real : fault_;
  }

  std::atomic<bool> armed_{false}, in_flight_{false}, finished_{false};
  std::atomic<int> reads_{0}, reads_before_finish_{0};
  std::atomic<DStream> stream_{nullptr};  // the armed copy's
  std::atomic<DEvent> event_{nullptr};    // an event recorded behind it
  Status fault_;  // written before Arm, read by the executor after
};

class SmallCopyTest : public ExecutorTest {
 protected:
  SmallCopyTest() {
    wrap_driver_ = [this](Driver& host) {
      auto w = std::make_unique<DmaInFlight>(host);
      dma_ = w.get();
      return std::unique_ptr<Driver>(std::move(w));
    };
  }
  DmaInFlight* dma_ = nullptr;
};

TEST_F(SmallCopyTest, AnsweredBeforeItsDmaAndLaterCallsWaitForIt) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  Reply other = StreamCreate(1);  // non-blocking
  ASSERT_EQ(other.error, Err::kSuccess) << other.message;
  auto data = test::RandomBytes(4096, 1);
  dma_->Arm();
  Reply w = HtoD(a.pointer, data);
  ASSERT_EQ(w.error, Err::kSuccess) << w.message;
  EXPECT_TRUE(dma_->in_flight()) << "the copy's answer waited for its DMA";

  // The next call (a copy back on a stream that does not wait for the copy's own) is not
  // run while the DMA is in flight...
  uint64_t tag = Send([&](wire::Request::Builder r) {
    auto m = r.initMemcpyDtoH();
    m.setSrc(a.pointer);
    m.setSize(data.size());
    m.initStream().setHandle(other.handle);
  });
  auto early = requester_->Receive(50);
  EXPECT_FALSE(early.ok()) << "a later call was answered before the copy's DMA was done";
  EXPECT_EQ(dma_->reads(), 0) << "a later call ran before the copy's DMA was done";
  // ...and runs once it is done, finding the bytes in place.
  dma_->Finish();
  auto r = Receive();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tag, tag);
  ASSERT_EQ(r->error, Err::kSuccess) << r->message;
  ASSERT_EQ(r->bulk.size(), data.size());
  EXPECT_EQ(std::memcmp(r->bulk.data(), data.data(), data.size()), 0);
  EXPECT_EQ(dma_->reads_before_finish(), 0);
  EXPECT_EQ(r->async_error, Err::kSuccess);
}

TEST_F(SmallCopyTest, AFaultDuringTheDmaIsTheSessionsNextError) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  dma_->Arm(Status(Err::kIllegalAddress, "an illegal address during the DMA (injected)"));
  Reply w = HtoD(a.pointer, test::RandomBytes(4096, 2));
  ASSERT_EQ(w.error, Err::kSuccess) << w.message;
  dma_->Finish();
  Reply next = Ping();
  EXPECT_EQ(next.error, Err::kSuccess);
  EXPECT_EQ(next.async_error, Err::kIllegalAddress) << "the DMA's fault was lost";
  Reply after = Ping();
  EXPECT_EQ(after.async_error, Err::kSuccess) << "reported once, as an asynchronous error";
}

// Larger copies (beyond the bounce buffer) are answered after their DMA, as before.
TEST_F(SmallCopyTest, ALargeCopyIsAnsweredAfterItsDma) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  auto data = test::RandomBytes(256 << 10, 3);
  dma_->Arm();
  uint64_t tag = Send([&](wire::Request::Builder r) {
    auto m = r.initMemcpyHtoD();
    m.setDst(a.pointer);
    m.setSize(data.size());
    m.initStream().setHandle(0);
  }, data);
  auto early = requester_->Receive(50);
  EXPECT_FALSE(early.ok()) << "a 256 KiB copy was answered while its DMA was in flight";
  EXPECT_TRUE(dma_->in_flight());
  dma_->Finish();
  auto r = Receive();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tag, tag);
  EXPECT_EQ(r->error, Err::kSuccess) << r->message;
}

}  // namespace
}  // namespace remora::worker::unit

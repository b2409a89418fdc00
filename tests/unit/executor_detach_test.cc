// A GPU the administrator detaches while the client still queues work on it: that work fails
// on that device alone.
#include <deque>
#include <mutex>

#include "executor_harness.h"

namespace remora::worker::unit {
namespace {

// The supervisor's events, queued by the test.
class QueuedControl : public ControlSource {
 public:
  void Push(ControlEvent ev) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
  }
  Result<std::optional<ControlEvent>> Poll() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (events_.empty()) return std::optional<ControlEvent>();
    ControlEvent ev = std::move(events_.front());
    events_.pop_front();
    return std::optional<ControlEvent>(std::move(ev));
  }

 private:
  std::mutex mu_;
  std::deque<ControlEvent> events_;
};

class DetachTest : public ExecutorTest {
 protected:
  DetachTest() {
    gpus_ = 2;
    control_source_ = &control_;
  }
  // Detaches GPU 1 and takes the worker's notice of it.
  void DetachGpu1() {
    ControlEvent ev;
    ev.kind = ControlEvent::Kind::kSetDevices;
    ev.gpus = {0};
    control_.Push(ev);
    auto f = requester_->Receive(kReplyTimeoutMs);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_EQ(f->kind(), FrameKind::kNotice);
    EXPECT_EQ(Ping().generation, 2u);
  }
  QueuedControl control_;
};

// CUDA keeps devices' errors apart, and every later call on the detached device (its streams,
// its ordinal) fails anyway: a posted call's failure there is not reported by the next
// synchronising call of another device. Found by the chaos soak: a cudaFree on device 0
// succeeded but answered device 1's error; the application, believing its memory still
// allocated, kept using it after the worker had given the address to a new allocation.
TEST_F(DetachTest, WorkQueuedOnADetachedGpuFailsThereAlone) {
  Reply s = StreamCreate(0, 0, 1);
  ASSERT_EQ(s.error, Err::kSuccess) << s.message;
  Reply on1 = Call([](auto r) {
    r.setDevice(1);
    r.initMemAlloc().setSize(4096);
  });
  ASSERT_EQ(on1.error, Err::kSuccess) << on1.message;
  Reply on0 = Alloc(4096);
  ASSERT_EQ(on0.error, Err::kSuccess) << on0.message;
  DetachGpu1();

  // The client has not heard of the detach yet: it queues a memset on GPU 1's stream.
  Send([&](auto r) {
    r.setDevice(1);
    auto m = r.initMemset();
    m.setDst(on1.pointer);
    m.setValue(7);
    m.setSize(64);
    m.initStream().setHandle(s.handle);
    m.setAsync(true);
  }, {}, /*expects_reply=*/false);
  // Device 0's free and synchronisation succeed, with nothing of GPU 1's failure.
  Reply freed = Call([&](auto r) { r.initMemFree().setPtr(on0.pointer); });
  EXPECT_EQ(freed.error, Err::kSuccess) << freed.message;
  EXPECT_EQ(freed.async_error, Err::kSuccess) << "GPU 1's failure was reported on device 0's free";
  Reply sync0 = Call([](auto r) { r.setDeviceSynchronize(); });
  EXPECT_EQ(sync0.error, Err::kSuccess) << sync0.message;
  EXPECT_EQ(sync0.async_error, Err::kSuccess);
  // GPU 1's own calls fail.
  EXPECT_EQ(StreamSync(s.handle).error, Err::kDevicesUnavailable);
  Reply sync1 = Call([](auto r) {
    r.setDevice(1);
    r.setDeviceSynchronize();
  });
  EXPECT_EQ(sync1.error, Err::kDevicesUnavailable) << sync1.message;
}

// Any other failure of posted work is still reported at the next synchronising call.
TEST_F(DetachTest, OtherFailuresOfQueuedWorkAreStillReported) {
  DetachGpu1();
  Send([](auto r) {
    auto m = r.initMemset();
    m.setDst(0x1234);  // not the session's memory
    m.setValue(7);
    m.setSize(64);
    m.setAsync(true);
  }, {}, /*expects_reply=*/false);
  Reply sync0 = Call([](auto r) { r.setDeviceSynchronize(); });
  EXPECT_EQ(sync0.async_error, Err::kInvalidValue);
}

}  // namespace
}  // namespace remora::worker::unit

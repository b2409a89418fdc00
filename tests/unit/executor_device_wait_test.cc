// server/worker: a driver call that waits for the whole device (cuMemFree, cuModuleUnload,
// cuMemHostRegister) is not made while one of the session's host functions is outstanding:
// on a GPU it would wait for that function's stream, which waits for the client's
// callbackDone, which only the (then blocked) executor takes. JAX stopped this way in its
// first gradient (docs/COMPATIBILITY.md, "JAX"). The driver is the host-emulated one behind
// a wrapper whose cudaFree waits for every stream it saw a host function on, as a GPU's does
// (bounded here, so a regression fails instead of hanging).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "executor_harness.h"
#include "test_util.h"
#include "worker/backend/driver_wrapper.h"

namespace remora::worker::unit {
namespace {

class FreeWaitsForTheDevice final : public DriverWrapper {
 public:
  explicit FreeWaitsForTheDevice(Driver& host) : DriverWrapper(host) {}

  Status LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      streams_.insert(s);
    }
    return target().LaunchHostFunc(s, fn, arg);
  }
  // As cuMemFree on a GPU: returns once every stream ran what was queued (3 s at most here).
  Status MemFree(DevPtr p) override {
    RETURN_IF_ERROR(WaitForEveryStream("cudaFree"));
    return target().MemFree(p);
  }
  // cuMemFreeHost waits the same way.
  void HostFree(void* p) override {
    (void)WaitForEveryStream("cudaFreeHost");
    target().HostFree(p);
  }
  bool stalled() const { return stalled_; }

 private:
  Status WaitForEveryStream(const char* call) {
    std::set<DStream> streams;
    {
      std::lock_guard<std::mutex> lock(mu_);
      streams = streams_;
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (DStream s : streams)
      while (target().StreamQuery(s).code() == Err::kNotReady) {
        if (std::chrono::steady_clock::now() > until) {
          stalled_ = true;
          return Status(Err::kNotReady, std::string(call) + " would have waited forever for a host function (injected bound)");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    return Status::Ok();
  }

  std::mutex mu_;
  std::set<DStream> streams_;
  std::atomic<bool> stalled_{false};
};

class DeviceWaitTest : public ExecutorTest {
 protected:
  DeviceWaitTest() {
    wrap_driver_ = [this](Driver& host) {
      auto w = std::make_unique<FreeWaitsForTheDevice>(host);
      driver_wrapper_ = w.get();
      return std::unique_ptr<Driver>(std::move(w));
    };
  }
  // Queues host function `id` on `stream` and waits for the notice that the stream reached it.
  void HostFunctionReached(uint64_t stream, uint64_t id) {
    Send([&](auto r) {
      auto h = r.initHostFunc();
      h.initStream().setHandle(stream);
      h.setId(id);
    }, {}, /*expects_reply=*/false);
    auto f = requester_->Receive(kReplyTimeoutMs);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_EQ(f->kind(), FrameKind::kNotice);
    uint64_t got = 0;
    Status st = GuardDecode("notice", [&]() -> Status {
      BodyReader reader(f->body);
      auto n = reader.Root<wire::Notice>();
      if (n.isHostCallback()) got = n.getHostCallback();
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(got, id) << "expected the notice that host function " << id << " was reached";
  }
  void CallbackDone(uint64_t id) {
    Send([&](auto r) { r.setCallbackDone(id); }, {}, /*expects_reply=*/false);
  }
  FreeWaitsForTheDevice* driver_wrapper_ = nullptr;
};

// cudaFree on one thread while host functions run on two streams, the second queued (by
// another application thread) after the free: the free waits for both, the session keeps
// taking their completions, and the free answers once they are done.
TEST_F(DeviceWaitTest, AFreeWaitsForHostFunctionsQueuedAfterItWithoutStoppingTheSession) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  Reply s2 = StreamCreate(1);  // non-blocking: not behind the legacy stream
  ASSERT_EQ(s2.error, Err::kSuccess) << s2.message;
  ASSERT_NO_FATAL_FAILURE(HostFunctionReached(0, 1));
  uint64_t free_tag = Send([&](auto r) { r.initMemFree().setPtr(a.pointer); });
  ASSERT_NO_FATAL_FAILURE(HostFunctionReached(s2.handle, 2));
  CallbackDone(1);  // the work queued before the free is done; host function 2 still runs
  auto early = requester_->Receive(300);
  EXPECT_FALSE(early.ok()) << "the free answered while a host function still held a stream";
  CallbackDone(2);
  auto r = Receive();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tag, free_tag);
  EXPECT_EQ(r->error, Err::kSuccess) << r->message;
  EXPECT_FALSE(driver_wrapper_->stalled()) << "the executor called cudaFree while a host function held a stream";
  Reply after = Call([](auto r) { r.setDeviceSynchronize(); });
  EXPECT_EQ(after.error, Err::kSuccess) << after.message;
  EXPECT_EQ(after.async_error, Err::kSuccess) << after.async_message;
}

// A host-to-device copy of more than 64 KiB while a host function holds another stream is
// spilled into pinned memory of its own (its stream may wait on the client too); freeing
// that memory waits for the whole device, so it waits until the host function is done. JAX
// over tcp stopped in that cuMemFreeHost.
TEST_F(DeviceWaitTest, ACopysSpillBufferIsFreedOnlyOnceNoHostFunctionHoldsAStream) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  Reply s2 = StreamCreate(1);  // non-blocking: not behind the legacy stream
  ASSERT_EQ(s2.error, Err::kSuccess) << s2.message;
  ASSERT_NO_FATAL_FAILURE(HostFunctionReached(0, 1));
  auto bytes = test::RandomBytes(256 << 10, 7);
  Reply copied = Call([&](auto r) {
    auto m = r.initMemcpyHtoD();
    m.setDst(a.pointer);
    m.setSize(bytes.size());
    m.initStream().setHandle(s2.handle);
  }, bytes);
  EXPECT_EQ(copied.error, Err::kSuccess) << copied.message;
  EXPECT_FALSE(driver_wrapper_->stalled()) << "the executor freed the spill buffer while a host function held a stream";
  CallbackDone(1);
  Reply after = Call([](auto r) { r.setDeviceSynchronize(); });
  EXPECT_EQ(after.error, Err::kSuccess) << after.message;
  Reply back = Call([&](auto r) {
    auto m = r.initMemcpyDtoH();
    m.setSrc(a.pointer);
    m.setSize(bytes.size());
  });
  ASSERT_EQ(back.error, Err::kSuccess) << back.message;
  EXPECT_TRUE(back.bulk == bytes) << "the copy's bytes did not arrive";
  EXPECT_FALSE(driver_wrapper_->stalled());
}

}  // namespace
}  // namespace remora::worker::unit

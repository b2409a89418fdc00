// server/worker: the Executor's streams, events and handles, malformed and asynchronous
// requests, and the end of a session (goodbye, a vanished client, what is released).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "executor_harness.h"
#include "worker/calls/generated_call.h"
#include "remora/protocol/message.h"
#include "remora/protocol/transport.h"
#include "test_util.h"

namespace remora::worker::unit {
namespace {

TEST_F(ExecutorTest, StreamCreateSyncDestroy) {
  Reply s = StreamCreate(1);
  ASSERT_EQ(s.error, Err::kSuccess) << s.message;
  ASSERT_EQ(s.which, wire::Reply::API_RESULT);
  EXPECT_GT(s.handle, 2u);
  uint64_t h = s.handle;
  EXPECT_EQ(StreamSync(h).error, Err::kSuccess);
  EXPECT_EQ(StreamQuery(h).error, Err::kSuccess);
  // Work on the stream, then synchronise it.
  Reply a = Alloc(4096);
  auto data = test::RandomBytes(4096, 5);
  EXPECT_EQ(HtoD(a.pointer, data, h).error, Err::kSuccess);
  Reply back = DtoH(a.pointer, 4096, h);
  EXPECT_EQ(back.bulk, data);
  EXPECT_EQ(StreamDestroy(h).error, Err::kSuccess);
  EXPECT_EQ(StreamSync(h).error, Err::kInvalidValue)
      << "a destroyed stream is gone";
  EXPECT_EQ(StreamDestroy(h).error, Err::kInvalidValue);
  // The default and per-thread streams need no creation, and cannot be destroyed.
  for (uint64_t d : {0, 1, 2}) EXPECT_EQ(StreamDestroy(d).error, Err::kInvalidValue) << d;
  // Flags CUDA does not know are refused (the client's check is not the only one).
  Reply odd = StreamCreate(0x80);
  EXPECT_EQ(odd.error, Err::kInvalidValue) << odd.message;
  EXPECT_EQ(EventCreate(0x10).error, Err::kInvalidValue);
  EXPECT_EQ(EventCreate(0x4).error, Err::kInvalidValue) << "an interprocess event must disable timing";
  EXPECT_EQ(StreamSync(0).error, Err::kSuccess);
  EXPECT_EQ(StreamSync(2).error, Err::kSuccess);
  EXPECT_EQ(Call([](auto r) { r.setDeviceSynchronize(); }).error, Err::kSuccess);
}

TEST_F(ExecutorTest, EventCreateRecordQueryElapsed) {
  Reply start = EventCreate(0);
  Reply end = EventCreate(0);
  ASSERT_EQ(start.error, Err::kSuccess);
  ASSERT_EQ(end.error, Err::kSuccess);
  EXPECT_NE(start.handle, end.handle);
  auto record = [&](uint64_t ev) {
    return EventRecord(ev, 0);
  };
  EXPECT_EQ(record(start.handle).error, Err::kSuccess);
  EXPECT_EQ(record(end.handle).error, Err::kSuccess);
  EXPECT_EQ(EventQuery(end.handle).error, Err::kSuccess);
  EXPECT_EQ(EventSync(end.handle).error, Err::kSuccess);
  Reply el = EventElapsed(start.handle, end.handle);
  ASSERT_EQ(el.error, Err::kSuccess) << el.message;
  ASSERT_EQ(el.api_result.size(), sizeof(float));
  EXPECT_GE(el.elapsed_ms, 0.0f);
  EXPECT_LT(el.elapsed_ms, 10000.0f);
  // cudaEventDisableTiming events cannot be timed.
  Reply untimed = EventCreate(0x2);
  ASSERT_EQ(untimed.error, Err::kSuccess);
  EXPECT_EQ(record(untimed.handle).error, Err::kSuccess);
  Reply bad = EventElapsed(start.handle, untimed.handle);
  EXPECT_EQ(bad.error, Err::kInvalidResourceHandle) << bad.message;
  EXPECT_EQ(EventDestroy(start.handle).error, Err::kSuccess);
  EXPECT_EQ(EventQuery(start.handle).error, Err::kInvalidValue);
}

// Handles that are not the session's own - unknown ids, and handles of the wrong kind -
// are kInvalidValue.
TEST_F(ExecutorTest, UnknownAndMismatchedHandlesAreRejected) {
  Reply s = StreamCreate();
  Reply e = EventCreate(0);
  ASSERT_EQ(s.error, Err::kSuccess);
  ASSERT_EQ(e.error, Err::kSuccess);
  for (uint64_t bogus : {uint64_t{0x5100000000000ff0}, uint64_t{3}, e.handle, ~uint64_t{0}}) {
    EXPECT_EQ(StreamSync(bogus).error, Err::kInvalidValue)
        << std::hex << bogus;
    EXPECT_EQ(StreamQuery(bogus).error, Err::kInvalidValue);
    Reply a = Alloc(64);
    EXPECT_EQ(DtoH(a.pointer, 64, bogus).error, Err::kInvalidValue) << "a copy on a stream that is not ours";
  }
  EXPECT_EQ(EventQuery(s.handle).error, Err::kInvalidValue) << "stream as event";
  EXPECT_EQ(EventSync(0x5200000000000ff0).error, Err::kInvalidValue);
  Reply wait = StreamWaitEvent(s.handle, s.handle);
  EXPECT_EQ(wait.error, Err::kInvalidValue);
}

// A request that does not decode gets an error reply saying "malformed", and the session
// goes on serving.
TEST_F(ExecutorTest, MalformedRequestIsAnsweredAndServingContinues) {
  // Segment table claims 5 words; only 2 follow.
  std::vector<uint64_t> truncated = {uint64_t{5} << 32, 0x0001000000000000ull, 0};
  uint64_t tag = SendBody(truncated);
  auto r = Receive();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tag, tag);
  EXPECT_EQ(r->error, Err::kInvalidValue);
  EXPECT_EQ(r->message.rfind("malformed", 0), 0u) << r->message;
  // Root pointer far outside the segment.
  std::vector<uint64_t> wild = {uint64_t{2} << 32, (uint64_t{100000} << 2) | (uint64_t{3} << 32), 0};
  tag = SendBody(wild);
  r = Receive();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tag, tag);
  EXPECT_EQ(r->error, Err::kInvalidValue);
  EXPECT_EQ(Ping().error, Err::kSuccess);
  Reply a = Alloc(4096);
  EXPECT_EQ(a.error, Err::kSuccess) << "still serving";
  EXPECT_FALSE(run_done_);
}

// Errors of asynchronous calls (no reply expected) surface at the next synchronising
// call, once, as on a real GPU.
TEST_F(ExecutorTest, AsyncErrorsSurfaceAtTheNextSynchronisingCall) {
  auto data = test::RandomBytes(1000, 9);
  Send([&](auto r) {
    auto m = r.initMemcpyHtoD();
    m.setDst(0xdeadbeef000);
    m.setSize(data.size());
    m.setAsync(true);
  }, data, /*expects_reply=*/false);
  std::vector<uint64_t> garbage = {uint64_t{9} << 32, 1};
  SendBody(garbage, {}, /*expects_reply=*/false);  // malformed and asynchronous
  Reply sync = Call([](auto r) { r.setDeviceSynchronize(); });
  EXPECT_EQ(sync.error, Err::kSuccess);
  EXPECT_EQ(sync.async_error, Err::kInvalidValue) << "the failed async copy is reported here";
  Reply again = Call([](auto r) { r.setDeviceSynchronize(); });
  EXPECT_EQ(again.async_error, Err::kSuccess) << "reported once";
}

// A host function the worker refuses (here: a stream that is not the session's; in the wild:
// one whose device was detached after the client queued it) is announced as cancelled, so the
// client stops waiting for it, and the refusal surfaces at the next synchronising call.
TEST_F(ExecutorTest, RefusedHostFunctionIsCancelledNotLeftPending) {
  Send([](auto r) {
    auto h = r.initHostFunc();
    h.initStream().setHandle(0x5100000000000990ull);
    h.setId(5);
  }, {}, /*expects_reply=*/false);
  auto f = requester_->Receive(kReplyTimeoutMs);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->kind(), FrameKind::kNotice);
  Status st = GuardDecode("notice", [&]() -> Status {
    BodyReader reader(f->body);
    auto n = reader.Root<wire::Notice>();
    EXPECT_TRUE(n.isHostCallbackCancelled());
    if (n.isHostCallbackCancelled()) {
      EXPECT_EQ(n.getHostCallbackCancelled(), 5u);
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  Reply sync = Call([](auto r) { r.setDeviceSynchronize(); });
  EXPECT_EQ(sync.async_error, Err::kInvalidValue) << "the refusal is reported at the next synchronising call";
}

// Data on a request that takes none cannot be resynchronised: the session ends with a clear
// error (found by fuzz target `request`: the data was left unread and the transport failed
// with an internal error on the next frame).
TEST_F(ExecutorTest, DataOnARequestThatTakesNoneEndsTheSession) {
  auto junk = test::RandomBytes(96, 4);
  Send([](auto r) { r.initPoolTrimTo(); }, junk);
  ASSERT_TRUE(test::WaitFor([&] { return run_done_.load(); }, 5000)) << "the session went on";
  thread_.join();
  EXPECT_EQ(run_status_.code(), Err::kInvalidValue) << run_status_.ToString();
  EXPECT_NE(run_status_.message().find("does not take"), std::string::npos) << run_status_.ToString();
}

class HostFunctionTest : public ExecutorTest {
 protected:
  // Queues a host function on the legacy stream and waits for the worker's notice that the
  // stream reached it: the stream stays blocked until the client answers, which these tests
  // never do.
  void BlockLegacyStreamInHostFunction() {
    Send([](auto r) {
      auto h = r.initHostFunc();
      h.initStream().setHandle(0);
      h.setId(9);
    }, {}, /*expects_reply=*/false);
    auto reached = requester_->Receive(kReplyTimeoutMs);
    ASSERT_TRUE(reached.ok()) << reached.status().ToString();
    ASSERT_EQ(reached->kind(), FrameKind::kNotice);
  }
};

// A client that leaves while a host function it queued blocks the stream, with a copy queued
// behind it, never runs the function: the session's end must let the function go before it
// waits for the copy (found by fuzz target `request`: the worker hung in its teardown,
// holding the tenant's memory, until killed).
TEST_F(HostFunctionTest, SessionEndNeverWaitsForAHostFunctionTheClientWillNotRun) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  ASSERT_NO_FATAL_FAILURE(BlockLegacyStreamInHostFunction());
  auto data = test::RandomBytes(300000, 9);
  Send([&](auto r) {
    auto m = r.initMemcpyHtoD();
    m.setDst(a.pointer);
    m.setSize(data.size());
    m.initStream().setHandle(0);
  }, data);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the copy is issued behind it
  Status st = EndBy(/*goodbye=*/false);
  EXPECT_EQ(st.code(), Err::kDevicesUnavailable) << st.ToString();
  auto released = std::make_shared<std::atomic<bool>>(false);
  std::thread([this, released] {
    executor_.reset();
    released->store(true);
  }).detach();
  if (!test::WaitFor([&] { return released->load(); }, 5000)) {
    std::fprintf(stderr, "the executor's teardown still waits for the host function after 5 s\n");
    std::quick_exit(1);  // the teardown thread holds the executor: nothing can be cleaned up
  }
}

// The same session end with memsets queued behind the host function: released, they run
// while the session frees their memory (the fuzz target `request`'s open finding: the worker
// died writing unmapped emulated device memory on a stream thread). Everything is freed at
// once and the late work must not crash the worker.
TEST_F(HostFunctionTest, WorkReleasedAtSessionEndRunsWhileItsMemoryIsFreed) {
  constexpr uint64_t kBytes = 16 << 20;
  Reply a = Alloc(kBytes);
  ASSERT_EQ(a.error, Err::kSuccess);
  ASSERT_NO_FATAL_FAILURE(BlockLegacyStreamInHostFunction());
  for (int i = 0; i < 64; i++)
    Send([&](auto r) {
      auto m = r.initMemset();
      m.setDst(a.pointer);
      m.setValue(static_cast<uint8_t>(i));
      m.setSize(kBytes);
    }, {}, /*expects_reply=*/false);
  ASSERT_EQ(Ping().error, Err::kSuccess);  // the memsets are issued
  Status st = EndBy(/*goodbye=*/false);
  EXPECT_EQ(st.code(), Err::kDevicesUnavailable) << st.ToString();
  executor_.reset();
  EXPECT_EQ(Used(), 0u);
  // The late memsets run meanwhile; the memory they hold counts on its GPU until they ran.
  ASSERT_TRUE(driver_->SetDevice(0).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    auto mem = driver_->MemGetInfo();
    ASSERT_TRUE(mem.ok());
    if (mem->free == mem->total || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ExpectGpu0Empty("freed memory still held after the work queued before the free ran");
}

TEST_F(ExecutorTest, GoodbyeEndsRunWithOk) {
  Reply a = Alloc(4096);
  ASSERT_EQ(a.error, Err::kSuccess);
  uint64_t tag = Send([](auto r) { r.setGoodbye(); });
  auto bye = Receive();
  ASSERT_TRUE(bye.ok()) << bye.status().ToString();
  EXPECT_EQ(bye->tag, tag);
  EXPECT_EQ(bye->error, Err::kSuccess);
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
}

TEST_F(ExecutorTest, RequesterGoneEndsRunWithDevicesUnavailable) {
  ASSERT_EQ(Ping().error, Err::kSuccess);
  Status st = EndBy(/*goodbye=*/false);
  EXPECT_EQ(st.code(), Err::kDevicesUnavailable) << st.ToString();
}

// cuStreamWaitValue blocks its stream until the value comes, as on a GPU, never the worker's
// loop: other calls are answered meanwhile, and a session that ends while the wait goes on
// still ends (found by fuzz target `api_reply`: the host backend ran the wait on the
// executor's thread when the legacy stream was idle).
TEST_F(ExecutorTest, AStreamWaitingForAValueNeverBlocksTheWorker) {
  Reply a = Alloc(4096);
  ASSERT_EQ(a.error, Err::kSuccess);
  api::ArgWriter w = StreamArg(0);
  w.Put<uint64_t>(a.pointer);
  w.Put<uint32_t>(7);                          // a value nobody writes
  w.Put<uint32_t>(CU_STREAM_WAIT_VALUE_EQ);
  Api(::remora::gen::cuda::k_cuStreamWaitValue32_v2, w, /*expects_reply=*/false);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Ping().error, Err::kSuccess);
  EXPECT_EQ(Alloc(4096).error, Err::kSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(StreamQuery(0).error, Err::kNotReady) << "the legacy stream waits for the value";
  Status st = EndBy(/*goodbye=*/true);
  EXPECT_TRUE(st.ok()) << st.ToString();
  executor_.reset();
  EXPECT_EQ(Used(), 0u);
}

// However the session ends, everything it held goes back: ledger charges, device memory
// (the emulated GPU is empty again), streams and events.
TEST_F(ExecutorTest, EverythingIsReleasedWhenTheSessionEnds) {
  for (bool goodbye : {true, false}) {
    SCOPED_TRACE(goodbye ? "goodbye" : "client vanished");
    if (!goodbye) {
      TearDown();
      SetUp();
    }
    for (uint64_t size : {4096u, 1u << 20, 3u << 20}) ASSERT_EQ(Alloc(size).error, Err::kSuccess);
    ASSERT_EQ(StreamCreate().error, Err::kSuccess);
    ASSERT_EQ(EventCreate(0).error, Err::kSuccess);
    ASSERT_EQ(StreamSync(2).error, Err::kSuccess);
    EXPECT_EQ(Used(), 4096u + (1u << 20) + (3u << 20));
    // Stream-ordered memory freed back into the device's pool stays charged while the pool
    // may keep it (nothing reconciles it before the end here): it goes with the session's
    // pools (found by fuzz target `request`).
    Reply async = Call([](auto r) { r.initMallocAsync().setSize(2u << 20); });
    ASSERT_EQ(async.error, Err::kSuccess) << async.message;
    ASSERT_EQ(Call([&](auto r) { r.initFreeAsync().setPtr(async.pointer); }).error, Err::kSuccess);
    Status st = EndBy(goodbye);
    EXPECT_EQ(st.code(), goodbye ? Err::kSuccess : Err::kDevicesUnavailable);
    executor_.reset();  // the worker tears the session down
    EXPECT_EQ(Used(), 0u);
    EXPECT_EQ(ledger_->Tenant(tenant_, 0).used, 0u);
    ExpectGpu0Empty("device memory left allocated");
  }
}

// Requests queued before the executor starts, so that it takes them in one batch.
class ExecutorBatchTest : public ExecutorTest {
 protected:
  ExecutorBatchTest() { auto_start_ = false; }
};

// After the session ends, every allocation is back in the ledger and the driver - also
// one whose cudaFree was still waiting when the session ended (here: a free immediately
// followed by goodbye in one batch; in production: a client that dies while its cudaFree
// waits for a busy GPU). The free is a pending op (it waits for the session's streams) and
// the allocation leaves the allocation table at once: the session's end must still run it.
TEST_F(ExecutorBatchTest, FreeFollowedByGoodbyeIsReleased) {
  // The emulated driver hands out addresses deterministically: learn the first one from a
  // fresh instance, so the free can be queued before the allocation is answered.
  HostDriverOptions o;
  o.memory_per_gpu = kGpuMemory;
  auto probe = MakeHostDriver(o);
  ASSERT_TRUE(probe->SetDevice(0).ok());
  auto predicted = probe->MemAlloc(1 << 20);
  ASSERT_TRUE(predicted.ok());
  uint64_t alloc_tag = Send([](auto r) { r.initMemAlloc().setSize(1 << 20); });
  uint64_t free_tag = Send([&](auto r) { r.initMemFree().setPtr(*predicted); });
  Send([](auto r) { r.setGoodbye(); }, {}, /*expects_reply=*/false);
  Start();
  auto a = Receive();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->tag, alloc_tag);
  ASSERT_EQ(a->pointer, *predicted) << "the emulated driver's first address changed; the test needs updating";
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  (void)free_tag;
  executor_.reset();
  EXPECT_EQ(Used(), 0u) << "the freed allocation is still charged to the tenant";
  ExpectGpu0Empty("the freed allocation's device memory was leaked");
}

// Control for the test above: the same batch without the free is fully released (so a
// failure above is about the pending free alone).
TEST_F(ExecutorBatchTest, AllocFollowedByGoodbyeIsReleased) {
  uint64_t alloc_tag = Send([](auto r) { r.initMemAlloc().setSize(1 << 20); });
  Send([](auto r) { r.setGoodbye(); }, {}, /*expects_reply=*/false);
  Start();
  auto a = Receive();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->tag, alloc_tag);
  thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  executor_.reset();
  EXPECT_EQ(Used(), 0u);
  ExpectGpu0Empty();
}


// Generated calls that create a handle (out(handle=K) in protocol/api/*.api) check the
// session's limit for K before they call the library (tools/gen/apigen/roles.py emits
// HandleRoom), as the hooks of stream and event creation do (worker/hooks/stream_hooks.cc).
class HandleLimitTest : public ExecutorTest {
 protected:
  HandleLimitTest() {
    auto_start_ = false;  // the test thread owns the session: nothing else runs
    EXPECT_TRUE(limits_.Set("streams=2").ok());
    EXPECT_TRUE(limits_.Set("events=1").ok());
  }
  Status Room(HandleKind kind) {
    capnp::MallocMessageBuilder m;
    auto req = m.initRoot<wire::Request>();
    OpContext x(*executor_, req.asReader(), api::ArgReader(nullptr, 0), nullptr);
    return x.HandleRoom(kind);
  }
};

TEST_F(HandleLimitTest, GeneratedConstructorsStopAtTheSessionLimit) {
  ASSERT_TRUE(driver_->SetDevice(0).ok());
  EXPECT_TRUE(Room(HandleKind::kStream).ok());
  EXPECT_TRUE(Room(HandleKind::kEvent).ok());
  auto s = driver_->StreamCreate(0, 0);
  ASSERT_TRUE(s.ok());
  executor_->session().streams().Insert({*s, 0, 0});
  EXPECT_TRUE(Room(HandleKind::kStream).ok()) << "one of two streams held";
  auto e = driver_->EventCreate(0);
  ASSERT_TRUE(e.ok());
  executor_->session().events().Insert({*e, 0, 0});
  Status ev = Room(HandleKind::kEvent);
  EXPECT_EQ(ev.code(), Err::kMemoryAllocation) << ev.ToString();
  EXPECT_NE(ev.message().find("--session-limit events="), std::string::npos) << ev.message();
  auto s2 = driver_->StreamCreate(0, 0);
  ASSERT_TRUE(s2.ok());
  executor_->session().streams().Insert({*s2, 0, 0});
  Status st = Room(HandleKind::kStream);
  EXPECT_EQ(st.code(), Err::kMemoryAllocation) << st.ToString();
  EXPECT_TRUE(Room(HandleKind::kPool).ok()) << "pools are counted where they are created";
}


// Streams, events and pools made through the generated calls stop at the session's limits,
// with the limit named; what a session cannot destroy is refused, losing nothing.
class CoreObjectLimitTest : public ExecutorTest {
 protected:
  CoreObjectLimitTest() {
    gpus_ = 2;
    EXPECT_TRUE(limits_.Set("streams=2").ok());
    EXPECT_TRUE(limits_.Set("events=1").ok());
    EXPECT_TRUE(limits_.Set("pools=1").ok());
  }
  Reply PoolCreate(int device) {
    api::ArgWriter w;
    w.Put<int32_t>(device);
    w.Put<size_t>(0);
    w.Put<unsigned>(0);
    return WithHandle(Api(::remora::gen::cuda::k_remoraMemPoolCreate, w));
  }
  Reply PoolDestroy(uint64_t pool) { return Api(::remora::gen::cuda::k_cuMemPoolDestroy, HandleArg(pool)); }
  Reply PeerAccess(int device, int peer, unsigned enable) {
    api::ArgWriter w;
    w.Put<int32_t>(device);
    w.Put<int32_t>(peer);
    w.Put<unsigned>(enable);
    return Api(::remora::gen::cuda::k_remoraPeerAccess, w);
  }
};

TEST_F(CoreObjectLimitTest, CreationStopsAtTheLimitsAndNamesThem) {
  EXPECT_EQ(StreamCreate(0).error, Err::kSuccess);
  Reply second = StreamCreate(1);
  ASSERT_EQ(second.error, Err::kSuccess);
  Reply third = StreamCreate(0);
  EXPECT_EQ(third.error, Err::kMemoryAllocation);
  EXPECT_NE(third.message.find("--session-limit streams="), std::string::npos) << third.message;
  EXPECT_EQ(StreamDestroy(second.handle).error, Err::kSuccess);
  EXPECT_EQ(StreamCreate(0).error, Err::kSuccess) << "a destroyed stream makes room";

  Reply event = EventCreate(0);
  ASSERT_EQ(event.error, Err::kSuccess);
  Reply more = EventCreate(0);
  EXPECT_EQ(more.error, Err::kMemoryAllocation);
  EXPECT_NE(more.message.find("--session-limit events="), std::string::npos) << more.message;

  Reply pool = PoolCreate(1);
  ASSERT_EQ(pool.error, Err::kSuccess) << pool.message;
  Reply pool2 = PoolCreate(0);
  EXPECT_EQ(pool2.error, Err::kMemoryAllocation);
  EXPECT_NE(pool2.message.find("--session-limit pools="), std::string::npos) << pool2.message;
  // A device's default pool is the device's, not the session's to destroy.
  api::ArgWriter dev0;
  dev0.Put<int32_t>(0);
  Reply def = WithHandle(Api(::remora::gen::cuda::k_cuDeviceGetDefaultMemPool, dev0));
  ASSERT_EQ(def.error, Err::kSuccess) << def.message;
  EXPECT_EQ(PoolDestroy(def.handle).error, Err::kInvalidValue);
  EXPECT_EQ(PoolDestroy(pool.handle).error, Err::kSuccess);
  EXPECT_EQ(PoolDestroy(pool.handle).error, Err::kInvalidValue) << "destroyed once";
  EXPECT_EQ(PoolCreate(0).error, Err::kSuccess) << "a destroyed pool makes room";
}

TEST_F(CoreObjectLimitTest, PeerCopiesCheckEachPointerAgainstItsDevice) {
  Reply a = Alloc(4096);
  Reply b = Call([](auto r) {
    r.setDevice(1);
    r.initMemAlloc().setSize(4096);
  });
  Reply c = Alloc(4096);
  ASSERT_EQ(b.error, Err::kSuccess) << b.message;
  auto data = test::RandomBytes(4096, 9);
  ASSERT_EQ(HtoD(a.pointer, data).error, Err::kSuccess);
  auto peer = [&](uint64_t dst, int dst_device, uint64_t src, int src_device) {
    api::ArgWriter w = StreamArg(0);
    w.Put<uint64_t>(dst);
    w.Put<int32_t>(dst_device);
    w.Put<uint64_t>(src);
    w.Put<int32_t>(src_device);
    w.Put<size_t>(4096);
    return Api(::remora::gen::cuda::k_remoraMemcpyPeerAsync, w);
  };
  EXPECT_EQ(peer(b.pointer, 1, a.pointer, 0).error, Err::kSuccess);
  EXPECT_EQ(peer(c.pointer, 0, b.pointer, 1).error, Err::kSuccess);
  EXPECT_EQ(DtoH(c.pointer, 4096).bulk, data) << "0 -> 1 -> 0";
  EXPECT_EQ(peer(b.pointer, 0, a.pointer, 0).error, Err::kInvalidValue) << "device 1's memory named as device 0's";
  EXPECT_EQ(peer(b.pointer + 4000, 1, a.pointer, 0).error, Err::kInvalidValue) << "past the allocation";
}

TEST_F(CoreObjectLimitTest, PeerAccessIsEnabledOnceAndNeverToItself) {
  EXPECT_EQ(PeerAccess(0, 1, 1).error, Err::kSuccess);
  EXPECT_EQ(PeerAccess(0, 1, 1).error, Err::kPeerAccessAlreadyEnabled);
  EXPECT_EQ(PeerAccess(1, 1, 1).error, Err::kInvalidDevice);
  EXPECT_EQ(PeerAccess(0, 1, 0).error, Err::kSuccess);
  EXPECT_EQ(PeerAccess(0, 1, 0).error, Err::kPeerAccessNotEnabled);
  EXPECT_EQ(PeerAccess(0, 7, 1).error, Err::kInvalidDevice) << "not a device of the session";
}

}  // namespace
}  // namespace remora::worker::unit

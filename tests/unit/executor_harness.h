// Shared fixture of the executor tests: the worker's Executor on the host-emulated driver
// over the in-process pipe transport, with a ledger (one tenant, one session slot). The
// test is the requester: it encodes wire::Request messages itself and decodes the
// wire::Reply answers.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "remora.capnp.h"
#include "remora/memmgr/ledger.h"
#include "cuda_wire.h"
#include "remora/protocol/api_args.h"
#include "remora/protocol/message.h"
#include "remora/protocol/transport.h"
#include "test_util.h"
#include "worker/backend/driver.h"
#include "worker/session/executor.h"

namespace remora::worker::unit {

inline constexpr uint64_t kGpuMemory = 1ull << 30;
inline constexpr int kReplyTimeoutMs = 10000;

// A decoded reply.
struct Reply {
  uint64_t tag = 0;
  Err error = Err::kSuccess;
  uint16_t error_domain = 0;  // remora::Domain of `error` (a library's own status otherwise)
  std::string message;
  Err async_error = Err::kSuccess;
  std::string async_message;  // the failure of earlier posted work the reply carries
  uint64_t generation = 0;
  wire::Reply::Which which = wire::Reply::NONE;
  uint64_t pointer = 0, handle = 0;
  float elapsed_ms = -1;
  uint64_t mem_free = 0, mem_total = 0;
  struct Device {
    std::string name;
    uint64_t total_memory = 0, physical_memory = 0;
    bool emulated = false;
  };
  std::vector<Device> devices;
  std::vector<std::byte> bulk;
  std::vector<std::byte> api_result;  // a generated call's results
};

using Fill = std::function<void(wire::Request::Builder)>;

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ledger_mem_ = ::mmap(nullptr, LedgerRegionBytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(ledger_mem_, MAP_FAILED);
    auto l = Ledger::Create(ledger_mem_, LedgerRegionBytes());
    ASSERT_TRUE(l.ok());
    ledger_.emplace(*l);
    tenant_ = *ledger_->AddTenant("t");
    slot_ = *ledger_->OpenSession(tenant_, 1);
    HostDriverOptions o;
    o.gpus = gpus_;
    o.memory_per_gpu = kGpuMemory;
    driver_ = MakeHostDriver(o);
    auto [r, x] = MakePipeConnectionPair();
    requester_ = std::move(r);
    exec_conn_ = wrap_connection_ ? wrap_connection_(std::move(x)) : std::move(x);
    SessionConfig config;
    config.session_id = 1;
    config.tenant = "t";
    for (int g = 0; g < gpus_; g++) config.gpus.push_back(g);
    config.ledger = &*ledger_;
    config.ledger_slot = slot_;
    config.limits = limits_;
    if (wrap_driver_) wrapped_driver_ = wrap_driver_(*driver_);
    Driver& driver = wrapped_driver_ ? *wrapped_driver_ : *driver_;
    executor_ = std::make_unique<Executor>(*exec_conn_, driver, staging_, config, control_source_);
    if (auto_start_) Start();
  }

  void Start() {
    run_done_ = false;
    thread_ = std::thread([this] {
      run_status_ = executor_->Run();
      run_done_ = true;
    });
  }

  void TearDown() override {
    if (thread_.joinable()) {
      requester_.reset();  // the client leaves: Run returns
      thread_.join();
    }
    executor_.reset();
    wrapped_driver_.reset();
    if (ledger_mem_ != MAP_FAILED) ::munmap(ledger_mem_, LedgerRegionBytes());
    ledger_mem_ = MAP_FAILED;
  }

  // Ends the session from the client side and waits for Run.
  Status EndBy(bool goodbye) {
    if (goodbye) {
      Send([](wire::Request::Builder r) { r.setGoodbye(); }, {}, false);
    } else {
      requester_.reset();
    }
    thread_.join();
    return run_status_;
  }

  uint64_t Send(const Fill& fill, ConstBytes bulk = {}, bool expects_reply = true) {
    ScratchMessage msg;
    auto req = msg.InitRoot<wire::Request>();
    req.setDevice(0);
    req.setThread(1);
    fill(req);
    return SendBody(msg.Flatten(), bulk, expects_reply);
  }

  uint64_t SendBody(std::span<const uint64_t> body, ConstBytes bulk = {}, bool expects_reply = true) {
    OutFrame f;
    f.kind = FrameKind::kRequest;
    f.flags = expects_reply ? kFlagExpectsReply : 0;
    f.tag = ++tag_;
    f.body = body;
    Status st = requester_->Send(f, bulk);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return f.tag;
  }

  Result<Reply> Receive() {
    ASSIGN_OR_RETURN(InFrame f, requester_->Receive(kReplyTimeoutMs));
    if (f.kind() != FrameKind::kReply) return Error(Err::kUnknown, "frame of kind {}", f.header.kind);
    Reply out;
    out.tag = f.header.tag;
    Status st = GuardDecode("reply", [&]() -> Status {
      BodyReader r(f.body);
      auto m = r.Root<wire::Reply>();
      out.error = static_cast<Err>(m.getError());
      out.error_domain = m.getErrorDomain();
      out.message = m.getMessage().cStr();
      out.async_error = static_cast<Err>(m.getAsyncError());
      out.async_message = m.getAsyncMessage().cStr();
      out.generation = m.getDeviceGeneration();
      out.which = m.which();
      switch (m.which()) {
        case wire::Reply::POINTER: out.pointer = m.getPointer(); break;
        case wire::Reply::HANDLE: out.handle = m.getHandle(); break;
        case wire::Reply::ELAPSED_MS: out.elapsed_ms = m.getElapsedMs(); break;
        case wire::Reply::MEM_INFO:
          out.mem_free = m.getMemInfo().getFree();
          out.mem_total = m.getMemInfo().getTotal();
          break;
        case wire::Reply::API_RESULT:
          out.api_result.assign(reinterpret_cast<const std::byte*>(m.getApiResult().begin()),
                                reinterpret_cast<const std::byte*>(m.getApiResult().end()));
          break;
        case wire::Reply::DEVICES:
          for (auto d : m.getDevices())
            out.devices.push_back({d.getName().cStr(), d.getTotalMemory(), d.getPhysicalMemory(), d.getEmulated()});
          break;
        default: break;
      }
      return Status::Ok();
    });
    RETURN_IF_ERROR(st);
    if (f.header.bulk_bytes > 0) {
      out.bulk.resize(f.header.bulk_bytes);
      RETURN_IF_ERROR(requester_->ReceiveBulk(out.bulk));
    }
    return out;
  }

  // Sends a request and waits for its reply.
  Reply Call(const Fill& fill, ConstBytes bulk = {}) {
    uint64_t tag = Send(fill, bulk);
    auto r = Receive();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) {
      Reply failed;
      failed.error = Err::kUnknown;
      failed.message = r.status().ToString();
      return failed;
    }
    EXPECT_EQ(r->tag, tag) << "reply out of order";
    return std::move(*r);
  }

  // ---- request builders -------------------------------------------------------------
  Reply Alloc(uint64_t size) { return Call([&](auto r) { r.initMemAlloc().setSize(size); }); }
  Reply Free(uint64_t ptr) { return Call([&](auto r) { r.initMemFree().setPtr(ptr); }); }
  Reply HtoD(uint64_t dst, ConstBytes data, uint64_t stream = 0) {
    return Call([&](auto r) {
      auto m = r.initMemcpyHtoD();
      m.setDst(dst);
      m.setSize(data.size());
      m.initStream().setHandle(stream);
    }, data);
  }
  Reply DtoH(uint64_t src, uint64_t size, uint64_t stream = 0) {
    return Call([&](auto r) {
      auto m = r.initMemcpyDtoH();
      m.setSrc(src);
      m.setSize(size);
      m.initStream().setHandle(stream);
    });
  }
  Reply Ping() { return Call([](auto r) { r.setPing(); }); }

  // Generated calls of the driver API (protocol/api/cuda.api), encoded as the shim does.
  Reply Api(::remora::gen::cuda::Fn fn, const api::ArgWriter& args, bool expects_reply = true, int device = 0) {
    auto fill = [&](wire::Request::Builder r) {
      r.setDevice(device);
      auto a = r.initApiCall();
      a.setLibrary(::remora::gen::cuda::kLibrary);
      a.setFunction(fn);
      a.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(args.bytes().data()), args.bytes().size()));
    };
    if (!expects_reply) {
      Send(fill, {}, false);
      return Reply{};
    }
    return Call(fill);
  }
  static api::ArgWriter StreamArg(uint64_t stream, bool per_thread = false) {
    api::ArgWriter w;
    w.Put<uint64_t>(stream);
    w.Put<uint8_t>(per_thread);
    return w;
  }
  static api::ArgWriter HandleArg(uint64_t h) {
    api::ArgWriter w;
    w.Put<uint64_t>(h);
    return w;
  }
  // handle is filled from the results.
  Reply StreamCreate(unsigned flags = 0, int priority = 0, int device = 0) {
    api::ArgWriter w;
    w.Put<unsigned>(flags);
    w.Put<int>(priority);
    return WithHandle(Api(::remora::gen::cuda::k_cuStreamCreateWithPriority, w, true, device));
  }
  Reply StreamDestroy(uint64_t s) { return Api(::remora::gen::cuda::k_cuStreamDestroy_v2, StreamArg(s)); }
  Reply EventCreate(unsigned flags = 0) {
    api::ArgWriter w;
    w.Put<unsigned>(flags);
    return WithHandle(Api(::remora::gen::cuda::k_cuEventCreate, w));
  }
  Reply EventDestroy(uint64_t ev) { return Api(::remora::gen::cuda::k_cuEventDestroy_v2, HandleArg(ev)); }
  static Reply WithHandle(Reply r) {
    if (r.error == Err::kSuccess && r.api_result.size() == sizeof(uint64_t)) std::memcpy(&r.handle, r.api_result.data(), sizeof(uint64_t));
    return r;
  }
  Reply StreamSync(uint64_t s) { return Api(::remora::gen::cuda::k_cuStreamSynchronize, StreamArg(s)); }
  Reply StreamQuery(uint64_t s) { return Api(::remora::gen::cuda::k_cuStreamQuery, StreamArg(s)); }
  Reply EventRecord(uint64_t ev, uint64_t stream) {
    api::ArgWriter w = HandleArg(ev);
    w.Put<uint64_t>(stream);
    w.Put<uint8_t>(0);
    return Api(::remora::gen::cuda::k_cuEventRecord, w);
  }
  Reply EventQuery(uint64_t ev) { return Api(::remora::gen::cuda::k_cuEventQuery, HandleArg(ev)); }
  Reply EventSync(uint64_t ev) { return Api(::remora::gen::cuda::k_cuEventSynchronize, HandleArg(ev)); }
  // elapsed_ms is filled from the results.
  Reply EventElapsed(uint64_t start, uint64_t end) {
    api::ArgWriter w = HandleArg(start);
    w.Put<uint64_t>(end);
    Reply r = Api(::remora::gen::cuda::k_cuEventElapsedTime_v2, w);
    if (r.api_result.size() == sizeof(float)) std::memcpy(&r.elapsed_ms, r.api_result.data(), sizeof(float));
    return r;
  }
  Reply StreamWaitEvent(uint64_t stream, uint64_t ev) {
    api::ArgWriter w = StreamArg(stream);
    w.Put<uint64_t>(ev);
    w.Put<unsigned>(0);
    return Api(::remora::gen::cuda::k_cuStreamWaitEvent, w);
  }
  uint64_t Used() { return ledger_->SessionUsed(slot_, 0); }
  // The emulated GPU 0 has nothing allocated (the driver's own count, not the ledger's).
  void ExpectGpu0Empty(const char* what = "device memory left allocated") {
    ASSERT_TRUE(driver_->SetDevice(0).ok());
    auto mem = driver_->MemGetInfo();
    ASSERT_TRUE(mem.ok()) << mem.status().ToString();
    EXPECT_EQ(mem->free, mem->total) << what;
  }

  void* ledger_mem_ = MAP_FAILED;
  std::optional<Ledger> ledger_;
  uint32_t tenant_ = 0, slot_ = 0;
  std::unique_ptr<Driver> driver_;
  test::AlignedStaging staging_;
  std::unique_ptr<Connection> exec_conn_;
  std::unique_ptr<Connection> requester_;
  std::unique_ptr<Executor> executor_;
  std::thread thread_;
  Status run_status_;
  std::atomic<bool> run_done_{false};
  uint64_t tag_ = 0;
  bool auto_start_ = true;
  SessionLimits limits_;  // a derived fixture may lower them in its constructor
  int gpus_ = 1;          // emulated GPUs, all the session's (a derived fixture's constructor)
  ControlSource* control_source_ = nullptr;  // the supervisor's events (none by default)
  // A derived fixture may put the executor's end of the connection behind a wrapper of its
  // own (a fault to inject), set in its constructor.
  std::function<std::unique_ptr<Connection>(std::unique_ptr<Connection>)> wrap_connection_;
  // Likewise the executor's driver (a DriverWrapper around the host-emulated one, driver_).
  std::function<std::unique_ptr<Driver>(Driver&)> wrap_driver_;
  std::unique_ptr<Driver> wrapped_driver_;
};

}  // namespace remora::worker::unit

// Fixture of the generated round-trip tests (build/generated/api/<lib>_roundtrip_test.cc,
// one test per entry of protocol/api/<lib>.api that travels): the real client stubs and
// shim runtime on one side, a real Executor on the host-emulated backend on the other,
// joined by the in-process pipe transport. The worker's table of the library is a
// recording implementation (generated beside the tests): it keeps the arguments it
// received and answers with FillPattern bytes, so a test sees exactly what crossed the wire
// in each direction.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "remora.capnp.h"
#include "cuda_client.h"
#include "remora/protocol/transport.h"
#include "runtime.h"
#include "test_util.h"
#include "worker/driver_wrapper.h"
#include "worker/executor.h"

namespace remora::test {

// The bytes a recording table received, per recorded argument, for one call.
class Recording {
 public:
  void Start(const char* name) {
    name_ = name;
    args_.clear();
  }
  void Add(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    args_.emplace_back(b, b + (p ? n : 0));
  }
  const std::string& name() const { return name_; }
  const std::vector<std::vector<std::byte>>& args() const { return args_; }

 private:
  std::string name_;
  std::vector<std::vector<std::byte>> args_;
};

inline std::byte PatternByte(size_t i, int seed) { return static_cast<std::byte>(0x5a + 7 * i + 31 * static_cast<size_t>(seed)); }
inline void FillPattern(void* p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) static_cast<std::byte*>(p)[i] = PatternByte(i, seed);
}
inline bool IsPattern(const void* p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++)
    if (static_cast<const std::byte*>(p)[i] != PatternByte(i, seed)) return false;
  return true;
}

// A value of T for argument `seed`: pattern bytes, except for the types whose content the
// worker checks (device ordinals inside locations), which name device 0.
template <typename T>
T Sample(int seed) {
  T v;
  FillPattern(&v, sizeof(v), seed);
  return v;
}
template <>
inline CUmemLocation Sample<CUmemLocation>(int) {
  CUmemLocation l{};
  l.type = CU_MEM_LOCATION_TYPE_DEVICE;
  l.id = 0;
  return l;
}
template <>
inline CUmemAccessDesc Sample<CUmemAccessDesc>(int seed) {
  CUmemAccessDesc d{};
  d.location = Sample<CUmemLocation>(seed);
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}
template <>
inline CUmemAllocationProp Sample<CUmemAllocationProp>(int seed) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location = Sample<CUmemLocation>(seed);
  p.allocFlags.compressionType = static_cast<unsigned char>(seed & 1);
  return p;
}

// One in-process worker for the whole test binary, serving the library table `Api`.
template <typename Api>
class RoundTripTest : public ::testing::Test {
 protected:
  struct Server {
    Api api;
    std::unique_ptr<worker::Driver> host;
    std::unique_ptr<worker::DriverWrapper> driver;
    AlignedStaging staging;
    std::unique_ptr<Connection> exec_conn;
    std::unique_ptr<worker::Executor> executor;
    std::thread thread;
  };
  // A driver that is the host backend except for the library table under test.
  class RecordingDriver final : public worker::DriverWrapper {
   public:
    RecordingDriver(worker::Driver& host, Api& api) : DriverWrapper(host), api_(api) {}
    worker::gen::cuda::Api& cuda() override { return api_; }

   private:
    Api& api_;
  };

  static Server& server() {
    static Server* s = [] {
      auto* srv = new Server;  // lives for the process: the shim's session refers to it
      worker::HostDriverOptions o;
      o.gpus = 1;
      o.memory_per_gpu = 1ull << 30;
      srv->host = worker::MakeHostDriver(o);
      srv->driver = std::make_unique<RecordingDriver>(*srv->host, srv->api);
      auto [requester, executor_side] = MakePipeConnectionPair();
      srv->exec_conn = std::move(executor_side);
      worker::SessionConfig config;
      config.session_id = 1;
      config.tenant = "roundtrip";
      config.gpus = {0};
      srv->executor = std::make_unique<worker::Executor>(*srv->exec_conn, *srv->driver, srv->staging, config);
      srv->thread = std::thread([srv] { (void)srv->executor->Run(); });
      srv->thread.detach();
      SessionInfo info;
      info.session_id = 1;
      info.tenant = "roundtrip";
      info.backend = "host-emulated";
      info.emulated = true;
      info.server_name = "in-process";
      info.driver_version = 13000;
      Status st = shim::Runtime::Get().Adopt(std::move(requester), info);
      if (!st.ok()) ADD_FAILURE() << st.ToString();
      return srv;
    }();
    return *s;
  }

  void SetUp() override { (void)server(); }
  Api& api() { return server().api; }

  // Arguments the worker resolves against the session's own tables.
  template <typename T>
  T Stream() {
    static cudaStream_t s = [] {
      cudaStream_t made = nullptr;
      EXPECT_EQ(cudaStreamCreate(&made), cudaSuccess);
      return made;
    }();
    return reinterpret_cast<T>(s);
  }
  template <typename T>
  T HandleStream() {
    return Stream<T>();
  }
  template <typename T>
  T HandleEvent() {
    static cudaEvent_t e = [] {
      cudaEvent_t made = nullptr;
      EXPECT_EQ(cudaEventCreate(&made), cudaSuccess);
      return made;
    }();
    return reinterpret_cast<T>(e);
  }
  template <typename T>
  T HandlePool() {
    CUmemoryPool pool = nullptr;
    Status st = gen::cuda::cuDeviceGetDefaultMemPool(shim::CallCtx{false, "fixture"}, &pool, 0);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return reinterpret_cast<T>(pool);
  }
  template <typename T>
  T DevPtr() {
    static void* p = [] {
      void* made = nullptr;
      EXPECT_EQ(cudaMalloc(&made, 1 << 20), cudaSuccess);
      return made;
    }();
    return (T)(reinterpret_cast<uintptr_t>(p));
  }
  // A call answered after every earlier one: posted calls have run once it returns.
  Status Drain() {
    ASSIGN_OR_RETURN(shim::Client * c, shim::Runtime::Get().Session());
    return c->Call(0, [](wire::Request::Builder& r) { r.setPing(); }, [](wire::Reply::Reader&) { return Status::Ok(); });
  }
};

}  // namespace remora::test

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
#include "worker/backend/driver_wrapper.h"
#include "worker/session/executor.h"

namespace remora::test {

// The calls a recording table received, each with the bytes of its recorded arguments.
class Recording {
 public:
  struct Call {
    std::string name;
    std::vector<std::vector<std::byte>> args;
  };
  void Start(const char* name) { calls_.push_back(Call{name, {}}); }
  void Add(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    calls_.back().args.emplace_back(b, b + (p ? n : 0));
  }
  void Clear() { calls_.clear(); }
  // The last call (a library's worker hooks may make more than the one under test).
  const std::string& name() const { return calls_.back().name; }
  const std::vector<std::vector<std::byte>>& args() const { return calls_.back().args; }
  // The last call of `name` since Clear(), or nullptr.
  size_t Count(const std::string& name) const {
    size_t n = 0;
    for (const Call& c : calls_) n += c.name == name;
    return n;
  }
  const Call* Last(const std::string& name) const {
    for (auto it = calls_.rbegin(); it != calls_.rend(); ++it)
      if (it->name == name) return &*it;
    return nullptr;
  }

 private:
  std::vector<Call> calls_;
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

// A device allocation of 1 MiB in the test binary's session, for the arguments of the calls
// that make a library's fixture objects outside a test body (Fresh<Kind>, emit_tests.py).
template <typename T>
T SharedDevPtr() {
  static void* p = [] {
    void* made = nullptr;
    EXPECT_EQ(cudaMalloc(&made, 1 << 20), cudaSuccess);
    return made;
  }();
  return (T)(reinterpret_cast<uintptr_t>(p));
}

// One in-process worker for the whole test binary, serving the library table `Api` (a
// recording implementation of `Base`, the table of library `kDomain`).
template <typename Api, typename Base = worker::gen::cuda::Api, Domain kDomain = Domain::kCuda>
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
    worker::gen::cuda::Api& cuda() override {
      if constexpr (kDomain == Domain::kCuda) return api_;
      else return target().cuda();
    }
    Result<void*> Library(Domain d) override {
      if constexpr (kDomain != Domain::kCuda) {
        if (d == kDomain) return static_cast<void*>(static_cast<Base*>(&api_));
      }
      return target().Library(d);
    }

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

  void SetUp() override {
    (void)server();
    // Whatever earlier tests left queued has run; this test's calls are recorded afresh.
    ASSERT_TRUE(Drain().ok());
    api().rec.Clear();
  }
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
  // A device array of device pointers (a batched call's operands): 64 copies of DevPtr().
  template <typename T>
  T DevPtrs() {
    static void* p = [this] {
      void* made = nullptr;
      EXPECT_EQ(cudaMalloc(&made, 64 * sizeof(void*)), cudaSuccess);
      std::vector<void*> ptrs(64, DevPtr<void*>());
      EXPECT_EQ(cudaMemcpy(made, ptrs.data(), 64 * sizeof(void*), cudaMemcpyHostToDevice), cudaSuccess);
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

// Fuzz target `request`: everything a client can send to its worker once the handshake is
// done - every member of wire::Request, the generated calls (apiCall: the flat argument
// encoding decoded by the generated dispatch, run on the host backend's emulated driver API)
// included. A real Executor on the host-emulated driver (two GPUs, a ledger with an 8 MiB limit
// per GPU) serves a script of request frames over an in-process transport
// (scripted_connection.h), then the client leaves. (Small sizes keep an input fast: what is
// tested is the logic, not how much memory moves.)
//
// Input: a profile byte, then frames until the input ends:
//   profile: bits 0-1 the transport the executor believes it serves (its inline bulk limit:
//            pipe, tcp, shm, tiny); bit 2 the second GPU was detached before the session
//   frame:   u8 flags (bit 0 the client waits for a reply; bit 1 a u16 frame kind follows,
//            else a request; bit 2 the bulk's bytes come from the input, else a pattern),
//            [u16 kind], u16 body length + body bytes (a wire::Request, zero-padded to
//            words), u32 bulk (low 20 bits its length; high 12 bits the chunk size it
//            arrives in: 0 = 1 MiB, else n * 257 bytes) [+ bulk bytes]
// Frames a transport would refuse (ValidateFrameHeader) are left out, as a transport does.
//
// Checks besides memory safety and the Connection contract (scripted_connection.h): once the
// session is over, the ledger holds nothing for it, the emulated GPUs have all their memory
// back and every staging buffer was returned.
#define XXH_INLINE_ALL
#include <cuda.h>  // enum values for the generated calls' seeds
#include <sys/mman.h>
#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "fuzz_input.h"
#include "fuzz_staging.h"
#include "remora.capnp.h"
#include "remora/memmgr/ledger.h"
#include "remora/protocol/api_args.h"
#include "remora/protocol/message.h"
#include "scripted_connection.h"
#include "worker/backend/driver.h"
#include "worker/session/executor.h"

namespace remora::fuzz {
namespace {

constexpr uint64_t kGpuMemory = 32ull << 20;
constexpr uint64_t kTenantLimit = 8ull << 20;
constexpr int kGpus = 2;
constexpr uint64_t kInlineLimits[4] = {~0ull, 0, 64 << 10, 4096};

struct World {
  std::unique_ptr<worker::Driver> driver;
  void* ledger_mem = nullptr;
  std::optional<Ledger> ledger;
  uint32_t tenant = 0;
  uint64_t sessions = 0;
  CountingStaging staging;

  World() {
    worker::HostDriverOptions o;
    o.gpus = kGpus;
    o.memory_per_gpu = kGpuMemory;
    driver = worker::MakeHostDriver(o);
    ledger_mem = ::mmap(nullptr, LedgerRegionBytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ledger_mem == MAP_FAILED) Finding("cannot map a ledger");
    ledger.emplace(*Ledger::Create(ledger_mem, LedgerRegionBytes()));
    tenant = *ledger->AddTenant("fuzz");
    for (uint32_t g = 0; g < kGpus; g++) (void)ledger->SetLimit(tenant, g, kTenantLimit);
  }
};

World& TheWorld() {
  static World* w = new World();  // lives for the process: the driver is reused by every input
  return *w;
}

// What bulk the input does not spell out holds: bytes that differ from offset to offset.
const std::vector<std::byte>& Pattern() {
  static const std::vector<std::byte> p = [] {
    std::vector<std::byte> v(1 << 20);
    for (size_t i = 0; i < v.size(); i++) v[i] = std::byte(static_cast<uint8_t>(i * 131 + (i >> 8)));
    return v;
  }();
  return p;
}

// REMORA_FUZZ_VERBOSE=1 prints the script of an input (to triage a finding).
void Describe(const ScriptedFrame& f) {
  std::string what = "undecodable";
  (void)GuardDecode("request", [&]() -> Status {
    BodyReader r(f.body);
    auto req = r.Root<wire::Request>();
    what = "request member " + std::to_string(static_cast<int>(req.which())) + " device " + std::to_string(req.getDevice());
    return Status::Ok();
  });
  std::fprintf(stderr, "frame tag %llu kind %u flags %u body %u words bulk %llu (chunks of %zu): %s\n",
               static_cast<unsigned long long>(f.header.tag), f.header.kind, f.header.flags, f.header.body_words,
               static_cast<unsigned long long>(f.header.bulk_bytes), f.chunk, what.c_str());
}

std::deque<ScriptedFrame> ParseScript(FuzzInput& in) {
  std::deque<ScriptedFrame> frames;
  uint64_t tag = 0;
  while (!in.empty() && frames.size() < 256) {
    uint8_t flags = in.Byte();
    ScriptedFrame f;
    f.header.kind = static_cast<uint16_t>(FrameKind::kRequest);
    if (flags & 2) f.header.kind = in.Take<uint16_t>();
    f.header.flags = (flags & 1) ? kFlagExpectsReply : 0;
    f.header.tag = ++tag;
    auto body = in.Bytes(in.Take<uint16_t>());
    f.body.assign((body.size() + 7) / 8, 0);
    if (!body.empty()) std::memcpy(f.body.data(), body.data(), body.size());
    f.header.body_words = static_cast<uint32_t>(f.body.size());
    uint32_t b = in.Take<uint32_t>();
    f.bulk = BulkBuffer(b & 0xFFFFF);
    f.chunk = (b >> 20) == 0 ? (1u << 20) : (b >> 20) * 257;
    size_t from_input = 0;
    if (flags & 4) {
      auto bytes = in.Bytes(f.bulk.size());
      if (!bytes.empty()) std::memcpy(f.bulk.data(), bytes.data(), bytes.size());
      from_input = bytes.size();
    }
    if (from_input < f.bulk.size())  // a fixed pattern (memcpy: no per-byte coverage hooks)
      std::memcpy(f.bulk.data() + from_input, Pattern().data() + from_input, f.bulk.size() - from_input);
    f.header.bulk_bytes = f.bulk.size();
    if (!ValidateFrameHeader(f.header).ok()) continue;
    if (std::getenv("REMORA_FUZZ_VERBOSE")) Describe(f);
    frames.push_back(std::move(f));
  }
  return frames;
}

void CheckNothingLeft(World& w, uint32_t slot) {
  for (uint32_t g = 0; g < kGpus; g++)
    if (uint64_t used = w.ledger->SessionUsed(slot, g); used != 0)
      Finding("the ledger still charges a finished session", "GPU " + std::to_string(g) + ": " + std::to_string(used));
  for (uint64_t held : w.ledger->CloseSession(slot))
    if (held != 0) Finding("closing a finished session released memory", std::to_string(held));
  // Memory freed under work still queued (a session's end releases its blocked streams and
  // frees everything) counts on its GPU until that work ran: a bounded wait for it.
  for (int g = 0; g < kGpus; g++) {
    if (!w.driver->SetDevice(g).ok()) Finding("SetDevice failed");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      auto info = w.driver->MemGetInfo();
      if (info.ok() && info->free == info->total) break;
      if (!info.ok() || std::chrono::steady_clock::now() > deadline)
        Finding("emulated device memory leaked by a finished session", "GPU " + std::to_string(g));
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (w.staging.live() != 0) Finding("staging buffers leaked", std::to_string(w.staging.live()));
}

// ---- seeds -------------------------------------------------------------------------------
constexpr uint64_t kDev0 = 0x200000000000ull;       // the first allocation on GPU 0
constexpr uint64_t kStream1 = 0x5100000000000010ull;  // first handles of their kinds
constexpr uint64_t kEvent1 = 0x5200000000000010ull;
constexpr uint64_t kEvent2 = 0x5200000000000020ull;
constexpr uint64_t kModule1 = 0x5300000000000010ull;
constexpr uint64_t kFunction1 = 0x5400000000000010ull;
constexpr uint64_t kPool1 = 0x5600000000000010ull;

class SeedSession {
 public:
  explicit SeedSession(uint8_t profile) { w_.Put(profile); }
  template <typename Fill>
  SeedSession& Req(Fill fill, bool reply = true, uint32_t bulk = 0, uint32_t chunk_sel = 0,
                   const std::vector<uint8_t>& bulk_bytes = {}) {
    ScratchMessage msg;
    auto r = msg.InitRoot<wire::Request>();
    r.setDevice(0);
    r.setThread(1);
    fill(r);
    auto body = msg.Flatten();
    w_.Put<uint8_t>(static_cast<uint8_t>((reply ? 1 : 0) | (bulk_bytes.empty() ? 0 : 4)));
    w_.Put<uint16_t>(static_cast<uint16_t>(body.size_bytes()));
    w_.Bytes(body.data(), body.size_bytes());
    w_.Put<uint32_t>((bulk & 0xFFFFF) | chunk_sel << 20);
    w_.Bytes(bulk_bytes.data(), bulk_bytes.size());
    return *this;
  }
  SeedSession& Alloc(uint64_t size) {
    return Req([&](wire::Request::Builder r) { r.initMemAlloc().setSize(size); });
  }
  // A generated call of the driver API (protocol/api/cuda.api: library 1, entry @function).
  SeedSession& Api(uint32_t function, const api::ArgWriter& args, bool reply = true) {
    return Req([&](wire::Request::Builder r) {
      auto c = r.initApiCall();
      c.setLibrary(1);
      c.setFunction(function);
      c.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(args.bytes().data()), args.bytes().size()));
    }, reply);
  }
  const std::vector<uint8_t>& bytes() const { return w_.bytes(); }

 private:
  SeedWriter w_;
};

std::vector<uint8_t> FakeFatbin() {
  std::vector<uint8_t> img(256, 0);
  uint32_t magic = 0xBA55ED50;
  std::memcpy(img.data(), &magic, 4);
  for (size_t i = 4; i < img.size(); i++) img[i] = static_cast<uint8_t>(i);
  return img;
}

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    auto add = [&](const std::string& name, const SeedSession& ss) { s.emplace_back(name, ss.bytes()); };
    using R = wire::Request::Builder;
    add("devices", SeedSession(0).Req([](R r) { r.setGetDevices(); }).Req([](R r) { r.setMemGetInfo(); }).Req([](R r) {
      r.setPing();
    }));
    for (uint8_t profile = 0; profile < 4; profile++) {
      add("copies-" + std::to_string(profile),
          SeedSession(profile)
              .Alloc(1 << 20)
              .Req([](R r) {
                auto m = r.initMemcpyHtoD();
                m.setDst(kDev0);
                m.setSize(100000);
              }, true, 100000, 3)
              .Req([](R r) {
                auto m = r.initMemcpyDtoH();
                m.setSrc(kDev0 + 64);
                m.setSize(70000);
              })
              .Req([](R r) {
                auto m = r.initMemcpyDtoD();
                m.setDst(kDev0 + 4096);
                m.setSrc(kDev0);
                m.setSize(4096);
                m.setAsync(true);
              }, false)
              .Req([](R r) {
                auto m = r.initMemset();
                m.setDst(kDev0);
                m.setValue(7);
                m.setSize(1 << 20);
              })
              .Req([](R r) { r.initMemFree().setPtr(kDev0); }));
    }
    add("streams-events",
        SeedSession(0)
            .Req([](R r) { r.initStreamCreate().setFlags(1); })
            .Req([](R r) { r.setEventCreate(0); })
            .Req([](R r) { r.setEventCreate(0); })
            .Req([](R r) {
              auto e = r.initEventRecord();
              e.setEvent(kEvent1);
              e.initStream().setHandle(kStream1);
            }, false)
            .Req([](R r) {
              auto w = r.initStreamWaitEvent();
              w.initStream().setHandle(0);
              w.setEvent(kEvent1);
            }, false)
            .Req([](R r) {
              auto e = r.initEventRecord();
              e.setEvent(kEvent2);
              e.initStream().setHandle(kStream1);
            }, false)
            .Req([](R r) { r.initStreamSynchronize().setHandle(kStream1); })
            .Req([](R r) { r.initStreamQuery().setHandle(2); })
            .Req([](R r) { r.setEventSynchronize(kEvent2); })
            .Req([](R r) { r.setEventQuery(kEvent1); })
            .Req([](R r) {
              auto p = r.initEventElapsedTime();
              p.setStart(kEvent1);
              p.setEnd(kEvent2);
            })
            .Req([](R r) { r.setDeviceSynchronize(); })
            .Req([](R r) { r.setEventDestroy(kEvent1); }, false)
            .Req([](R r) { r.initStreamDestroy().setHandle(kStream1); }, false)
            .Req([](R r) { r.setStreamPriorityRange(); })
            .Req([](R r) { r.setDeviceReset(); }));
    auto image = FakeFatbin();
    XXH128_hash_t h = XXH3_128bits(image.data(), image.size());
    uint8_t hash[16];
    XXH128_canonicalFromHash(reinterpret_cast<XXH128_canonical_t*>(hash), h);
    auto load = [&](bool with_image) {
      return [&, with_image](R r) {
        auto m = r.initModuleLoad();
        m.setHash(capnp::Data::Reader(hash, 16));
        m.setSize(image.size());
        m.setHasImage(with_image);
      };
    };
    add("modules",
        SeedSession(0)
            .Req(load(false))
            .Req(load(true), true, static_cast<uint32_t>(image.size()), 1, image)
            .Req([](R r) {
              auto f = r.initGetFunction();
              f.setModule(kModule1);
              f.setName("_Z6kernelPi");
            })
            .Req([](R r) {
              auto g = r.initGetGlobal();
              g.setModule(kModule1);
              g.setName("counter");
              g.setSize(64);
            })
            .Req([](R r) {
              auto l = r.initLaunchKernel();
              l.setFunction(kFunction1);
              l.initGrid().setX(4);
              l.initBlock().setX(128);
              uint8_t params[8] = {};
              l.setParams(capnp::Data::Reader(params, 8));
              auto attrs = l.initAttributes(1);
              attrs[0].setId(4);
              uint8_t v[64] = {2};
              attrs[0].setValue(capnp::Data::Reader(v, 64));
            }, false)
            .Req([](R r) { r.setFuncGetAttributes(kFunction1); })
            .Req([](R r) {
              auto a = r.initFuncSetAttribute();
              a.setFunction(kFunction1);
              a.setAttribute(8);
              a.setValue(65536);
            })
            .Req([](R r) {
              auto a = r.initFuncSetCacheConfig();
              a.setFunction(kFunction1);
              a.setValue(1);
            })
            .Req([](R r) {
              auto o = r.initOccupancy();
              o.setFunction(kFunction1);
              o.setBlockSize(256);
              o.setNumBlocks(4);
            }));
    add("copies-3d",
        SeedSession(0)
            .Req([](R r) {
              auto p = r.initMallocPitch();
              p.setWidth(1000);
              p.setHeight(16);
            })
            .Req([](R r) {
              auto c = r.initCopy3D();
              c.setDst(kDev0);
              c.setDstPitch(1024);
              c.setDstHeight(16);
              c.setSrcPitch(100);
              c.setSrcHeight(4);
              c.setWidth(100);
              c.setHeight(4);
              c.setDepth(2);
              c.setKind(wire::Copy3D::Kind::HOST_TO_DEVICE);
            }, true, 800, 0)
            .Req([](R r) {
              auto c = r.initCopy3D();
              c.setSrc(kDev0);
              c.setSrcPitch(1024);
              c.setSrcHeight(16);
              c.setDstPitch(100);
              c.setDstHeight(4);
              c.setWidth(100);
              c.setHeight(4);
              c.setDepth(2);
              c.setKind(wire::Copy3D::Kind::DEVICE_TO_HOST);
            })
            .Req([](R r) {
              auto m = r.initMemset3D();
              m.setDst(kDev0);
              m.setPitch(1024);
              m.setRowsPerSlice(16);
              m.setValue(1);
              m.setWidth(1000);
              m.setHeight(16);
              m.setDepth(1);
            }));
    add("pools",
        SeedSession(0)
            .Req([](R r) { r.setDefaultMemPool(); })
            .Req([](R r) {
              auto p = r.initPoolCreate();
              p.setDevice(0);
              p.setMaxSize(8 << 20);
            })
            .Req([](R r) { r.setSetMemPool(kPool1); })
            .Req([](R r) { r.setGetMemPool(); })
            .Req([](R r) {
              auto m = r.initMallocAsync();
              m.setSize(1 << 20);
              m.setPool(kPool1);
            })
            .Req([](R r) {
              auto a = r.initPoolSetAttribute();
              a.setPool(kPool1);
              a.setAttribute(4);
              a.setValue(1 << 20);
            })
            .Req([](R r) {
              auto a = r.initPoolGetAttribute();
              a.setPool(kPool1);
              a.setAttribute(5);
            })
            .Req([](R r) { r.initFreeAsync().setPtr(kDev0); }, false)
            .Req([](R r) {
              auto a = r.initPoolTrimTo();
              a.setPool(kPool1);
            })
            .Req([](R r) { r.setPoolDestroy(kPool1); }));
    add("peers-limits",
        SeedSession(0)
            .Alloc(4096)
            .Req([](R r) {
              r.setDevice(1);
              r.initMemAlloc().setSize(4096);
            })
            .Req([](R r) {
              auto p = r.initPeerAccess();
              p.setPeer(1);
              p.setOp(wire::PeerAccess::Op::ENABLE);
            })
            .Req([](R r) {
              auto p = r.initMemcpyPeer();
              p.setDst(kDev0 + (1ull << 40));
              p.setDstDevice(1);
              p.setSrc(kDev0);
              p.setSrcDevice(0);
              p.setSize(4096);
            })
            .Req([](R r) {
              auto l = r.initDeviceLimit();
              l.setLimit(2);
              l.setValue(1 << 20);
              l.setSet(true);
            })
            .Req([](R r) { r.initDeviceLimit().setLimit(2); }));
    add("host-callback",
        SeedSession(0)
            .Alloc(1 << 20)
            .Req([](R r) { r.initHostFunc().setId(7); }, false)
            .Req([](R r) {
              auto m = r.initMemcpyHtoD();
              m.setDst(kDev0);
              m.setSize(300000);
              m.setAsync(true);
            }, false, 300000, 5)
            .Req([](R r) { r.setCallbackDone(7); }, false)
            .Req([](R r) { r.initStreamSynchronize(); }));
    add("callback-never-done", SeedSession(0).Req([](R r) { r.initHostFunc().setId(9); }, false).Req([](R r) {
      r.setDeviceSynchronize();
    }));
    // Generated calls (wire::ApiCall), their arguments in the flat encoding of api_args.h:
    // a stream is its handle and a per-thread flag, a handle its id, a device its ordinal.
    auto args = [](auto&&... put) {
      api::ArgWriter w;
      (put(w), ...);
      return w;
    };
    auto stream = [](uint64_t h) { return [h](api::ArgWriter& w) { w.Put<uint64_t>(h); w.Put<uint8_t>(0); }; };
    auto u64 = [](uint64_t v) { return [v](api::ArgWriter& w) { w.Put(v); }; };
    auto u32 = [](uint32_t v) { return [v](api::ArgWriter& w) { w.Put(v); }; };
    auto i32 = [](int32_t v) { return [v](api::ArgWriter& w) { w.Put(v); }; };
    add("api-context",
        SeedSession(0)
            .Api(1, args())
            .Api(2, args(u32(CU_FUNC_CACHE_PREFER_L1)))
            .Api(7, args(u32(CU_LIMIT_STACK_SIZE)))
            .Api(8, args(u32(CU_LIMIT_PRINTF_FIFO_SIZE), u64(1 << 20)))
            .Api(9, args())
            .Api(21, args(i32(0), i32(1)))
            .Api(20, args(u32(CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED), i32(0), i32(1)))
            .Api(120, args())
            .Api(121, args()));
    add("api-streams-events",
        SeedSession(0)
            .Api(48, args(u32(0), i32(0)))
            .Api(65, args(u32(0)))
            .Api(65, args(u32(0)))
            .Api(60, args(u64(kEvent1), stream(kStream1)), false)
            .Api(42, args(stream(0), u64(kEvent1), u32(0)), false)
            .Api(61, args(u64(kEvent2), stream(0), u32(0)), false)
            .Api(40, args(stream(kStream1)))
            .Api(41, args(stream(kStream1)))
            .Api(43, args(stream(kStream1)))
            .Api(44, args(stream(kStream1), u32(CU_LAUNCH_ATTRIBUTE_PRIORITY)))
            .Api(46, args(stream(kStream1), stream(0)))
            .Api(62, args(u64(kEvent1)))
            .Api(63, args(u64(kEvent2)))
            .Api(64, args(u64(kEvent1), u64(kEvent2)))
            .Api(66, args(u64(kEvent2)), false)
            .Api(49, args(stream(kStream1)), false)
            .Api(65, args(u32(0x4)))
            .Api(48, args(u32(0x80), i32(0))));
    add("api-pools",
        SeedSession(0)
            .Api(80, args(i32(0)))
            .Api(81, args(i32(0)))
            .Api(82, args(i32(0), u64(kPool1)))
            .Api(83, args(u64(kPool1), u32(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), u64(1 << 20)))
            .Api(84, args(u64(kPool1), u32(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)))
            .Api(85, args(u64(kPool1), u64(0)))
            .Api(47, args(stream(0), u64(kDev0), u64(4096), u32(0)), false)
            .Api(91, args(i32(0), u64(8 << 20), u32(0)))
            .Api(92, args(u64(kPool1 + 0x10)))
            .Api(92, args(u64(kPool1))));
    add("over-quota",
        SeedSession(0).Alloc(6 << 20).Alloc(6 << 20).Api(167, args(u64(1 << 20), u64(64), u32(16))));
    add("api-pitch",
        SeedSession(0)
            .Api(167, args(u64(1000), u64(3), u32(16)))
            .Api(167, args(u64(1ull << 40), u64(1ull << 32), u32(4)))
            .Api(167, args(u64(64), u64(0), u32(8)))
            .Api(167, args(u64(64), u64(2), u32(3))));
    add("api-peers",
        SeedSession(0)
            .Alloc(4096)
            .Api(168, args(stream(0), u64(kDev0), i32(0), u64(kDev0 + 2048), i32(0), u64(1024)), false)
            .Api(168, args(stream(0), u64(kDev0), i32(1), u64(kDev0), i32(0), u64(4096)))
            .Api(25, args(i32(0), i32(1), u32(1)))
            .Api(25, args(i32(0), i32(1), u32(0)))
            .Api(25, args(i32(1), i32(1), u32(1))));
    add("goodbye", SeedSession(0).Alloc(4096).Req([](R r) { r.setGoodbye(); }));
    add("detached", SeedSession(4).Req([](R r) {
      r.setDevice(1);
      r.initMemAlloc().setSize(4096);
    }));
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora;
  fuzz::World& w = fuzz::TheWorld();
  fuzz::FuzzInput in(data, size);
  uint8_t profile = in.Byte();
  fuzz::ScriptedConnection conn(fuzz::ParseScript(in), fuzz::kInlineLimits[profile & 3]);
  auto slot = w.ledger->OpenSession(w.tenant, ++w.sessions);
  if (!slot.ok()) fuzz::Finding("no ledger slot", slot.status().ToString());
  worker::SessionConfig config;
  config.session_id = w.sessions;
  config.tenant = "fuzz";
  config.gpus = {0, (profile & 4) ? -1 : 1};
  config.ledger = &*w.ledger;
  config.ledger_slot = *slot;
  {
    worker::Executor ex(conn, *w.driver, w.staging, config);
    (void)ex.Run();
  }
  fuzz::CheckNothingLeft(w, *slot);
  return 0;
}

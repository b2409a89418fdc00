#include "migration.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "registry.h"
#include "runtime.h"
#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora::shim {
namespace {

constexpr int kQuiesceTimeoutMs = 10'000;  // calls in progress get this long to end
constexpr uint64_t kPiece = 16ull << 20;  // contents move in pieces of this size

// What the old server said the session holds (wire::Migration, copied out of its reply).
struct Held {
  struct Allocation {
    uint64_t ptr, size;
    int ordinal;
    bool stream_ordered;  // of cudaMallocAsync
  };
  struct Module {
    uint64_t handle;
    int ordinal;
    std::vector<uint8_t> hash;
    uint64_t size;
    std::vector<std::pair<uint64_t, std::string>> functions;
    const FatbinRecord* image = nullptr;
  };
  std::vector<Allocation> allocations;
  struct Object {
    uint64_t handle;
    int ordinal;
    unsigned flags;
    int priority;
  };
  std::vector<Object> streams, events;
  std::vector<Module> modules;
  struct Pool {  // a device's own pool: handle, device, settable attributes (id, value)
    uint64_t handle;
    int ordinal;
    std::vector<std::pair<int, uint64_t>> attributes;
  };
  std::vector<Pool> pools;
};

Status Export(Client& link, Held* held) {
  return link.CallLocal(0, [](wire::Request::Builder& r) { r.setMigrateExport(); }, [&](wire::Reply::Reader& r) -> Status {
    if (!r.isMigration()) return Error(Err::kUnknown, "malformed migration export");
    auto m = r.getMigration();
    for (auto a : m.getAllocations()) held->allocations.push_back({a.getPtr(), a.getSize(), a.getOrdinal(), a.getStreamOrdered()});
    for (auto x : m.getStreams()) held->streams.push_back({x.getHandle(), x.getOrdinal(), x.getFlags(), x.getPriority()});
    for (auto x : m.getEvents()) held->events.push_back({x.getHandle(), x.getOrdinal(), x.getFlags(), x.getPriority()});
    for (auto x : m.getPools()) {
      Held::Pool pool{x.getHandle(), x.getOrdinal(), {}};
      for (auto a : x.getAttributes()) pool.attributes.emplace_back(a.getId(), a.getValue());
      held->pools.push_back(std::move(pool));
    }
    for (auto x : m.getModules()) {
      Held::Module mod{x.getHandle(), x.getOrdinal(), {x.getHash().begin(), x.getHash().end()}, x.getSize(), {}, nullptr};
      for (auto f : x.getFunctions()) mod.functions.emplace_back(f.getHandle(), f.getName());
      held->modules.push_back(std::move(mod));
    }
    return Status::Ok();
  });
}

Status Import(Client& target, const Held& held) {
  return target.CallLocal(0, [&](wire::Request::Builder& r) {
    auto m = r.initMigrateImport();
    auto al = m.initAllocations(static_cast<unsigned>(held.allocations.size()));
    for (unsigned i = 0; i < al.size(); i++) {
      al[i].setPtr(held.allocations[i].ptr);
      al[i].setSize(held.allocations[i].size);
      al[i].setOrdinal(held.allocations[i].ordinal);
      al[i].setStreamOrdered(held.allocations[i].stream_ordered);
    }
    auto objects = [](auto list, const std::vector<Held::Object>& from) {
      for (unsigned i = 0; i < list.size(); i++) {
        list[i].setHandle(from[i].handle);
        list[i].setOrdinal(from[i].ordinal);
        list[i].setFlags(from[i].flags);
        list[i].setPriority(from[i].priority);
      }
    };
    objects(m.initStreams(static_cast<unsigned>(held.streams.size())), held.streams);
    objects(m.initEvents(static_cast<unsigned>(held.events.size())), held.events);
    auto pools = m.initPools(static_cast<unsigned>(held.pools.size()));
    for (unsigned i = 0; i < pools.size(); i++) {
      pools[i].setHandle(held.pools[i].handle);
      pools[i].setOrdinal(held.pools[i].ordinal);
      auto al = pools[i].initAttributes(static_cast<unsigned>(held.pools[i].attributes.size()));
      for (unsigned j = 0; j < al.size(); j++) {
        al[j].setId(held.pools[i].attributes[j].first);
        al[j].setValue(held.pools[i].attributes[j].second);
      }
    }
  }, [](wire::Reply::Reader&) { return Status::Ok(); });
}

Status LoadModule(Client& target, const Held::Module& mod) {
  uint64_t loaded = 0;
  RETURN_IF_ERROR(target.CallLocal(mod.ordinal, [&](wire::Request::Builder& r) {
    auto m = r.initMigrateModule();
    m.setHandle(mod.handle);
    m.setOrdinal(mod.ordinal);
    m.setHash(capnp::Data::Reader(mod.hash.data(), mod.hash.size()));
    m.setSize(mod.size);
    auto fl = m.initFunctions(static_cast<unsigned>(mod.functions.size()));
    for (unsigned i = 0; i < fl.size(); i++) {
      fl[i].setHandle(mod.functions[i].first);
      fl[i].setName(mod.functions[i].second);
    }
  }, [&](wire::Reply::Reader& r) -> Status {
    if (r.isModule()) loaded = r.getModule().getHandle();
    return Status::Ok();
  }, AsBytes(mod.image->data, mod.image->size)));
  if (loaded != mod.handle) return Error(Err::kUnknown, "the new server loaded module 0x{:x} as 0x{:x}", mod.handle, loaded);
  return Status::Ok();
}

// Every device of the link has finished its work (nothing queued stays behind on the old
// server; host functions have run).
Status SynchroniseAll(Client& link) {
  int devices = 0;
  RETURN_IF_ERROR(link.CallLocal(0, [](wire::Request::Builder& r) { r.setGetDevices(); }, [&](wire::Reply::Reader& r) -> Status {
    if (!r.isDevices()) return Error(Err::kUnknown, "malformed device list");
    for (auto d : r.getDevices())
      if (d.getGpuId() != UINT32_MAX) devices = std::max(devices, d.getOrdinal() + 1);
    return Status::Ok();
  }));
  for (int d = 0; d < devices; d++)
    RETURN_IF_ERROR(link.CallLocal(d, [](wire::Request::Builder& r) { r.setDeviceSynchronize(); },
                                   [](wire::Reply::Reader&) { return Status::Ok(); }));
  return Status::Ok();
}

// The small-copy bounce buffer is shared with the old server only: given back (the next
// small copy shares a new one with the new server). kUnavailable-like failure if a copy
// holds it now.
Status DropBounce(Client& link) {
  Client::SharedBounce& b = link.shared_bounce();
  std::unique_lock<std::mutex> lock(b.mu, std::try_to_lock);
  if (!lock.owns_lock()) return Error(Err::kNotReady, "a small copy holds the bounce buffer");
  if (b.region != 0) {
    uint64_t region = b.region;
    RETURN_IF_ERROR(link.CallLocal(0, [&](wire::Request::Builder& r) { r.setUnregisterHostRegion(region); },
                                   [](wire::Reply::Reader&) { return Status::Ok(); }));
  }
  if (b.base != nullptr) ::munmap(b.base, b.size);
  b.base = nullptr;
  b.size = 0;
  b.region = 0;
  b.tried = false;
  return Status::Ok();
}

Status CopyContents(Client& from, Client& to, const Held& held) {
  std::unique_ptr<std::byte[]> buf(new std::byte[kPiece]);
  for (const Held::Allocation& a : held.allocations) {
    for (uint64_t at = 0; at < a.size; at += kPiece) {
      uint64_t len = std::min(kPiece, a.size - at);
      RETURN_IF_ERROR(from.CallLocal(a.ordinal, [&](wire::Request::Builder& r) {
        auto m = r.initMemcpyDtoH();
        m.setSrc(a.ptr + at);
        m.setSize(len);
        m.initStream();
        m.setClientAddr(reinterpret_cast<uint64_t>(buf.get()));
      }, [](wire::Reply::Reader&) { return Status::Ok(); }, {}, MutableBytes(buf.get(), len)));
      RETURN_IF_ERROR(to.CallLocal(a.ordinal, [&](wire::Request::Builder& r) {
        auto m = r.initMemcpyHtoD();
        m.setDst(a.ptr + at);
        m.setSize(len);
        m.initStream();
        m.setClientAddr(reinterpret_cast<uint64_t>(buf.get()));
      }, [](wire::Reply::Reader&) { return Status::Ok(); }, ConstBytes(buf.get(), len)));
    }
  }
  return Status::Ok();
}

// Host memory registered with the old connection (RDMA: one protection domain per
// connection) is registered with the new one, so that copies from and to it stay zero-copy.
// Pinned memory is registered for the session's first link only (api_pinned.cc). Best
// effort: a copy from memory not registered is staged. Returns how many ranges were.
size_t RegisterHostMemory(Client& link, Client& target) {
  const auto& links = Runtime::Get().links();
  if (links.empty() || links.front() != &link || !target.capabilities().registered_memory) return 0;
  size_t n = 0;
  for (const auto& [base, size] : Runtime::Get().RegisteredHostRanges()) {
    Status st = target.RegisterHostMemory(base, size);
    if (st.ok()) n++;
    else LOG_INFO("migration: {} of pinned memory at {} stays unregistered there: {}", FormatSize(size), base, st.ToString());
  }
  return n;
}

// One attempt; kNotReady: the application was busy, try again.
Status MoveOnce(Client& link, const Endpoint& endpoint, const ConnectOptions& options) {
  if (!link.Quiesce(kQuiesceTimeoutMs))
    return Error(Err::kNotReady, "calls in progress did not end within {} s", kQuiesceTimeoutMs / 1000);
  struct Resumer {
    Client& link;
    ~Resumer() { link.Resume(); }
  } resume{link};
  RETURN_IF_ERROR(link.broken());
  RETURN_IF_ERROR(SynchroniseAll(link));
  RETURN_IF_ERROR(DropBounce(link));
  Held held;
  RETURN_IF_ERROR(Export(link, &held));
  for (Held::Module& m : held.modules) {
    m.image = Registry::Get().ImageOfModule(m.handle);
    if (m.image == nullptr || m.image->size != m.size)
      return Error(Err::kNotReady, "the image of module 0x{:x} is not at hand now", m.handle);
  }
  auto conn = remora::Connect(endpoint, options);
  if (!conn.ok()) return conn.status();
  SessionInfo session = conn->session;
  Client target(std::move(conn->connection), session);  // its session ends with it, unless adopted
  RETURN_IF_ERROR(Import(target, held));
  for (const Held::Module& m : held.modules) RETURN_IF_ERROR(LoadModule(target, m));
  RETURN_IF_ERROR(CopyContents(link, target, held));
  size_t registered = RegisterHostMemory(link, target);
  uint64_t bytes = 0;
  for (const Held::Allocation& a : held.allocations) bytes += a.size;
  SessionInfo old_session = link.session();
  std::unique_ptr<Connection> swapped = target.TakeConnection();
  if (!link.SwapConnection(&swapped, session)) return Error(Err::kNotReady, "replies from the old server still awaited");
  // The old server frees what the session held there once it reads the goodbye.
  Client old(std::move(swapped), old_session);
  (void)old.PostLocal(0, [](wire::Request::Builder& r) { r.setGoodbye(); });
  (void)old.Flush();
  LOG_INFO("session {} moved to {} (session {} there): {} allocations ({}), {} streams, {} events, {} modules, "
           "{} pinned ranges registered",
           old_session.session_id, session.server_name, session.session_id, held.allocations.size(), FormatSize(bytes),
           held.streams.size(), held.events.size(), held.modules.size(), registered);
  return Status::Ok();
}

}  // namespace

Status MoveLink(Client& link, const Endpoint& endpoint, const ConnectOptions& options) {
  constexpr int kAttempts = 20;
  Status st;
  for (int i = 0; i < kAttempts; i++) {
    st = MoveOnce(link, endpoint, options);
    if (st.code() != Err::kNotReady) return st;
    LOG_INFO("migration: {}; trying again", st.message());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return st;
}

}  // namespace remora::shim

// Planned migration (docs/ARCHITECTURE.md, "Planned migration"): the source worker says what
// the session holds (migrateExport), the target worker recreates it at the same addresses
// and under the same handles (migrateImport; modules in ops_module.cc). The client moves the
// contents and swaps its connection; neither worker talks to the other.
#include <algorithm>
#include <map>
#include <optional>

#include <cuda.h>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/auth.h"
#include "worker/ops/handlers.h"
#include "worker/ipc/ipc_state.h"
#include "worker/backend/placement.h"
#include "worker/session/peer_log.h"

namespace remora::worker {
namespace {

Result<int> OrdinalOf(Executor& ex, int gpu) {
  const std::vector<int>& gpus = ex.config().gpus;
  auto it = std::find(gpus.begin(), gpus.end(), gpu);
  if (it == gpus.end()) return Error(Err::kDevicesUnavailable, "GPU {} is no longer this session's", gpu);
  return static_cast<int>(it - gpus.begin());
}

// The settable attributes of a device's own pool, carried with its handle.
constexpr int kPoolAttributes[] = {CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
                                   CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
                                   CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES};

// Device memory a move carries: of cudaMalloc/cuMemAlloc (and pitched), and of
// cudaMallocAsync from the device's own pool (memory of a pool the session created is
// refused below). The target places both at the same addresses.
bool Carried(const Allocation& a) {
  return a.kind == AllocKind::kDevice || (a.kind == AllocKind::kDeviceAsync && a.cookie == 0);
}

// Why the session cannot move yet (kNotSupported naming what it holds), or OK. What moves:
// the device memory above, the devices' own pools it asked for (their handles and settable
// attributes), streams, events, modules and their functions. The rest stays tied to this
// server until a later version carries it.
Status Movable(Executor& ex) {
  SessionState& s = ex.session();
  auto refuse = [](std::string what) {
    return Error(Err::kNotSupported, "the session holds {} (not carried by a migration yet)", what);
  };
  for (const Allocation& a : s.allocations().All()) {
    if (Carried(a)) continue;
    if (a.kind == AllocKind::kModule) continue;  // a module's variable: checked with its module
    switch (a.kind) {
      case AllocKind::kDeviceAsync: return refuse("stream-ordered allocations of a memory pool it created");
      case AllocKind::kPinnedHost:
      case AllocKind::kRegisteredHost:
      case AllocKind::kMappedHost: return refuse("pinned or registered host memory");
      case AllocKind::kManaged: return refuse("managed memory");
      case AllocKind::kIpcImported: return refuse("memory opened by CUDA IPC");
      default: return refuse("graph or virtual-memory allocations");
    }
  }
  if (!s.host_regions().empty()) return refuse("pinned or registered host memory");
  bool own_pools = false;
  s.pools().ForEach([&](uint64_t, Pool& p) { own_pools |= p.created || p.import_id != 0; });
  if (own_pools) return refuse("memory pools it created (cudaMemPoolCreate) or opened from another process");
  if (s.physical().size() > 0 || !s.reservations().empty()) return refuse("virtual memory (cuMemCreate/cuMemAddressReserve)");
  if (s.graphs().graphs().size() > 0 || s.graphs().execs().size() > 0 || s.graphs().active_captures() > 0)
    return refuse("CUDA graphs or stream captures");
  if (s.lib_objects().size() > 0) return refuse("objects of the math libraries (cuBLAS, cuDNN...)");
  if (s.array_objects().arrays().size() > 0 || s.array_objects().mipmaps().size() > 0 || !s.array_objects().objects().empty())
    return refuse("CUDA arrays, textures or surfaces");
  if (!ex.ipc().memory_exports().empty() || !ex.ipc().event_exports().empty() || !ex.ipc().imports().empty())
    return refuse("CUDA IPC exports or opens");
  if (!s.host_callbacks().empty()) return refuse("host functions still queued");
  Status st;
  s.modules().ForEach([&](uint64_t, Module& m) {
    if (st.ok() && !m.globals.empty()) st = refuse("module variables (__device__) the application resolved");
  });
  return st;
}

// Puts stream-ordered memory of the old server at `at` on `gpu` (current) here: placed like
// any allocation where the range is free (true), else asked of the device's pool (false) -
// the CUDA driver keeps the addresses of its pools reserved in every process, and a pool of
// a fresh process hands out the addresses the old one did for the same requests. Answers
// below `at` are held until it comes and charged to the tenant meanwhile (a client cannot
// make the worker hold more than its quota), then given back. Blocks until the pool's
// answers are known (the null stream synchronised).
Result<bool> PlaceStreamOrdered(Executor& ex, int gpu, DevPtr at, uint64_t size) {
  Status placed = ex.driver().MemPlace({{at, size}});
  if (placed.ok()) return true;
  Driver& d = ex.driver();
  std::vector<DevPtr> below;
  std::optional<DevPtr> offered;
  Status why = placed;
  bool found = false;
  while (!found && below.size() < 64) {
    auto p = d.MemAllocAsync(size, nullptr, nullptr);
    if (!p.ok()) {
      why = p.status();
      break;
    }
    offered = *p;
    if (*p == at) {
      found = true;
    } else if (*p + size <= at && (why = ex.Charge(gpu, size)).ok()) {
      below.push_back(*p);
    } else {
      (void)d.MemFreeAsync(*p, nullptr);
      break;
    }
  }
  for (DevPtr p : below) (void)d.MemFreeAsync(p, nullptr);
  Status synced = d.StreamSynchronize(nullptr);
  ex.ReleaseCharge(gpu, below.size() * size);
  if (found && synced.ok()) return false;
  if (found) (void)d.MemFree(at);
  if (!synced.ok()) return synced;
  return Error(Err::kMemoryAllocation, "stream-ordered memory at 0x{:x}+{} cannot be had here: {}; the device's pool offered {}",
               at, FormatSize(size), why.message(), offered ? fmt::format("0x{:x}", *offered) : "nothing");
}

}  // namespace

Status Handlers::MigrateExport(Executor& ex, uint64_t tag, Req) {
  Status movable = Movable(ex);
  if (!movable.ok()) return ex.PostReply(tag, movable);
  SessionState& s = ex.session();
  std::vector<Allocation> allocations;
  for (const Allocation& a : s.allocations().All())
    if (Carried(a)) allocations.push_back(a);
  // Ordinals of everything first: a detached GPU's objects cannot move.
  std::map<int, int> ordinal;
  auto note = [&](int gpu) -> Status {
    if (ordinal.count(gpu)) return Status::Ok();
    ASSIGN_OR_RETURN(int o, OrdinalOf(ex, gpu));
    ordinal[gpu] = o;
    return Status::Ok();
  };
  Status st;
  for (const Allocation& a : allocations)
    if (st.ok()) st = note(a.device);
  s.streams().ForEach([&](uint64_t, Stream& x) { if (st.ok()) st = note(x.gpu); });
  s.events().ForEach([&](uint64_t, Event& x) { if (st.ok()) st = note(x.gpu); });
  s.modules().ForEach([&](uint64_t, Module& x) { if (st.ok()) st = note(x.gpu); });
  s.pools().ForEach([&](uint64_t, Pool& x) { if (st.ok()) st = note(x.gpu); });
  // The pools' attributes, read now: a pool that cannot say them does not move.
  std::map<uint64_t, std::vector<std::pair<int, uint64_t>>> pool_attributes;
  s.pools().ForEach([&](uint64_t id, Pool& x) {
    for (int a : kPoolAttributes) {
      if (!st.ok()) return;
      auto v = ex.driver().MemPoolGetAttribute(x.pool, a);
      if (v.ok()) pool_attributes[id].emplace_back(a, *v);
      else st = v.status();
    }
  });
  if (!st.ok()) return ex.PostReply(tag, st);
  std::map<uint64_t, std::vector<std::pair<uint64_t, std::string>>> functions;  // by module
  for (const auto& [key, handle] : s.function_index()) functions[key.first].emplace_back(handle, key.second);
  uint64_t bytes = 0;
  for (const Allocation& a : allocations) bytes += a.size;
  LOG_PEER(PeerLog(), Info,
           "session {}: exporting {} allocations ({}), {} streams, {} events, {} modules for a migration",
           ex.config().session_id, allocations.size(), FormatSize(bytes), s.streams().size(), s.events().size(),
           s.modules().size());
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    auto m = r.initMigration();
    auto al = m.initAllocations(static_cast<unsigned>(allocations.size()));
    for (unsigned i = 0; i < allocations.size(); i++) {
      al[i].setPtr(allocations[i].base);
      al[i].setSize(allocations[i].size);
      al[i].setOrdinal(ordinal[allocations[i].device]);
      al[i].setStreamOrdered(allocations[i].kind == AllocKind::kDeviceAsync);
    }
    auto objects = [&](auto list, auto& table) {
      unsigned i = 0;
      table.ForEach([&](uint64_t id, auto& x) {
        list[i].setHandle(id);
        list[i].setOrdinal(ordinal[x.gpu]);
        list[i].setFlags(x.flags);
        if constexpr (requires { x.priority; }) list[i].setPriority(x.priority);
        i++;
      });
    };
    objects(m.initStreams(static_cast<unsigned>(s.streams().size())), s.streams());
    objects(m.initEvents(static_cast<unsigned>(s.events().size())), s.events());
    auto pools = m.initPools(static_cast<unsigned>(s.pools().size()));
    unsigned k = 0;
    s.pools().ForEach([&](uint64_t id, Pool& x) {
      pools[k].setHandle(id);
      pools[k].setOrdinal(ordinal[x.gpu]);
      const auto& attrs = pool_attributes[id];
      auto al = pools[k].initAttributes(static_cast<unsigned>(attrs.size()));
      for (unsigned j = 0; j < attrs.size(); j++) {
        al[j].setId(attrs[j].first);
        al[j].setValue(attrs[j].second);
      }
      k++;
    });
    auto mods = m.initModules(static_cast<unsigned>(s.modules().size()));
    unsigned i = 0;
    s.modules().ForEach([&](uint64_t id, Module& x) {
      mods[i].setHandle(id);
      mods[i].setOrdinal(ordinal[x.gpu]);
      if (auto hash = KeyFromHex(x.hash); hash.ok()) mods[i].setHash(capnp::Data::Reader(hash->data(), hash->size()));
      mods[i].setSize(x.image_bytes);
      auto& fns = functions[id];
      auto fl = mods[i].initFunctions(static_cast<unsigned>(fns.size()));
      for (unsigned k = 0; k < fns.size(); k++) {
        fl[k].setHandle(fns[k].first);
        fl[k].setName(fns[k].second);
      }
      i++;
    });
  });
}

Status Handlers::MigrateImport(Executor& ex, uint64_t tag, Req req) {
  auto m = req.getMigrateImport();
  SessionState& s = ex.session();
  // Once, into a session that made nothing yet (N5). (This server cannot know what another
  // one's administrator ordered: the import is refused everywhere else, and charged in full.)
  if (!ex.TakeMigrationImport())
    return ex.PostReply(tag, Error(Err::kInvalidValue, "a session takes one migration import only"));
  if (s.allocations().size() > 0 || s.streams().size() > 0 || s.events().size() > 0 || s.modules().size() > 0 ||
      s.pools().size() > 0 || s.lib_objects().size() > 0 || s.graphs().graphs().size() > 0)
    return ex.PostReply(tag, Error(Err::kInvalidValue, "a migration is imported into a new session only"));
  // Memory, per device: charged first (the ledger stays exact) what its placement holds -
  // whole granules of the device (worker/backend/placement.h) - then placed.
  struct Range {
    DevPtr at;
    uint64_t size;
    bool stream_ordered;
    bool operator<(const Range& o) const { return at < o.at; }
  };
  std::map<int, std::vector<Range>> by_gpu;
  for (auto a : m.getAllocations()) {
    auto gpu = ex.GpuOf(a.getOrdinal());
    if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
    if (a.getSize() == 0 || a.getSize() > (uint64_t{1} << 48) || a.getPtr() == 0 || a.getPtr() > (uint64_t{1} << 60))
      return ex.PostReply(tag, Error(Err::kInvalidValue, "a migrated allocation of 0x{:x}+{}", a.getPtr(), a.getSize()));
    by_gpu[*gpu].push_back({a.getPtr(), a.getSize(), a.getStreamOrdered()});
  }
  for (auto& [gpu, list] : by_gpu) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); i++)
      if (list[i - 1].at + list[i - 1].size > list[i].at)
        return ex.PostReply(tag, Error(Err::kInvalidValue, "migrated allocations overlap at 0x{:x}", list[i].at));
    std::vector<std::pair<DevPtr, uint64_t>> plain, ordered;
    for (const Range& r : list) (r.stream_ordered ? ordered : plain).emplace_back(r.at, r.size);
    Status st = ex.SetDevice(gpu);
    auto granule = st.ok() ? ex.driver().PlacementGranularity() : Result<uint64_t>(st);
    if (!granule.ok()) return ex.PostReply(tag, granule.status());
    // What each allocation is charged (and gives back when freed): its size, and the slack
    // of its extent with the highest allocation of it (the extent stays mapped until its last
    // allocation is freed, so freeing that one first returns the slack a little early).
    // Stream-ordered memory counts with the rest: placed, or from the device's pool, it holds
    // the granules it touches.
    std::vector<std::pair<DevPtr, uint64_t>> all;
    for (const Range& r : list) all.emplace_back(r.at, r.size);
    std::map<DevPtr, uint64_t> charge;
    uint64_t bytes = 0;
    for (const PlacementExtent& e : PlacementExtents(all, *granule)) {
      for (const auto& [at, size] : e.members) charge[at] = size;
      charge[e.members.back().first] += e.slack();
      bytes += e.bytes();
    }
    st = ex.Charge(gpu, bytes);
    if (!st.ok()) return ex.PostReply(tag, st);
    if (!plain.empty()) st = ex.driver().MemPlace(plain);
    if (!st.ok()) {
      ex.ReleaseCharge(gpu, bytes);
      return ex.PostReply(tag, st);  // what was placed before stays the session's: freed at its end
    }
    const int device = gpu;  // (a structured binding: not captured by every compiler)
    auto insert = [&](DevPtr at, uint64_t size, AllocKind kind, bool placed) {
      Allocation a;
      a.base = at;
      a.size = size;
      a.device = device;
      a.kind = kind;
      a.reserved = charge[at];
      a.placed = placed;
      (void)s.allocations().Insert(a);
      bytes -= a.reserved;
    };
    for (const auto& [at, size] : plain) insert(at, size, AllocKind::kDevice, true);
    for (const auto& [at, size] : ordered) {
      // Stream-ordered memory stays so: cudaFreeAsync frees it in stream order, through its
      // placement if it was placed (Handlers::FreeAsync), else to the pool it came from.
      auto placed = PlaceStreamOrdered(ex, gpu, at, size);
      if (!placed.ok()) {
        ex.ReleaseCharge(gpu, bytes);
        return ex.PostReply(tag, placed.status());
      }
      insert(at, size, AllocKind::kDeviceAsync, *placed);
    }
  }
  // Each device's own pool under the handle the application holds, its attributes as they
  // were (one per device: it is the same object whatever the application asked for).
  for (auto x : m.getPools()) {
    auto gpu = ex.GpuOf(x.getOrdinal());
    Status st = gpu.ok() ? ex.SetDevice(*gpu) : gpu.status();
    bool seen = false;
    if (st.ok()) s.pools().ForEach([&](uint64_t, Pool& p) { seen |= p.gpu == *gpu; });
    if (st.ok() && seen) st = Error(Err::kInvalidValue, "two migrated pools of device {}", x.getOrdinal());
    auto pool = st.ok() ? ex.driver().DefaultMemPool(*gpu) : Result<DPool>(st);
    if (!pool.ok()) return ex.PostReply(tag, pool.status());
    for (auto a : x.getAttributes()) {
      if (std::find(std::begin(kPoolAttributes), std::end(kPoolAttributes), a.getId()) == std::end(kPoolAttributes))
        return ex.PostReply(tag, Error(Err::kInvalidValue, "pool attribute {} is not one a migration carries", a.getId()));
      st = ex.driver().MemPoolSetAttribute(*pool, a.getId(), a.getValue());
      if (!st.ok()) return ex.PostReply(tag, st);
    }
    st = s.pools().InsertAt(x.getHandle(), {*pool, *gpu, false, 0});
    if (!st.ok()) return ex.PostReply(tag, st);
  }
  for (auto x : m.getStreams()) {
    auto gpu = ex.GpuOf(x.getOrdinal());
    Status st = gpu.ok() ? ex.resources().Room(Resource::kStreams, s.streams().size()) : gpu.status();
    if (st.ok()) st = ex.SetDevice(*gpu);
    if (!st.ok()) return ex.PostReply(tag, st);
    auto made = ex.driver().StreamCreate(x.getFlags(), x.getPriority());
    if (!made.ok()) return ex.PostReply(tag, made.status());
    st = s.streams().InsertAt(x.getHandle(), {*made, *gpu, x.getFlags(), x.getPriority()});
    if (!st.ok()) {
      (void)ex.driver().StreamDestroy(*made);
      return ex.PostReply(tag, st);
    }
  }
  for (auto x : m.getEvents()) {
    auto gpu = ex.GpuOf(x.getOrdinal());
    Status st = gpu.ok() ? ex.resources().Room(Resource::kEvents, s.events().size()) : gpu.status();
    if (st.ok()) st = ex.SetDevice(*gpu);
    if (!st.ok()) return ex.PostReply(tag, st);
    auto made = ex.driver().EventCreate(x.getFlags());
    if (!made.ok()) return ex.PostReply(tag, made.status());
    st = s.events().InsertAt(x.getHandle(), {*made, *gpu, x.getFlags()});
    if (!st.ok()) {
      (void)ex.driver().EventDestroy(*made);
      return ex.PostReply(tag, st);
    }
  }
  LOG_PEER(PeerLog(), Info,
           "session {}: imported {} allocations, {} pools, {} streams, {} events of a migrating session",
           ex.config().session_id, m.getAllocations().size(), m.getPools().size(), m.getStreams().size(),
           m.getEvents().size());
  return ex.PostReply(tag, Status::Ok());
}

}  // namespace remora::worker

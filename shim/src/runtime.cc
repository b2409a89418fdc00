#include "runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <new>
#include <set>
#include <sstream>

#include "callbacks.h"
#include "device_core.h"
#include "driver/contexts.h"
#include "error_log.h"
#include "lib_objects.h"
#include "local_gpu_check.h"
#include "remote_call.h"
#include "registry.h"
#include "thread_slot.h"
#include "visible_devices.h"
#include "watchdog.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/transport.h"

namespace remora::shim {

// Status codes are cudaError_t numbers: keep the two vocabularies in step.
#define REMORA_SAME(k, c) static_assert(static_cast<int>(Err::k) == static_cast<int>(c), #k);
REMORA_SAME(kSuccess, cudaSuccess)
REMORA_SAME(kInvalidValue, cudaErrorInvalidValue)
REMORA_SAME(kMemoryAllocation, cudaErrorMemoryAllocation)
REMORA_SAME(kInitializationError, cudaErrorInitializationError)
REMORA_SAME(kCudartUnloading, cudaErrorCudartUnloading)
REMORA_SAME(kInvalidConfiguration, cudaErrorInvalidConfiguration)
REMORA_SAME(kInvalidPitchValue, cudaErrorInvalidPitchValue)
REMORA_SAME(kInvalidSymbol, cudaErrorInvalidSymbol)
REMORA_SAME(kInvalidHostPointer, cudaErrorInvalidHostPointer)
REMORA_SAME(kInvalidDevicePointer, cudaErrorInvalidDevicePointer)
REMORA_SAME(kInvalidMemcpyDirection, cudaErrorInvalidMemcpyDirection)
REMORA_SAME(kDevicesUnavailable, cudaErrorDevicesUnavailable)
REMORA_SAME(kInvalidKernelImage, cudaErrorInvalidKernelImage)
REMORA_SAME(kInvalidDeviceFunction, cudaErrorInvalidDeviceFunction)
REMORA_SAME(kNoDevice, cudaErrorNoDevice)
REMORA_SAME(kInvalidDevice, cudaErrorInvalidDevice)
REMORA_SAME(kNoKernelImageForDevice, cudaErrorNoKernelImageForDevice)
REMORA_SAME(kInvalidResourceHandle, cudaErrorInvalidResourceHandle)
REMORA_SAME(kSymbolNotFound, cudaErrorSymbolNotFound)
REMORA_SAME(kNotReady, cudaErrorNotReady)
REMORA_SAME(kIllegalAddress, cudaErrorIllegalAddress)
REMORA_SAME(kLaunchOutOfResources, cudaErrorLaunchOutOfResources)
REMORA_SAME(kPeerAccessAlreadyEnabled, cudaErrorPeerAccessAlreadyEnabled)
REMORA_SAME(kPeerAccessNotEnabled, cudaErrorPeerAccessNotEnabled)
REMORA_SAME(kHostMemoryAlreadyRegistered, cudaErrorHostMemoryAlreadyRegistered)
REMORA_SAME(kHostMemoryNotRegistered, cudaErrorHostMemoryNotRegistered)
REMORA_SAME(kLaunchFailure, cudaErrorLaunchFailure)
REMORA_SAME(kNotPermitted, cudaErrorNotPermitted)
REMORA_SAME(kNotSupported, cudaErrorNotSupported)
REMORA_SAME(kTimeout, cudaErrorTimeout)
REMORA_SAME(kUnknown, cudaErrorUnknown)
#undef REMORA_SAME

namespace {

void ChildAfterFork() { Runtime::Get().AfterForkInChild(); }

}  // namespace

ThreadState& Thread() { return ThreadSlot<ThreadState>(); }

Runtime::Runtime() {
  SetLogIdentity("remora-shim");
  SetLogLevelFromEnv(LogLevel::kWarn);
  pthread_atfork(nullptr, nullptr, ChildAfterFork);
}

Result<Client*> Runtime::Session() {
  if (Client* c = connected_.load(std::memory_order_acquire)) return c;
  std::lock_guard<std::mutex> lock(connect_mu_);
  if (Client* c = connected_.load(std::memory_order_acquire)) return c;
  if (connect_error_) return *connect_error_;
  Status st = Connect();
  if (!st.ok()) {
    connect_error_ = st;
    return st;
  }
  return connected_.load();
}

Status Runtime::ListDevices(Client& link, std::vector<DeviceEntry>* out) {
  return link.CallLocal(
      0, [](wire::Request::Builder& r) { r.setGetDevices(); },
      [&](wire::Reply::Reader& r) -> Status {
        if (!r.isDevices()) return Error(Err::kUnknown, "malformed device list");
        for (auto d : r.getDevices()) {
          DeviceEntry e;
          e.ordinal = d.getOrdinal();
          e.detached = d.getGpuId() == UINT32_MAX;
          e.name = d.getName();
          auto u = d.getUuid();
          if (u.size() == 16) std::memcpy(e.uuid, u.begin(), 16);
          e.total_memory = d.getTotalMemory();
          e.pci_bus_id = d.getPciBusId();
          e.emulated = d.getEmulated();
          for (int32_t a : d.getAttributes()) e.attributes.push_back(a);
          out->push_back(std::move(e));
        }
        return Status::Ok();
      });
}

Result<Runtime::DeviceList> Runtime::Devices(bool force_refresh) {
  ASSIGN_OR_RETURN(Client * c, Session());
  // Each server's list moves with its generation; a lost server moves the whole list once.
  auto generation = [&] {
    uint64_t g = 0;
    for (Client* l : routes_.links) g += l->generation() + (l->broken().ok() ? 0 : 1ull << 40);
    return g;
  };
  uint64_t seen = generation();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!force_refresh && devices_ && devices_generation_ == seen) return devices_;
  }
  (void)c;
  std::vector<std::vector<DeviceEntry>> parts(routes_.links.size());
  std::vector<Status> failures(routes_.links.size());
  for (size_t i = 0; i < routes_.links.size(); i++) {
    failures[i] = ListDevices(*routes_.links[i], &parts[i]);
    // A server that answers badly fails the call; only a lost one leaves its devices lost.
    if (!failures[i].ok() && (routes_.links.size() == 1 || routes_.links[i]->broken().ok())) return failures[i];
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Ordinals: a server's devices keep the ones they were first given; new ones come last.
  // Under CUDA_VISIBLE_DEVICES only the devices it named at the first enumeration have one.
  auto ordinal_of = [&](size_t link, int local, bool create) {
    uint32_t want = static_cast<uint32_t>(link + 1) << 16 | static_cast<uint32_t>(local);
    for (int g = 0; g < routes_.count; g++)
      if (routes_.table[static_cast<size_t>(g)].load(std::memory_order_relaxed) == want) return g;
    if (!create || routes_.count >= Routes::kMax || local < 0 || local > 0xffff) return -1;
    routes_.table[static_cast<size_t>(routes_.count)].store(want, std::memory_order_release);
    return routes_.count++;
  };
  auto session = std::make_shared<std::vector<DeviceEntry>>();
  for (size_t i = 0; i < parts.size(); i++) {
    if (!failures[i].ok()) continue;
    for (DeviceEntry& e : parts[i]) {
      e.link = static_cast<int>(i);
      e.local = e.ordinal;
      session->push_back(e);
    }
  }
  if (!visible_applied_) {
    // Read when CUDA reads it: at the first enumeration (the driver's initialisation).
    visible_applied_ = true;
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) visible_devices_ = v;
  }
  if (visible_devices_ && !visible_mapped_) {
    visible_mapped_ = true;
    std::vector<std::string> uuids;
    for (const DeviceEntry& e : *session) uuids.push_back(UuidText(e.uuid));
    std::vector<int> shown = VisibleDevices(*visible_devices_, uuids, &visible_named_twice_);
    for (int d : shown) (void)ordinal_of(static_cast<size_t>((*session)[static_cast<size_t>(d)].link),
                                         (*session)[static_cast<size_t>(d)].local, true);
    LOG_INFO("CUDA_VISIBLE_DEVICES=\"{}\": {} of the session's {} device(s) visible", *visible_devices_, shown.size(),
             session->size());
  }
  const bool create = !visible_devices_;
  auto list = std::make_shared<std::vector<DeviceEntry>>();
  for (size_t i = 0; i < parts.size(); i++) {
    if (!failures[i].ok()) continue;
    for (DeviceEntry& e : parts[i]) {
      int g = ordinal_of(i, e.ordinal, create);
      if (g < 0 && !create) {  // hidden by CUDA_VISIBLE_DEVICES
        e.ordinal = -1;
        continue;
      }
      if (g < 0) {
        LOG_WARN("device {} of server {} is past Remora's {} devices per application: not shown", e.ordinal, i + 1,
                 static_cast<int>(Routes::kMax));
        e.ordinal = -1;
        continue;
      }
      e.ordinal = g;
    }
  }
  list->resize(static_cast<size_t>(routes_.count));
  for (size_t g = 0; g < list->size(); g++) {
    (*list)[g].ordinal = static_cast<int>(g);
    (*list)[g].detached = true;  // unless its server lists it below
  }
  for (size_t i = 0; i < parts.size(); i++) {
    if (failures[i].ok()) {
      for (DeviceEntry& e : parts[i])
        if (e.ordinal >= 0 && static_cast<size_t>(e.ordinal) < list->size()) (*list)[static_cast<size_t>(e.ordinal)] = std::move(e);
      continue;
    }
    // A server that stopped answering: its devices keep their ordinals, lost.
    for (int g = 0; g < routes_.count; g++) {
      if (routes_.LinkIndex(g) != static_cast<int>(i)) continue;
      auto& e = (*list)[static_cast<size_t>(g)];
      if (devices_ && static_cast<size_t>(g) < devices_->size()) e = (*devices_)[static_cast<size_t>(g)];
      e.lost = true;
    }
  }
  for (DeviceEntry& e : *session) e.ordinal = ordinal_of(static_cast<size_t>(e.link), e.local, false);
  session_devices_ = session;
  devices_ = list;
  devices_generation_ = seen;
  return devices_;
}

Result<Runtime::DeviceList> Runtime::SessionDevices() {
  RETURN_IF_ERROR(Devices().status());
  std::lock_guard<std::mutex> lock(mu_);
  return session_devices_;
}

Result<std::shared_ptr<const DeviceEntry>> Runtime::Device(int ordinal) {
  ASSIGN_OR_RETURN(DeviceList devs, Devices());
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= devs->size())
    return Error(Err::kInvalidDevice, "device {} does not exist ({} device(s))", ordinal, devs->size());
  // Aliasing: the entry keeps the whole snapshot alive.
  return std::shared_ptr<const DeviceEntry>(devs, &(*devs)[static_cast<size_t>(ordinal)]);
}

void Runtime::SetValidDevices(std::vector<int> devices) {
  std::lock_guard<std::mutex> lock(mu_);
  valid_devices_ = std::move(devices);
}

Result<int> Runtime::CurrentDevice() {
  ASSIGN_OR_RETURN(DeviceList devs, Devices());
  ThreadState& t = Thread();
  if (!t.device_set) {
    // A thread that never chose a device takes the first usable one of cudaSetValidDevices.
    std::lock_guard<std::mutex> lock(mu_);
    for (int v : valid_devices_) {
      if (v >= 0 && static_cast<size_t>(v) < devs->size() && !(*devs)[static_cast<size_t>(v)].detached) {
        t.device = v;
        break;
      }
    }
  }
  int d = t.device;
  if (devs->empty()) return Error(Err::kNoDevice, "no device is attached to this tenant");
  if (d < 0 || static_cast<size_t>(d) >= devs->size()) return Error(Err::kInvalidDevice, "device {} does not exist", d);
  if ((*devs)[static_cast<size_t>(d)].lost)
    return Error(Err::kDevicesUnavailable, "device {}'s Remora server stopped answering", d);
  if ((*devs)[static_cast<size_t>(d)].detached)
    return Error(Err::kDevicesUnavailable, "device {} was detached by the administrator", d);
  // As with CUDA's runtime: the device's primary context is now in use, and current for this
  // thread (the driver API sees both).
  t.runtime_used = true;
  Process::Get().contexts().MarkRuntimeActive(d);
  return d;
}

void Runtime::AddDeviceAllocation(uint64_t base, uint64_t size, int device, AllocKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  Allocation a;
  a.base = base;
  a.size = size;
  a.device = device;
  a.kind = kind;
  if (kind != AllocKind::kGraphMemory) {
    (void)device_allocs_.Insert(a);
    return;
  }
  // The driver gives allocation nodes of one graph addresses a node the graph freed before
  // had: one entry, the union of the graph memory ranges it overlaps (as the worker's ledger,
  // worker/session/graph_state.h AdoptGraphMemory; anything else overlapping was refused there).
  (void)device_allocs_.InsertMerging(a, [](const Allocation& e) { return e.kind == AllocKind::kGraphMemory; });
}

Result<Allocation> Runtime::RemoveDeviceAllocation(uint64_t base) {
  std::lock_guard<std::mutex> lock(mu_);
  return device_allocs_.Erase(base);
}

void Runtime::AddDeviceMapping(uint64_t base, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)device_allocs_.AddMapping(base, size);
}

void Runtime::RemoveDeviceMapping(uint64_t base, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)device_allocs_.RemoveMapping(base, size);
}

std::optional<Allocation> Runtime::FindDevice(uint64_t ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  return device_allocs_.Find(ptr);
}

Status Runtime::CheckDeviceRange(uint64_t ptr, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st = device_allocs_.CheckRange(ptr, size).status();
  if (st.ok()) return st;
  // Pinned memory the worker mapped at this process's own address is device memory too.
  if (auto h = host_allocs_.CheckRange(ptr, size); h.ok()) {
    auto it = region_devices_.find(h->cookie >> 32);
    if (it != region_devices_.end() && it->second == h->base) return Status::Ok();
  }
  return st;
}

void Runtime::AddHostAllocation(void* base, uint64_t size, unsigned flags, uint64_t region, AllocKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  Allocation a;
  a.base = reinterpret_cast<uint64_t>(base);
  a.size = size;
  a.kind = kind;
  a.cookie = (region << 32) | flags;
  (void)host_allocs_.Insert(a);
}

Result<Allocation> Runtime::RemoveHostAllocation(void* base) {
  std::lock_guard<std::mutex> lock(mu_);
  return host_allocs_.Erase(reinterpret_cast<uint64_t>(base));
}

std::optional<Allocation> Runtime::FindHost(const void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  return host_allocs_.Find(reinterpret_cast<uint64_t>(ptr));
}

std::vector<std::pair<void*, uint64_t>> Runtime::RegisteredHostRanges() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<void*, uint64_t>> out;
  for (const Allocation& a : host_allocs_.All()) {
    void* p = reinterpret_cast<void*>(a.base);
    if (a.kind == AllocKind::kRegisteredHost) out.emplace_back(p, a.size);
    else if (a.kind == AllocKind::kPinnedHost && (a.cookie >> 32) == 0) out.emplace_back(p, AlignUp(a.size, 4096));
  }
  return out;
}

void Runtime::SetRegionDevicePointer(uint64_t region, uint64_t device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (device == 0) region_devices_.erase(region);
  else region_devices_[region] = device;
}

uint64_t Runtime::RegionDevicePointer(uint64_t region) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = region_devices_.find(region);
  return it == region_devices_.end() ? 0 : it->second;
}

void Runtime::AddStream(uint64_t handle, int device, unsigned flags, int priority) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_[handle] = StreamEntry{device, flags, priority};
}

bool Runtime::RemoveStream(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.erase(handle) > 0;
}

Status Runtime::StreamInfo(cudaStream_t s, unsigned* flags, int* priority, int* device) {
  auto h = reinterpret_cast<uint64_t>(s);
  if (h == 0 || h == 1 || h == 2) {
    *flags = 0;
    *priority = 0;
    *device = Thread().device;
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(h);
  if (it == streams_.end()) return Error(Err::kInvalidValue, "stream 0x{:x} is not a live stream of this process", h);
  *flags = it->second.flags;
  *priority = it->second.priority;
  *device = it->second.device;
  return Status::Ok();
}

Status Runtime::CheckStream(cudaStream_t s, int* device) {
  unsigned flags;
  int priority;
  return StreamInfo(s, &flags, &priority, device);
}

void Runtime::AddEvent(uint64_t handle, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  events_[handle] = device;
}

bool Runtime::RemoveEvent(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.erase(handle) > 0;
}

Status Runtime::CheckEvent(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.count(reinterpret_cast<uint64_t>(e)) == 0)
    return Error(Err::kInvalidValue, "event {} is not a live event of this process", static_cast<const void*>(e));
  return Status::Ok();
}

int Runtime::EventDevice(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(handle);
  return it == events_.end() ? -1 : it->second;
}

void Runtime::ForgetDevice(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Allocation& a : device_allocs_.All())
    if (a.device == device) (void)device_allocs_.Erase(a.base);
  for (auto it = streams_.begin(); it != streams_.end();) it = it->second.device == device ? streams_.erase(it) : std::next(it);
  for (auto it = events_.begin(); it != events_.end();) it = it->second == device ? events_.erase(it) : std::next(it);
}

void Runtime::AfterForkInChild() {
  // The parent's session is not ours: forget it without touching it (other parent threads
  // may have held its locks at fork time).
  new (&connect_mu_) std::mutex();
  new (&mu_) std::mutex();
  new (&migrate_mu_) std::mutex();
  new (&migrator_) std::thread();  // the parent's, not joinable here (never destroyed)
  migrating_ = false;
  for (auto& l : links_) (void)l.release();
  links_.clear();
  routes_.links.clear();
  for (auto& r : routes_.table) r.store(0);
  routes_.count = 0;
  connected_.store(nullptr);
  connect_error_.reset();
  devices_.reset();
  devices_generation_ = ~0ull;
  device_allocs_.Clear();
  streams_.clear();
  events_.clear();
  Process::Get().registry().ForgetSession();
  Process::Get().callbacks().AfterFork();
  Process::Get().lib_objects().AfterFork();
}

void Runtime::Shutdown() {
  std::thread move;  // a move in progress completes (or fails) first
  {
    std::lock_guard<std::mutex> lock(migrate_mu_);
    if (migrator_.joinable() && migrator_.get_id() != std::this_thread::get_id()) move = std::move(migrator_);
  }
  if (move.joinable()) move.join();
  if (connected_.load() == nullptr) return;
  for (Client* c : routes_.links) {
    c->ReportCensus();
    if (!c->broken().ok()) continue;
    (void)c->PostLocal(0, [](wire::Request::Builder& r) { r.setGoodbye(); });
    (void)c->Flush();  // the process is exiting: nothing may stay batched
  }
}

cudaError_t Finish(const Status& st, const char* call) {
  if (st.ok()) return cudaSuccess;
  auto e = static_cast<cudaError_t>(st.code());
  if (e == cudaErrorNotReady) return e;
  Thread().last_error = e;
  LOG_INFO("{} -> {}", call, st.ToString());
  Process::Get().error_log().Record(call, st.ToString());
  return e;
}

Status AfterSync(Client* c, const Status& st) {
  if (!st.ok() || c == nullptr) return st;
  Runtime::Get().managed().AfterSync();
  return c->TakeAsyncError();
}

cudaError_t FinishSync(Client* c, const Status& st, const char* call) { return Finish(AfterSync(c, st), call); }

cudaError_t NotSupported(const char* call) {
  return static_cast<cudaError_t>(NotSupported(Domain::kCudart, cudaErrorNotSupported, call));
}

}  // namespace remora::shim

// Sends the session's goodbye after the application's own destructors have run.
__attribute__((destructor)) static void RemoraShimFini() {
  // Never creates the process root on the way out.
  if (auto* p = remora::shim::Process::IfCreated()) p->runtime().Shutdown();
  remora::shim::CheckNoLocalGpuAtExit();
}

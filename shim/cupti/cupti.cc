// libcupti.so.13: CUPTI's activity API as a Remora client sees it (docs/ARCHITECTURE.md,
// "Profiling (CUPTI)"). NVIDIA's CUPTI instruments the local driver, which through Remora runs
// no GPU work: this library asks the session's worker for the activity of its work instead
// (remoraActivity*, through libremora-core.so: core_activity.h) and writes it into the
// application's buffers in NVIDIA's layouts of CUDA 13, as NVIDIA's library does.
//
// Served: kernels (CONCURRENT_KERNEL or KERNEL), MEMCPY, MEMSET and EXTERNAL_CORRELATION
// records; external correlation ids (posted to the worker in call order, so that the worker's
// records name the application's ids); buffers handed over at cuptiActivityFlushAll (and at
// cuptiFinalize), their times in the application's clock (its timestamp callback, else
// CLOCK_REALTIME) shifted from the worker's by an offset measured at each round trip. Accepted
// without records: the API kinds (RUNTIME, DRIVER), SYNCHRONIZATION, OVERHEAD and the other
// kinds of host-side bookkeeping; callbacks may be subscribed and enabled, but none is made.
// The event, metric, range/PM-sampling profiler and PC-sampling APIs answer
// CUPTI_ERROR_NOT_SUPPORTED (cupti_unsupported.cc): hardware counters of a GPU shared by
// tenants are not a tenant's to read.
//
// Thread-safety: every function may be called from any thread (one mutex; the application's
// buffer callbacks are called without it held).
#include <cupti.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <unordered_set>
#include <vector>

#include "activity_wire.h"
#include "core_activity.h"

#define CUPTI_EXPORT extern "C" __attribute__((visibility("default")))

// Marks this library as Remora's (the worker refuses to load it as NVIDIA's CUPTI).
CUPTI_EXPORT const int remora_cupti_facade_v1 = 1;

namespace {

namespace wire = remora::api::activity;

struct Subscriber {
  CUpti_CallbackFunc callback;
  void* userdata;
};

struct State {
  std::mutex mu;
  std::set<CUpti_ActivityKind> enabled;
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  CUpti_TimestampCallbackFunc clock = nullptr;
  uint32_t remote = 0;    // the kinds the worker collects
  int64_t offset = 0;     // CLOCK_MONOTONIC - worker clock, ns (Measured)
  uint64_t offset_rtt = UINT64_MAX;  // the round trip the offset was measured in
  // The application's clock against CLOCK_MONOTONIC: a pair read when collection started (or
  // the clock was registered), for the rate of a clock that does not count nanoseconds (kineto
  // registers the CPU's time-stamp counter).
  uint64_t cal_mono = 0, cal_client = 0;
  size_t dropped = 0;
  // Records pulled from the worker and not yet in the application's buffers (collected while
  // their kinds were enabled: they are delivered even if a kind was disabled since).
  std::vector<wire::Record> pending;
  // The CUPTI kind kernel records get: CONCURRENT_KERNEL unless only KERNEL was enabled.
  CUpti_ActivityKind kernel_kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  // A buffer the application gave (bufferRequested) while collecting, not yet completed: as
  // NVIDIA's CUPTI, one is asked for once collection starts (kineto flushes only when it has
  // given one).
  uint8_t* held = nullptr;
  size_t held_size = 0, held_max_records = 0;
  Subscriber* subscriber = nullptr;
  std::unordered_map<int, std::vector<uint8_t>> attributes;
};
State& S() {
  static State* s = new State;  // never destroyed: the application may call in at exit
  return *s;
}

// Kernel names live as long as the process, as CUPTI's do (records point at them).
const char* Intern(const std::string& name) {
  static std::mutex mu;
  static auto* names = new std::unordered_set<std::string>;
  std::lock_guard<std::mutex> lock(mu);
  return names->insert(name).first->c_str();
}

uint64_t MonoNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint64_t ClientNow(const State& s) {
  if (s.clock != nullptr) return s.clock();
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The wire kind an activity kind asks the worker for; 0 for kinds served without records;
// -1 for kinds not served.
int64_t RemoteKind(CUpti_ActivityKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return wire::kKernels;
    case CUPTI_ACTIVITY_KIND_MEMCPY: return wire::kMemcpys;
    case CUPTI_ACTIVITY_KIND_MEMSET: return wire::kMemsets;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return wire::kExternalCorrelations;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
    case CUPTI_ACTIVITY_KIND_NAME:
    case CUPTI_ACTIVITY_KIND_MARKER:
    case CUPTI_ACTIVITY_KIND_MARKER_DATA:
    case CUPTI_ACTIVITY_KIND_CONTEXT:
    case CUPTI_ACTIVITY_KIND_DEVICE:
    case CUPTI_ACTIVITY_KIND_CUDA_EVENT:
    case CUPTI_ACTIVITY_KIND_MEMORY2:
    case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
    case CUPTI_ACTIVITY_KIND_STREAM: return 0;
    default: return k > CUPTI_ACTIVITY_KIND_INVALID && k < CUPTI_ACTIVITY_KIND_COUNT ? -1 : -2;
  }
}

uint32_t WantedRemote(const State& s) {
  uint32_t m = 0;
  for (CUpti_ActivityKind k : s.enabled)
    if (int64_t r = RemoteKind(k); r > 0) m |= static_cast<uint32_t>(r);
  return m;
}

// The application's clock and CLOCK_MONOTONIC read together.
std::pair<uint64_t, uint64_t> Pair(const State& s) {
  uint64_t m0 = MonoNow(), c = ClientNow(s), m1 = MonoNow();
  return {m0 / 2 + m1 / 2, c};
}
void Calibrate(State& s) { std::tie(s.cal_mono, s.cal_client) = Pair(s); }

// A worker time in the application's clock: to CLOCK_MONOTONIC by the measured offset, then
// to the application's clock by the pair `now` and the rate between the two since calibration.
struct ToClient {
  explicit ToClient(const State& s) : s_(s) {
    std::tie(mono_, client_) = Pair(s);
    if (s.cal_mono != 0 && mono_ > s.cal_mono + 1000000 && client_ > s.cal_client)
      rate_ = double(client_ - s.cal_client) / double(mono_ - s.cal_mono);
  }
  uint64_t operator()(uint64_t worker) const {
    if (worker == 0) return 0;
    double mono = double(static_cast<int64_t>(worker) + s_.offset);
    return static_cast<uint64_t>(double(client_) + (mono - double(mono_)) * rate_);
  }

 private:
  const State& s_;
  uint64_t mono_ = 0, client_ = 0;
  double rate_ = 1.0;
};

// A sample of the worker's clock `now` taken during a round trip from t0 to t1 (CLOCK_MONOTONIC):
// the offset is the one measured in the shortest round trip yet (its error is at most half of
// that trip; a long trip, where the worker did work before reading its clock, is not used).
void Measured(State& s, uint64_t t0, uint64_t t1, uint64_t now) {
  if (t1 < t0 || t1 - t0 >= s.offset_rtt) return;
  s.offset_rtt = t1 - t0;
  s.offset = static_cast<int64_t>(t0 / 2 + t1 / 2) - static_cast<int64_t>(now);
}

// Tells the worker what to collect when that changed (mu held).
CUptiResult SyncRemote(State& s) {
  uint32_t want = WantedRemote(s);
  if (want == s.remote) return CUPTI_SUCCESS;
  uint64_t t0 = MonoNow(), now = 0;
  if (remora_core_activity_enable(want, &now) != 0) return CUPTI_ERROR_NOT_SUPPORTED;
  Measured(s, t0, MonoNow(), now);
  if (s.remote == 0) Calibrate(s);
  s.remote = want;
  return CUPTI_SUCCESS;
}

size_t RecordSize(CUpti_ActivityKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    default: return 0;
  }
}
size_t Aligned(size_t n) { return (n + 7) & ~size_t{7}; }

// Writes `r` at `at` (RecordSize bytes, zeroed) in CUPTI's layout.
bool Write(const State& s, const ToClient& T, const wire::Record& r, void* at) {
  switch (r.kind) {
    case wire::RecordKind::kKernel: {
      auto* k = static_cast<CUpti_ActivityKernel10*>(at);
      k->kind = s.kernel_kind;
      k->start = T(r.start);
      k->end = T(r.end);
      k->completed = k->end;
      k->deviceId = r.device;
      k->contextId = r.context;
      k->streamId = r.stream;
      k->gridX = r.grid[0], k->gridY = r.grid[1], k->gridZ = r.grid[2];
      k->blockX = r.block[0], k->blockY = r.block[1], k->blockZ = r.block[2];
      k->staticSharedMemory = r.static_shared;
      k->dynamicSharedMemory = r.dynamic_shared;
      k->registersPerThread = static_cast<uint16_t>(r.registers);
      k->correlationId = r.correlation;
      k->name = Intern(r.name);
      return true;
    }
    case wire::RecordKind::kMemcpy: {
      auto* m = static_cast<CUpti_ActivityMemcpy6*>(at);
      m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      m->copyKind = r.copy_kind;
      m->srcKind = r.src_kind;
      m->dstKind = r.dst_kind;
      m->bytes = r.bytes;
      m->start = T(r.start);
      m->end = T(r.end);
      m->deviceId = r.device;
      m->contextId = r.context;
      m->streamId = r.stream;
      m->correlationId = r.correlation;
      m->copyCount = 1;
      return true;
    }
    case wire::RecordKind::kMemset: {
      auto* m = static_cast<CUpti_ActivityMemset4*>(at);
      m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
      m->value = r.value;
      m->bytes = r.bytes;
      m->start = T(r.start);
      m->end = T(r.end);
      m->deviceId = r.device;
      m->contextId = r.context;
      m->streamId = r.stream;
      m->correlationId = r.correlation;
      m->memoryKind = r.dst_kind;
      return true;
    }
    case wire::RecordKind::kExternalCorrelation: {
      auto* e = static_cast<CUpti_ActivityExternalCorrelation*>(at);
      e->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
      e->externalKind = static_cast<CUpti_ExternalCorrelationKind>(r.external_kind);
      e->externalId = r.external_id;
      e->correlationId = r.correlation;
      return true;
    }
  }
  return false;
}

CUpti_ActivityKind KindOf(const wire::Record& r, const State& s) {
  switch (r.kind) {
    case wire::RecordKind::kKernel: return s.kernel_kind;
    case wire::RecordKind::kMemcpy: return CUPTI_ACTIVITY_KIND_MEMCPY;
    case wire::RecordKind::kMemset: return CUPTI_ACTIVITY_KIND_MEMSET;
    case wire::RecordKind::kExternalCorrelation: return CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  }
  return CUPTI_ACTIVITY_KIND_INVALID;
}

// Brings what the worker collected so far into s.pending (mu held).
CUptiResult Pull(State& s) {
  if (s.remote == 0) return CUPTI_SUCCESS;
  std::vector<char> buf(1 << 20);
  for (unsigned more = 1; more != 0;) {
    size_t used = 0;
    uint64_t now = 0, dropped = 0;
    uint64_t t0 = MonoNow();
    if (remora_core_activity_flush(buf.data(), buf.size(), &used, &more, &now, &dropped) != 0) return CUPTI_ERROR_UNKNOWN;
    s.dropped += dropped;
    Measured(s, t0, MonoNow(), now);
    std::string error;
    if (!wire::Parse(buf.data(), used, &s.pending, &error)) return CUPTI_ERROR_UNKNOWN;
  }
  return CUPTI_SUCCESS;
}

// Asks the application for a buffer to hold (none held, callbacks registered). Unlocks `lock`
// while its callback runs.
void Hold(std::unique_lock<std::mutex>& lock, State& s) {
  if (s.held != nullptr || s.requested == nullptr) return;
  auto requested = s.requested;
  lock.unlock();
  uint8_t* buffer = nullptr;
  size_t size = 0, max_records = 0;
  requested(&buffer, &size, &max_records);
  lock.lock();
  if (buffer == nullptr || size == 0) return;
  if (s.held != nullptr) {  // another thread got one meanwhile: hand this one back empty
    auto completed = s.completed;
    lock.unlock();
    if (completed != nullptr) completed(nullptr, 0, buffer, size, 0);
    lock.lock();
    return;
  }
  s.held = buffer, s.held_size = size, s.held_max_records = max_records;
}

// Hands s.pending to the application's buffers, the held one first, and completes each
// (the held one even when empty, as a forced flush does). Unlocks `lock` around callbacks.
void Deliver(std::unique_lock<std::mutex>& lock, State& s) {
  if (s.requested == nullptr || s.completed == nullptr) {
    s.dropped += s.pending.size();
    s.pending.clear();
    return;
  }
  std::vector<wire::Record> records = std::move(s.pending);
  s.pending.clear();
  const ToClient to_client(s);
  size_t next = 0;
  do {
    Hold(lock, s);
    if (s.held == nullptr) {
      s.dropped += records.size() - next;
      return;
    }
    uint8_t* buffer = s.held;
    size_t size = s.held_size, max_records = s.held_max_records;
    s.held = nullptr;
    size_t valid = 0, count = 0;
    for (; next < records.size(); next++) {
      size_t bytes = Aligned(RecordSize(KindOf(records[next], s)));
      if (valid + bytes > size || (max_records != 0 && count == max_records)) break;
      std::memset(buffer + valid, 0, bytes);
      if (!Write(s, to_client, records[next], buffer + valid)) continue;
      valid += bytes;
      count++;
    }
    if (count == 0 && next < records.size()) {  // the buffer holds not even one record
      s.dropped++;
      next++;
    }
    auto completed = s.completed;
    lock.unlock();
    completed(nullptr, 0, buffer, size, valid);
    lock.lock();
  } while (next < records.size());
}

// cuptiActivityFlushAll: brings the worker's records over and hands them to the application.
CUptiResult FlushAll() {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  CUptiResult r = Pull(s);
  if (s.remote != 0 && WantedRemote(s) == 0) (void)SyncRemote(s);  // every kind was disabled
  if (s.pending.empty() && s.held == nullptr) return r;
  Deliver(lock, s);
  // Still collecting: a buffer for what comes next, as NVIDIA's CUPTI keeps one.
  if (s.remote != 0) Hold(lock, s);
  return r;
}

// The application's external correlation ids, per thread and kind: whether each was posted.
thread_local std::unordered_map<int, std::vector<std::pair<uint64_t, bool>>> t_external;

}  // namespace

CUPTI_EXPORT CUptiResult cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *timestamp = ClientNow(s);
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                        CUpti_BuffersCallbackCompleteFunc completed) {
  if (requested == nullptr || completed == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.requested = requested;
  s.completed = completed;
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc clock) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.clock = clock;
  Calibrate(s);  // another clock: its rate is measured from now
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  int64_t r = RemoteKind(kind);
  if (r == -2) return CUPTI_ERROR_INVALID_KIND;
  if (r == -1) return CUPTI_ERROR_NOT_SUPPORTED;
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  bool added = s.enabled.insert(kind).second;
  CUptiResult res = SyncRemote(s);
  if (res != CUPTI_SUCCESS && added) s.enabled.erase(kind);
  if (res != CUPTI_SUCCESS) return res;
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || kind == CUPTI_ACTIVITY_KIND_KERNEL) s.kernel_kind = kind;
  if (s.remote != 0) Hold(lock, s);
  return res;
}

CUPTI_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (RemoteKind(kind) == -2) return CUPTI_ERROR_INVALID_KIND;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.enabled.erase(kind);
  if (s.enabled.count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) s.kernel_kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  else if (s.enabled.count(CUPTI_ACTIVITY_KIND_KERNEL)) s.kernel_kind = CUPTI_ACTIVITY_KIND_KERNEL;
  // What was collected stays to be flushed (as with NVIDIA's CUPTI): brought over before the
  // worker stops collecting a kind, which drops what it holds.
  if ((WantedRemote(s) & s.remote) != s.remote) {
    if (CUptiResult r = Pull(s); r != CUPTI_SUCCESS) return r;
  }
  // The last kind off: the worker stops at the next flush (kineto's, which follows), so that
  // records of work finished late still come over with it.
  if (WantedRemote(s) == 0) return CUPTI_SUCCESS;
  return SyncRemote(s);
}

CUPTI_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t) { return FlushAll(); }
CUPTI_EXPORT CUptiResult cuptiActivityFlush(CUcontext, uint32_t, uint32_t) { return FlushAll(); }

CUPTI_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t at = 0;
  if (*record != nullptr) {
    auto* cur = reinterpret_cast<uint8_t*>(*record);
    if (cur < buffer || cur >= buffer + valid) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t size = RecordSize((*record)->kind);
    if (size == 0) return CUPTI_ERROR_INVALID_KIND;
    at = static_cast<size_t>(cur - buffer) + Aligned(size);
  }
  if (at >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  auto* next = reinterpret_cast<CUpti_Activity*>(buffer + at);
  if (RecordSize(next->kind) == 0 || at + RecordSize(next->kind) > valid) return CUPTI_ERROR_INVALID_KIND;
  *record = next;
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *dropped = s.dropped;
  s.dropped = 0;
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  bool post;
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    post = s.remote != 0;
  }
  if (post && remora_core_activity_push(kind, id) != 0) post = false;
  t_external[kind].emplace_back(id, post);
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* last) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  auto& stack = t_external[kind];
  if (stack.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  auto [id, posted] = stack.back();
  stack.pop_back();
  if (posted) (void)remora_core_activity_pop(kind);
  if (last != nullptr) *last = id;
  return CUPTI_SUCCESS;
}

// The activity attributes size the buffers of NVIDIA's CUPTI on the device; here they are
// kept and reported (the worker's CUPTI uses its own defaults).
CUPTI_EXPORT CUptiResult cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t* size, void* value) {
  if (size == nullptr || value == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  if (attr < CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE || attr > CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED || *size == 0 ||
      *size > 8)
    return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* p = static_cast<const uint8_t*>(value);
  s.attributes[attr].assign(p, p + *size);
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiActivityGetAttribute(CUpti_ActivityAttribute attr, size_t* size, void* value) {
  if (size == nullptr || value == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  if (attr < CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE || attr > CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED)
    return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.attributes.find(attr);
  if (it != s.attributes.end()) {
    if (*size < it->second.size()) return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
    std::memcpy(value, it->second.data(), it->second.size());
    *size = it->second.size();
    return CUPTI_SUCCESS;
  }
  // Not set: NVIDIA's defaults (a byte for the switches, a size_t for the rest).
  bool flag = attr == CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER || attr == CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED;
  size_t need = flag ? 1 : sizeof(size_t);
  if (*size < need) return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
  std::memset(value, 0, need);
  if (attr == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE || attr == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_CDP) {
    size_t v = 8 << 20;
    std::memcpy(value, &v, sizeof(v));
  }
  *size = need;
  return CUPTI_SUCCESS;
}

// Switches of what NVIDIA's CUPTI records about the API kinds and events: accepted (those
// records are not produced here; see the top of this file).
CUPTI_EXPORT CUptiResult cuptiActivityEnableDriverApi(CUpti_CallbackId, uint8_t) { return CUPTI_SUCCESS; }
CUPTI_EXPORT CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId, uint8_t) { return CUPTI_SUCCESS; }
CUPTI_EXPORT CUptiResult cuptiActivityEnableCudaEventDeviceTimestamps(uint8_t) { return CUPTI_SUCCESS; }
CUPTI_EXPORT CUptiResult cuptiActivityEnableLatencyTimestamps(uint8_t) { return CUPTI_SUCCESS; }
CUPTI_EXPORT CUptiResult cuptiActivityEnableLaunchAttributes(uint8_t) { return CUPTI_SUCCESS; }
CUPTI_EXPORT CUptiResult cuptiActivityEnableAllSyncRecords(uint8_t) { return CUPTI_SUCCESS; }

// The callback API: one subscriber, as NVIDIA's CUPTI allows; no callback is made (the API
// calls happen in this process, but the driver events they stand for happen on the server).
CUPTI_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  if (subscriber == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.subscriber != nullptr) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  s.subscriber = new Subscriber{callback, userdata};
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(s.subscriber);
  return CUPTI_SUCCESS;
}
CUPTI_EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata,
                                          CUpti_SubscriberParams*) {
  return cuptiSubscribe(subscriber, callback, userdata);
}
CUPTI_EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (subscriber == nullptr || reinterpret_cast<Subscriber*>(subscriber) != s.subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
  delete s.subscriber;
  s.subscriber = nullptr;
  return CUPTI_SUCCESS;
}
static CUptiResult CheckSubscriber(CUpti_SubscriberHandle subscriber) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return subscriber != nullptr && reinterpret_cast<Subscriber*>(subscriber) == s.subscriber ? CUPTI_SUCCESS
                                                                                             : CUPTI_ERROR_INVALID_PARAMETER;
}
CUPTI_EXPORT CUptiResult cuptiEnableCallback(uint32_t, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain, CUpti_CallbackId) {
  return CheckSubscriber(subscriber);
}
CUPTI_EXPORT CUptiResult cuptiEnableDomain(uint32_t, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain) {
  return CheckSubscriber(subscriber);
}
CUPTI_EXPORT CUptiResult cuptiEnableAllDomains(uint32_t, CUpti_SubscriberHandle subscriber) { return CheckSubscriber(subscriber); }

CUPTI_EXPORT CUptiResult cuptiFinalize(void) {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  (void)Pull(s);
  s.enabled.clear();
  (void)SyncRemote(s);
  if (!s.pending.empty() || s.held != nullptr) Deliver(lock, s);
  s.requested = nullptr;
  s.completed = nullptr;
  return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (str == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
#define R(x) \
  case x: *str = #x; return CUPTI_SUCCESS;
    R(CUPTI_SUCCESS) R(CUPTI_ERROR_INVALID_PARAMETER) R(CUPTI_ERROR_INVALID_DEVICE) R(CUPTI_ERROR_INVALID_CONTEXT)
    R(CUPTI_ERROR_MAX_LIMIT_REACHED) R(CUPTI_ERROR_NOT_INITIALIZED) R(CUPTI_ERROR_QUEUE_EMPTY) R(CUPTI_ERROR_INVALID_KIND)
    R(CUPTI_ERROR_NOT_SUPPORTED) R(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) R(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT)
    R(CUPTI_ERROR_UNKNOWN)
#undef R
    default: *str = "CUPTI_ERROR_UNKNOWN"; return CUPTI_ERROR_INVALID_PARAMETER;
  }
}

CUPTI_EXPORT CUptiResult cuptiGetLastError(void) { return CUPTI_SUCCESS; }

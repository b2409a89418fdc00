// The cuda backend's Activity (activity.h): NVIDIA's CUPTI, loaded into the worker on the
// first remoraActivityEnable. A worker process serves one session, and CUPTI's activity API is
// per process, so what it collects is that session's work and no one else's.
//
// CUPTI hands completed buffers to BufferCompleted (on CUPTI's thread, or the flushing one);
// their records are translated to the wire form there and kept until Flush. Buffers come from
// BufferRequested (8 MiB each, as many as CUPTI asks for while collecting).
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "remora/base/log.h"
#include "worker/backend/activity.h"

namespace remora::worker {
namespace {

using api::activity::Record;
using api::activity::RecordKind;

struct CuptiApi {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks;
  decltype(&cuptiActivityEnable) enable;
  decltype(&cuptiActivityDisable) disable;
  decltype(&cuptiActivityFlushAll) flush_all;
  decltype(&cuptiActivityGetNextRecord) next_record;
  decltype(&cuptiActivityPushExternalCorrelationId) push;
  decltype(&cuptiActivityPopExternalCorrelationId) pop;
  decltype(&cuptiGetTimestamp) timestamp;
  decltype(&cuptiGetResultString) result_string;
};

// The kinds of CUPTI collected for each wire kind. The driver API's records are not sent:
// they are enabled because CUPTI labels a call with the pushed external ids when it traces it.
struct KindMap {
  uint32_t bit;
  CUpti_ActivityKind kind;
};
constexpr KindMap kKinds[] = {
    {api::activity::kKernels, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL},
    {api::activity::kMemcpys, CUPTI_ACTIVITY_KIND_MEMCPY},
    {api::activity::kMemsets, CUPTI_ACTIVITY_KIND_MEMSET},
    {api::activity::kExternalCorrelations, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION},
    {api::activity::kExternalCorrelations, CUPTI_ACTIVITY_KIND_DRIVER},
};

constexpr size_t kBufferBytes = 8 << 20;

class CuptiActivity;
CuptiActivity* g_active = nullptr;  // CUPTI's callbacks take no context: the one instance

class CuptiActivity final : public Activity {
 public:
  explicit CuptiActivity(void* lib, CuptiApi api) : lib_(lib), api_(api) { g_active = this; }
  ~CuptiActivity() override {
    (void)Enable(0);
    g_active = nullptr;
    // CUPTI stays loaded: it cannot be unloaded while the driver holds its hooks.
    (void)lib_;
  }

  Status Enable(uint32_t kinds) override {
    if (!registered_) {
      RETURN_IF_ERROR(Check(api_.register_callbacks(&BufferRequested, &BufferCompleted), "cuptiActivityRegisterCallbacks"));
      registered_ = true;
    }
    kinds &= api::activity::kAllKinds;
    for (const KindMap& k : kKinds) {
      bool want = (kinds & k.bit) != 0, had = (kinds_ & k.bit) != 0;
      if (want && !had) RETURN_IF_ERROR(Check(api_.enable(k.kind), "cuptiActivityEnable"));
      if (!want && had) (void)api_.disable(k.kind);
    }
    kinds_ = kinds;
    if (kinds == 0) {
      (void)api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      std::lock_guard<std::mutex> lock(mu_);
      records_.clear();
      dropped_ = 0;
    }
    return Status::Ok();
  }

  uint64_t Now() override {
    uint64_t t = 0;
    (void)api_.timestamp(&t);
    return t;
  }

  Status Push(uint32_t kind, uint64_t id) override {
    return Check(api_.push(static_cast<CUpti_ExternalCorrelationKind>(kind), id), "cuptiActivityPushExternalCorrelationId");
  }
  Status Pop(uint32_t kind) override {
    uint64_t last = 0;
    return Check(api_.pop(static_cast<CUpti_ExternalCorrelationKind>(kind), &last), "cuptiActivityPopExternalCorrelationId");
  }

  Status Flush(std::vector<Record>* records, uint64_t* dropped) override {
    // Forced: the records of work done so far, also from buffers CUPTI has not filled (an
    // unforced flush hands over full buffers only, and a profiler's window is often less).
    RETURN_IF_ERROR(Check(api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll"));
    std::lock_guard<std::mutex> lock(mu_);
    for (Record& r : records_) records->push_back(std::move(r));
    records_.clear();
    *dropped = dropped_;
    dropped_ = 0;
    return Status::Ok();
  }

 private:
  Status Check(CUptiResult r, const char* call) {
    if (r == CUPTI_SUCCESS) return Status::Ok();
    const char* text = nullptr;
    (void)api_.result_string(r, &text);
    return Error(Err::kNotSupported, "{} failed on the server: {} ({})", call, text ? text : "?", static_cast<int>(r));
  }

  static void BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }

  static void BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    if (g_active != nullptr) g_active->Take(buffer, valid);
    std::free(buffer);
  }

  void Take(uint8_t* buffer, size_t valid) {
    std::vector<Record> got;
    CUpti_Activity* a = nullptr;
    while (api_.next_record(buffer, valid, &a) == CUPTI_SUCCESS) {
      Record r;
      switch (a->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
          r.kind = RecordKind::kKernel;
          r.start = k->start;
          r.end = k->end;
          r.correlation = k->correlationId;
          r.device = k->deviceId;
          r.context = k->contextId;
          r.stream = k->streamId;
          r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
          r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
          r.static_shared = k->staticSharedMemory;
          r.dynamic_shared = k->dynamicSharedMemory;
          r.registers = k->registersPerThread;
          if (k->name != nullptr) r.name = k->name;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
          r.kind = RecordKind::kMemcpy;
          r.start = m->start;
          r.end = m->end;
          r.correlation = m->correlationId;
          r.device = m->deviceId;
          r.context = m->contextId;
          r.stream = m->streamId;
          r.bytes = m->bytes;
          r.copy_kind = m->copyKind;
          r.src_kind = m->srcKind;
          r.dst_kind = m->dstKind;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
          r.kind = RecordKind::kMemset;
          r.start = m->start;
          r.end = m->end;
          r.correlation = m->correlationId;
          r.device = m->deviceId;
          r.context = m->contextId;
          r.stream = m->streamId;
          r.bytes = m->bytes;
          r.value = m->value;
          r.dst_kind = static_cast<uint8_t>(m->memoryKind);
          break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
          const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(a);
          r.kind = RecordKind::kExternalCorrelation;
          r.correlation = e->correlationId;
          r.external_kind = e->externalKind;
          r.external_id = e->externalId;
          break;
        }
        default:
          continue;  // the driver API's records (see kKinds) and anything else
      }
      got.push_back(std::move(r));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (kinds_ == 0) return;
    for (Record& r : got) {
      if (records_.size() >= kMaxHeldRecords) {
        dropped_++;
        continue;
      }
      records_.push_back(std::move(r));
    }
  }

  void* lib_;
  CuptiApi api_;
  bool registered_ = false;
  std::atomic<uint32_t> kinds_{0};  // written by the executor's thread, read by CUPTI's
  std::mutex mu_;
  std::vector<Record> records_;
  uint64_t dropped_ = 0;  // since the last flush (kMaxHeldRecords)
};

std::vector<std::string> Candidates() {
  constexpr const char* kSoname = "libcupti.so.13";
  std::vector<std::string> out;
  if (const char* f = std::getenv("REMORA_CUPTI_PATH"); f != nullptr && *f) out.push_back(f);
  if (const char* path = std::getenv("REMORA_LIBRARY_PATH"); path != nullptr) {
    std::string p = path;
    for (size_t start = 0; start <= p.size();) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      if (end > start) out.push_back(p.substr(start, end - start) + "/" + kSoname);
      start = end + 1;
    }
  }
  out.push_back(kSoname);
  out.push_back(std::string("/usr/local/cuda/lib64/") + kSoname);
  out.push_back(std::string("/usr/local/cuda/extras/CUPTI/lib64/") + kSoname);
  return out;
}

}  // namespace

Result<std::unique_ptr<Activity>> MakeCuptiActivity() {
  if (g_active != nullptr) return Error(Err::kNotSupported, "CUPTI is already in use in this worker");
  std::string errors;
  for (const std::string& path : Candidates()) {
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      if (const char* e = ::dlerror()) errors += "\n  " + std::string(e);
      continue;
    }
    if (::dlsym(h, "remora_cupti_facade_v1") != nullptr) {  // Remora's client library, not NVIDIA's
      ::dlclose(h);
      errors += "\n  " + path + " is Remora's client library, not NVIDIA's";
      continue;
    }
    CuptiApi api{};
    bool ok = true;
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
      ok = ok && fn != nullptr;
    };
    load(api.register_callbacks, "cuptiActivityRegisterCallbacks");
    load(api.enable, "cuptiActivityEnable");
    load(api.disable, "cuptiActivityDisable");
    load(api.flush_all, "cuptiActivityFlushAll");
    load(api.next_record, "cuptiActivityGetNextRecord");
    load(api.push, "cuptiActivityPushExternalCorrelationId");
    load(api.pop, "cuptiActivityPopExternalCorrelationId");
    load(api.timestamp, "cuptiGetTimestamp");
    load(api.result_string, "cuptiGetResultString");
    if (!ok) {
      ::dlclose(h);
      errors += "\n  " + path + " lacks a function of CUPTI's activity API";
      continue;
    }
    LOG_INFO("loaded CUPTI from {}", path);
    return std::unique_ptr<Activity>(new CuptiActivity(h, api));
  }
  return Error(Err::kNotSupported,
               "CUPTI (libcupti.so.13) is not installed on this GPU server (set REMORA_CUPTI_PATH or "
               "REMORA_LIBRARY_PATH):{}",
               errors);
}

}  // namespace remora::worker

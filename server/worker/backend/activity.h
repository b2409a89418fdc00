// A session's GPU activity (docs/ARCHITECTURE.md, "Profiling (CUPTI)"): what the client's
// libcupti.so.13 asks for through remoraActivityEnable/Push/Pop/Flush (hooks/activity_hooks.cc).
//
// Each backend has its source behind this interface (Driver::activity()): the cuda backend
// NVIDIA's CUPTI in the worker's process (cuda_activity.cc), which sees only this session's
// work because a worker process serves one session; the host-emulated backend records it
// synthesizes as it emulates (SynthesizedActivity below). Records go out in the wire form of
// protocol/api/activity_wire.h, times in Now()'s clock, devices as the worker's GPU indices
// (the hook makes them the application's ordinals).
//
// Thread-safety: Enable, Push, Pop, Flush and Now are called by the executor's thread only;
// a backend may record from its own threads (stream threads, CUPTI's).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "activity_wire.h"
#include "remora/base/status.h"

namespace remora::worker {

class Activity {
 public:
  virtual ~Activity() = default;
  // Collects the kinds of `kinds` (activity_wire.h's Kinds) from now on; 0 stops, and drops
  // what was collected and not flushed.
  virtual Status Enable(uint32_t kinds) = 0;
  // The clock the records' times are in, in nanoseconds.
  virtual uint64_t Now() = 0;
  // The application's external correlation id `id` of CUPTI's kind `kind` labels the calls
  // that follow until the matching Pop (a stack per kind).
  virtual Status Push(uint32_t kind, uint64_t id) = 0;
  virtual Status Pop(uint32_t kind) = 0;
  // Moves the records of the work done so far into *records (appended, wire form); *dropped:
  // how many were dropped since the last flush because kMaxHeldRecords were held.
  virtual Status Flush(std::vector<api::activity::Record>* records, uint64_t* dropped) = 0;
};

// The records a source holds between two flushes (about 40 MB): a profiler that never flushes
// must not grow the worker without bound. Beyond it records are dropped and counted, as
// NVIDIA's CUPTI drops them when its buffers run out (cuptiActivityGetNumDroppedRecords).
constexpr size_t kMaxHeldRecords = size_t{1} << 18;

// Records made by a backend that emulates the GPU (host-emulated): a kernel at the moment it
// is launched (it is not executed: zero duration), a copy or a memset when its stream runs it
// (its real duration). Each call that records gets a correlation id, and an external
// correlation record per kind with an id pushed, as CUPTI gives.
class SynthesizedActivity final : public Activity {
 public:
  Status Enable(uint32_t kinds) override;
  uint64_t Now() override;
  Status Push(uint32_t kind, uint64_t id) override;
  Status Pop(uint32_t kind) override;
  Status Flush(std::vector<api::activity::Record>* records, uint64_t* dropped) override;

  // For the backend, on the executor's thread: whether `kind` (a Kinds bit) is collected, and
  // a correlation id for a call that does work of that kind (with its external correlation
  // records). 0 when the kind is not collected.
  bool Collects(uint32_t kind);
  uint32_t Correlate(uint32_t kind);
  // A small number for a stream (stable while the stream lives; 0 for the legacy stream).
  uint32_t StreamId(const void* stream);
  // From any thread: a record of a call Correlate() numbered (dropped if collection stopped).
  void Add(api::activity::Record r);

 private:
  std::mutex mu_;
  uint32_t kinds_ = 0;
  uint32_t next_correlation_ = 1;
  std::unordered_map<uint32_t, std::vector<uint64_t>> external_;  // kind -> the pushed ids
  std::unordered_map<const void*, uint32_t> streams_;
  std::vector<api::activity::Record> records_;
  uint64_t dropped_ = 0;
  void Keep(api::activity::Record r);  // mu_ held
};

// NVIDIA's CUPTI in this process (the cuda backend): loaded on first use from
// REMORA_CUPTI_PATH, REMORA_LIBRARY_PATH's directories, the loader's path or the CUDA
// toolkit's; kNotSupported (saying where it looked) when there is none.
Result<std::unique_ptr<Activity>> MakeCuptiActivity();

}  // namespace remora::worker

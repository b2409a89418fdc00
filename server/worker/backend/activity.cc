#include "worker/backend/activity.h"

#include <utility>

#include "remora/base/util.h"

namespace remora::worker {

using api::activity::Record;
using api::activity::RecordKind;

Status SynthesizedActivity::Enable(uint32_t kinds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kinds == 0) {
    records_.clear();
    dropped_ = 0;
  }
  kinds_ = kinds & api::activity::kAllKinds;
  return Status::Ok();
}

uint64_t SynthesizedActivity::Now() { return MonotonicNanos(); }

Status SynthesizedActivity::Push(uint32_t kind, uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  external_[kind].push_back(id);
  return Status::Ok();
}

Status SynthesizedActivity::Pop(uint32_t kind) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = external_.find(kind);
  if (it == external_.end() || it->second.empty())
    return Error(Err::kInvalidValue, "no external correlation id of kind {} to pop", kind);
  it->second.pop_back();
  return Status::Ok();
}

Status SynthesizedActivity::Flush(std::vector<Record>* records, uint64_t* dropped) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Record& r : records_) records->push_back(std::move(r));
  records_.clear();
  *dropped = dropped_;
  dropped_ = 0;
  return Status::Ok();
}

void SynthesizedActivity::Keep(Record r) {
  if (records_.size() >= kMaxHeldRecords) {
    dropped_++;
    return;
  }
  records_.push_back(std::move(r));
}

bool SynthesizedActivity::Collects(uint32_t kind) {
  std::lock_guard<std::mutex> lock(mu_);
  return (kinds_ & kind) != 0;
}

uint32_t SynthesizedActivity::Correlate(uint32_t kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if ((kinds_ & kind) == 0) return 0;
  uint32_t id = next_correlation_++;
  if (next_correlation_ == 0) next_correlation_ = 1;
  if (kinds_ & api::activity::kExternalCorrelations) {
    for (const auto& [k, ids] : external_) {
      if (ids.empty()) continue;
      Record r;
      r.kind = RecordKind::kExternalCorrelation;
      r.correlation = id;
      r.external_kind = k;
      r.external_id = ids.back();
      Keep(std::move(r));
    }
  }
  return id;
}

uint32_t SynthesizedActivity::StreamId(const void* stream) {
  if (stream == nullptr) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = streams_.emplace(stream, static_cast<uint32_t>(streams_.size() + 1));
  (void)added;
  return it->second;
}

void SynthesizedActivity::Add(Record r) {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t bit = r.kind == RecordKind::kKernel   ? api::activity::kKernels
                 : r.kind == RecordKind::kMemcpy ? api::activity::kMemcpys
                                                 : api::activity::kMemsets;
  if (kinds_ & bit) Keep(std::move(r));
}

}  // namespace remora::worker

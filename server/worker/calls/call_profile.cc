#include "worker/calls/call_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "remora/base/log.h"

namespace remora::worker {

CallProfile* CallProfile::Get() {
  static CallProfile* profile = [] {
    const char* dir = std::getenv("REMORA_WORKER_PROFILE");
    return dir != nullptr && dir[0] != '\0' ? new CallProfile(dir) : nullptr;  // lives for the process
  }();
  return profile;
}

void CallProfile::Add(const char* name, uint64_t nanos) {
  constexpr size_t kSize = sizeof(entries_) / sizeof(entries_[0]);
  size_t i = (reinterpret_cast<uintptr_t>(name) >> 3) % kSize;
  for (size_t probe = 0; probe < kSize; probe++, i = (i + 1) % kSize) {
    Entry& e = entries_[i];
    if (e.name == nullptr) e.name = name;
    if (e.name != name) continue;
    e.calls++;
    e.total_ns += nanos;
    e.max_ns = std::max(e.max_ns, nanos);
    return;
  }
  dropped_++;
}

void CallProfile::Write(uint64_t session) const {
  std::vector<const Entry*> used;
  for (const Entry& e : entries_)
    if (e.name != nullptr) used.push_back(&e);
  std::sort(used.begin(), used.end(), [](const Entry* a, const Entry* b) { return a->total_ns > b->total_ns; });
  std::string path = dir_ + "/worker-profile-" + std::to_string(session) + ".jsonl";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    LOG_WARN("REMORA_WORKER_PROFILE: cannot write {}", path);
    return;
  }
  for (const Entry* e : used)
    std::fprintf(f, "{\"call\": \"%s\", \"calls\": %llu, \"total_ms\": %.3f, \"mean_us\": %.2f, \"max_us\": %.1f}\n", e->name,
                 static_cast<unsigned long long>(e->calls), e->total_ns / 1e6, e->total_ns / 1e3 / static_cast<double>(e->calls),
                 e->max_ns / 1e3);
  if (dropped_ != 0) std::fprintf(f, "{\"dropped\": %llu}\n", static_cast<unsigned long long>(dropped_));
  std::fclose(f);
  LOG_INFO("REMORA_WORKER_PROFILE: wrote {} ({} functions)", path, used.size());
}

}  // namespace remora::worker

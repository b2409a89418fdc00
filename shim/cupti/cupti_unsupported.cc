// The functions of NVIDIA's CUPTI that Remora's libcupti.so.13 does not serve (unsupported.inc):
// hardware counters and sampling of a GPU that tenants share (events, metrics, the range and
// PM-sampling profilers, PC and SASS sampling), replay modes, and queries of the local
// driver's objects. Each answers CUPTI_ERROR_NOT_SUPPORTED (27) and says so once on stderr.
// This file does not include cupti.h: every one of them returns a CUptiResult and no argument
// is read, so one definition serves each signature (System V x86-64 and AArch64 calls).
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

namespace {
constexpr int kNotSupported = 27;  // CUPTI_ERROR_NOT_SUPPORTED
int Refuse(const char* name) {
  static std::mutex mu;
  static auto* said = new std::set<std::string>;
  std::lock_guard<std::mutex> lock(mu);
  if (said->insert(name).second)
    std::fprintf(stderr, "remora: %s is not supported by Remora's CUPTI (CUPTI_ERROR_NOT_SUPPORTED)\n", name);
  return kNotSupported;
}
}  // namespace

#define X(name) \
  extern "C" __attribute__((visibility("default"))) int name() { return Refuse(#name); }
#include "unsupported.inc"
#undef X

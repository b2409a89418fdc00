#include "worker/session/limits.h"

#include "remora/base/util.h"

namespace remora::worker {
namespace {

constexpr const char* kNames[] = {"streams", "events", "modules", "module-bytes", "pools",
                                  "graphs", "callbacks", "pinned-bytes", "ipc-exports", "library-objects",
                                  "graph-nodes"};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Resource::kCount));

bool IsBytes(std::string_view name) { return name.ends_with("bytes"); }

}  // namespace

const char* ResourceName(Resource r) { return kNames[static_cast<int>(r)]; }

Status SessionLimits::Set(std::string_view a) {
  size_t eq = a.find('=');
  if (eq == std::string_view::npos) return Error(Err::kInvalidValue, "session limit '{}': expected NAME=VALUE", a);
  std::string_view name = a.substr(0, eq), value = a.substr(eq + 1);
  ASSIGN_OR_RETURN(std::optional<uint64_t> v, ParseSize(value));
  uint64_t n = v.value_or(UINT64_MAX);
  for (int i = 0; i < static_cast<int>(Resource::kCount); i++) {
    if (name == kNames[i]) {
      max[i] = n;
      return Status::Ok();
    }
  }
  if (name == "pending") pending_ops = n;
  else if (name == "spill-bytes") spill_bytes = n;
  else
    return Error(Err::kInvalidValue,
                 "unknown session limit '{}' (streams, events, modules, module-bytes, pools, graphs, callbacks, "
                 "pinned-bytes, ipc-exports, library-objects, graph-nodes, pending, spill-bytes)",
                 name);
  return Status::Ok();
}

Result<SessionLimits> SessionLimits::Parse(std::string_view text) {
  SessionLimits l;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    if (!item.empty()) RETURN_IF_ERROR(l.Set(item));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return l;
}

std::string SessionLimits::Format() const {
  std::string s;
  for (int i = 0; i < static_cast<int>(Resource::kCount); i++) s += fmt::format("{}={},", kNames[i], max[i]);
  s += fmt::format("pending={},spill-bytes={}", pending_ops, spill_bytes);
  return s;
}

Status ResourceCounter::Acquire(Resource r, uint64_t n) {
  uint64_t& h = held_[static_cast<int>(r)];
  uint64_t max = limits_.limit(r);
  if (n > max || h > max - n) {
    const char* name = ResourceName(r);
    std::string amount = IsBytes(name) ? FormatSize(max) : std::to_string(max);
    return Error(Err::kMemoryAllocation, "session limit reached: at most {} of {} (remora-server --session-limit {}=N)",
                 amount, name, name);
  }
  h += n;
  return Status::Ok();
}

Status ResourceCounter::Room(Resource r, uint64_t held_now, uint64_t adding) const {
  uint64_t max = limits_.limit(r);
  if (adding <= max && held_now <= max - adding) return Status::Ok();
  const char* name = ResourceName(r);
  return Error(Err::kMemoryAllocation, "session limit reached: at most {} {} (remora-server --session-limit {}=N)", max,
               name, name);
}

void ResourceCounter::Release(Resource r, uint64_t n) {
  uint64_t& h = held_[static_cast<int>(r)];
  h = n > h ? 0 : h - n;
}

}  // namespace remora::worker

#include "tree.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <optional>

#include "remora/base/util.h"

namespace remora::fs {
namespace {

constexpr size_t kMaxWrite = 4096;  // every value fits in one page, as in cgroupfs
constexpr unsigned kRwMode = 0644, kRoMode = 0444, kTokenMode = 0400;

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    if (slash > pos) parts.push_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return parts;
}

// A canonical decimal number (no sign, no leading zero); nullopt otherwise.
std::optional<uint64_t> ParseId(std::string_view s) {
  if (s.empty() || s.size() > 18 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

// Whether the server lists tenant `name`; nullopt if it cannot be asked.
std::optional<bool> Listed(admin::AdminClient& client, const std::string& name) {
  auto tenants = client.ListTenants();
  if (!tenants.ok()) return std::nullopt;
  return std::any_of(tenants->begin(), tenants->end(), [&](const admin::TenantInfo& t) { return t.name == name; });
}

FsStatus NoEntry() { return {ENOENT, "no such file or directory"}; }

// The server's message may quote what the caller wrote (a tenant name with a newline, say):
// it is made one line like any text from outside.
FsStatus ServerError(const Status& st, std::string_view what) {
  return {ErrnoFor(st), std::string(what) + ": " + Printable(st.message(), 512)};
}

std::string Line(const std::string& s) { return s + "\n"; }
std::string Line(uint64_t v) { return std::to_string(v) + "\n"; }

template <typename T>
std::string Lines(const std::vector<T>& items) {
  std::string out;
  for (const T& i : items) out += Line(i);
  return out;
}

}  // namespace

int ErrnoFor(const Status& st) {
  switch (st.code()) {
    case Err::kSuccess: return 0;
    case Err::kInvalidValue: return EINVAL;
    case Err::kNotPermitted: return EBUSY;
    default: return EIO;
  }
}

FsResult<Tree::Resolved> Tree::Resolve(const std::string& path, bool consume_token) {
  std::vector<std::string> parts = Split(path);
  if (parts.empty()) {
    // A pool's server shows the pool too.
    if (client_.Pool().ok()) return Resolved::Dir({"gpus", "pool", "tenants"});
    return Resolved::Dir({"gpus", "tenants"});
  }
  if (parts[0] == "gpus") return ResolveGpu(parts);
  if (parts[0] == "tenants") return ResolveTenant(parts, consume_token);
  if (parts[0] == "pool") return ResolvePool(parts);
  return NoEntry();
}

FsResult<Tree::Resolved> Tree::ResolvePool(const std::vector<std::string>& parts) {
  auto p = client_.Pool();
  if (!p.ok()) return p.status().code() == Err::kNotSupported ? NoEntry() : ServerError(p.status(), "reading the pool");
  if (parts.size() == 1) return Resolved::Dir({"status", "tenants"});
  if (parts.size() > 2) return NoEntry();
  std::string out;
  if (parts[1] == "status") {
    // One line per server, then per GPU, then the totals: "key value" pairs.
    uint64_t gpus = 0, gone = 0, total = 0, used = 0;
    for (const auto& s : p->servers)
      out += fmt::format("server {} health {} sessions {} url {}\n", s.name, s.health, s.sessions,
                         s.urls.empty() ? "-" : s.urls[0]);
    for (const auto& g : p->gpus) {
      out += fmt::format("gpu {}:{} {} memory.total {} memory.used {} tenants {}\n", g.server, g.index,
                         g.gone ? "gone" : "live", g.total_memory, g.used, g.tenants.size());
      if (g.gone) {
        gone++;
        continue;
      }
      gpus++, total += g.total_memory, used += g.used;
    }
    out += fmt::format("total servers {} gpus {} gone {} memory.total {} memory.used {} tenants {}\n", p->servers.size(),
                       gpus, gone, total, used, p->tenants.size());
    return Resolved::File(out, kRoMode);
  }
  if (parts[1] == "tenants") {
    for (const auto& t : p->tenants) {
      std::string where;
      for (const auto& a : p->assignments)
        if (a.tenant == t.name) where += (where.empty() ? "" : ",") + a.server + ":" + std::to_string(a.gpu);
      out += fmt::format("{} pool.max {} shares {} memory.current {} sessions {} gpus {}\n", t.name,
                         t.pool_limit ? std::to_string(*t.pool_limit) : "max", t.shares, t.used, t.sessions,
                         where.empty() ? "-" : where);
    }
    return Resolved::File(out, kRoMode);
  }
  return NoEntry();
}

FsResult<Tree::Resolved> Tree::ResolveGpu(const std::vector<std::string>& parts) {
  auto gpus = client_.ListGpus();
  if (!gpus.ok()) return ServerError(gpus.status(), "listing GPUs");
  if (parts.size() == 1) {
    std::vector<std::string> ids;
    for (const auto& g : *gpus) ids.push_back(std::to_string(g.index));
    return Resolved::Dir(std::move(ids));
  }
  std::optional<uint64_t> id = ParseId(parts[1]);
  auto g = std::find_if(gpus->begin(), gpus->end(),
                        [&](const admin::GpuInfo& x) { return id && static_cast<uint64_t>(x.index) == *id; });
  if (g == gpus->end() || parts.size() > 3) return NoEntry();
  if (parts.size() == 2) return Resolved::Dir({"compute.enforced", "memory.total", "memory.used", "name", "tenants", "uuid"});
  const std::string& f = parts[2];
  if (f == "name") return Resolved::File(Line(g->name), kRoMode);
  if (f == "uuid") return Resolved::File(Line(g->uuid), kRoMode);
  if (f == "memory.total") return Resolved::File(Line(g->total_memory), kRoMode);
  if (f == "memory.used") return Resolved::File(Line(g->used), kRoMode);
  if (f == "tenants") return Resolved::File(Lines(g->tenants), kRoMode);
  if (f == "compute.enforced") return Resolved::File(Line(g->compute_enforced ? 1 : 0), kRoMode);
  return NoEntry();
}

FsResult<Tree::Resolved> Tree::ResolveTenant(const std::vector<std::string>& parts, bool consume_token) {
  if (parts.size() >= 4 && parts[2] == "sessions") {
    // tenants/<name>/sessions/<id>[/file]: one session of this tenant (so the tenant exists).
    auto sessions = client_.ListSessions();
    if (!sessions.ok()) return ServerError(sessions.status(), "listing sessions");
    std::optional<uint64_t> id = ParseId(parts[3]);
    auto s = std::find_if(sessions->begin(), sessions->end(),
                          [&](const admin::SessionInfo& x) { return id && x.id == *id && x.tenant == parts[1]; });
    if (s == sessions->end() || parts.size() > 5) return NoEntry();
    if (parts.size() == 4) return Resolved::Dir({"compute.stat", "host", "memory.current", "pid", "started", "transport"});
    const std::string& f = parts[4];
    if (f == "pid") return Resolved::File(Line(s->client_pid), kRoMode);
    if (f == "host") return Resolved::File(Line(Printable(s->host)), kRoMode);  // the client's own words
    if (f == "transport") return Resolved::File(Line(s->transport), kRoMode);
    if (f == "memory.current") return Resolved::File(Line(s->memory_current), kRoMode);
    if (f == "started") return Resolved::File(Line(static_cast<uint64_t>(s->started_at)), kRoMode);
    if (f == "compute.stat") return Resolved::File("usage_usec " + Line(s->gpu_time_ns / 1000), kRoMode);
    return NoEntry();
  }
  auto tenants = client_.ListTenants();
  if (!tenants.ok()) return ServerError(tenants.status(), "listing tenants");
  if (parts.size() == 1) {
    std::vector<std::string> names;
    for (const auto& t : *tenants) names.push_back(t.name);
    return Resolved::Dir(std::move(names));
  }
  const std::string& name = parts[1];
  auto t = std::find_if(tenants->begin(), tenants->end(), [&](const admin::TenantInfo& x) { return x.name == name; });
  if (t == tenants->end()) {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_.erase(name);  // deleted by someone else: its token no longer opens anything
    return NoEntry();
  }
  if (parts.size() == 2) {
    std::vector<std::string> files = {"compute.max",    "compute.priority", "compute.stat", "compute.weight", "gpus",
                                      "memory.current", "memory.events",    "memory.max",   "sessions"};
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = tokens_.find(name); it != tokens_.end() && !it->second.taken) files.push_back("token");
    return Resolved::Dir(std::move(files));
  }
  if (parts.size() > 3) return NoEntry();
  const std::string& f = parts[2];
  if (f == "memory.max") return Resolved::File(t->memory_limit ? Line(*t->memory_limit) : Line("max"), kRwMode);
  if (f == "memory.current") return Resolved::File(Line(t->memory_used), kRoMode);
  if (f == "memory.events") return Resolved::File("max " + Line(t->refused), kRoMode);
  if (f == "gpus") return Resolved::File(Lines(t->gpus), kRwMode);
  if (f == "compute.weight") return Resolved::File(Line(sched::FormatWeight(t->compute.weight)), kRwMode);
  if (f == "compute.max") return Resolved::File(Line(sched::FormatMax(t->compute.max)), kRwMode);
  if (f == "compute.priority") return Resolved::File(Line(std::string(sched::PriorityName(t->compute.priority))), kRwMode);
  if (f == "compute.stat") {
    std::string stat = "usage_usec " + Line(t->gpu_time_ns / 1000);
    for (const auto& u : t->usage) stat += "gpu" + std::to_string(u.gpu) + ".usage_usec " + Line(u.gpu_time_ns / 1000);
    return Resolved::File(stat, kRoMode);
  }
  if (f == "sessions") {
    auto sessions = client_.ListSessions();
    if (!sessions.ok()) return ServerError(sessions.status(), "listing sessions");
    std::vector<std::string> ids;
    for (const auto& s : *sessions)
      if (s.tenant == name) ids.push_back(std::to_string(s.id));
    return Resolved::Dir(std::move(ids));
  }
  if (f == "token") {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tokens_.find(name);
    if (it == tokens_.end() || (consume_token && it->second.taken)) return NoEntry();
    if (consume_token) it->second.taken = true;
    return Resolved::File(Line(it->second.token), kTokenMode);
  }
  return NoEntry();
}

FsResult<Node> Tree::Stat(const std::string& path) {
  std::vector<std::string> parts = Split(path);
  if (parts.size() == 1 && (parts[0] == "gpus" || parts[0] == "tenants")) return Resolved::Dir({}).node;
  auto r = Resolve(path, false);
  if (!r.ok()) return r.status;
  return r.value.node;
}

FsResult<std::vector<std::string>> Tree::List(const std::string& path) {
  auto r = Resolve(path, false);
  if (!r.ok()) return r.status;
  if (!r.value.node.dir) return FsStatus{ENOTDIR, "not a directory"};
  return std::move(r.value.children);
}

FsResult<Tree::Snapshot> Tree::Open(const std::string& path, bool read, bool write) {
  auto r = Resolve(path, false);
  if (!r.ok()) return r.status;
  if (r.value.node.dir) return FsStatus{EISDIR, "is a directory"};
  if (write && (r.value.node.mode & 0200) == 0) return FsStatus{EACCES, "read-only file"};
  if (!read) return Snapshot{r.value.node, ""};
  if (r.value.node.mode == kTokenMode) {
    r = Resolve(path, true);  // again, to take it under the lock: one open wins
    if (!r.ok()) return r.status;
  }
  return Snapshot{r.value.node, std::move(r.value.contents)};
}

void Tree::Release(const std::string& path) {
  std::vector<std::string> parts = Split(path);
  if (parts.size() != 3 || parts[0] != "tenants" || parts[2] != "token") return;
  std::lock_guard<std::mutex> lock(mu_);
  // Only the open that took the token can be released here (others were refused); an
  // untaken one belongs to a tenant created again meanwhile.
  if (auto it = tokens_.find(parts[1]); it != tokens_.end() && it->second.taken) tokens_.erase(it);
}

FsStatus Tree::Write(const std::string& path, std::string_view data, uint64_t offset) {
  if (offset != 0)
    return {EINVAL, "partial write at offset " + std::to_string(offset) + ": write the whole value in one write"};
  std::vector<std::string> parts = Split(path);
  bool writable = parts.size() == 3 && parts[0] == "tenants" &&
                  (parts[2] == "memory.max" || parts[2] == "gpus" || parts[2] == "compute.weight" ||
                   parts[2] == "compute.max" || parts[2] == "compute.priority");
  if (!writable) {
    auto r = Resolve(path, false);
    if (!r.ok()) return r.status;
    return r.value.node.dir ? FsStatus{EISDIR, "is a directory"} : FsStatus{EACCES, "read-only file"};
  }
  if (data.size() > kMaxWrite) return {EINVAL, "value longer than " + std::to_string(kMaxWrite) + " bytes"};
  const std::string& name = parts[1];
  if (parts[2] == "memory.max") {
    auto limit = ParseSize(data);
    if (!limit.ok())
      return {EINVAL, limit.status().message() + " (write bytes, a size like 512M, 8G, 1.5GiB, or max)"};
    Status st = client_.SetMemoryLimit(name, *limit);
    return st.ok() ? FsStatus{} : TenantError(name, st, "setting the memory limit");
  }
  if (parts[2].rfind("compute.", 0) == 0) return WriteCompute(name, parts[2], data);
  // gpus: "+ID" attaches, "-ID" detaches; several, separated by blanks, are checked first,
  // then applied in order (a refusal stops there).
  std::vector<std::pair<bool, int>> changes;
  std::string text(data);
  for (size_t pos = 0; (pos = text.find_first_not_of(" \t\n", pos)) != std::string::npos;) {
    size_t end = std::min(text.find_first_of(" \t\n", pos), text.size());
    std::string item = text.substr(pos, end - pos);
    std::optional<uint64_t> id = item.size() > 1 ? ParseId(std::string_view(item).substr(1)) : std::nullopt;
    if ((item[0] != '+' && item[0] != '-') || !id || *id > INT_MAX)
      return {EINVAL, "invalid GPU change '" + Printable(item) + "': expected +ID to attach or -ID to detach"};
    changes.emplace_back(item[0] == '+', static_cast<int>(*id));
    pos = end;
  }
  if (changes.empty()) return {EINVAL, "empty write: expected +ID to attach or -ID to detach"};
  for (auto [attach, gpu] : changes) {
    Status st = attach ? client_.Attach(name, gpu) : client_.Detach(name, gpu);
    if (!st.ok()) return TenantError(name, st, (attach ? "attaching GPU " : "detaching GPU ") + std::to_string(gpu));
  }
  return {};
}

FsStatus Tree::Truncate(const std::string& path, uint64_t size) {
  auto r = Resolve(path, false);
  if (!r.ok()) return r.status;
  if (r.value.node.dir) return {EISDIR, "is a directory"};
  if ((r.value.node.mode & 0200) == 0) return {EACCES, "read-only file"};
  if (size != 0) return {EINVAL, "truncate to " + std::to_string(size) + " bytes: only 0 is accepted"};
  return {};
}

FsStatus Tree::Mkdir(const std::string& path) {
  std::vector<std::string> parts = Split(path);
  if (parts.size() != 2 || parts[0] != "tenants") return {EPERM, "only tenants/<name> can be created"};
  const std::string& name = parts[1];
  auto token = client_.CreateTenant(name, std::nullopt, std::nullopt);
  if (!token.ok()) {
    FsStatus st = ServerError(token.status(), "creating tenant '" + Printable(name) + "'");
    if (st.err == EINVAL && Listed(client_, name) == true) st.err = EEXIST;
    return st;
  }
  std::lock_guard<std::mutex> lock(mu_);
  tokens_[name] = PendingToken{*token, false};
  return {};
}

FsStatus Tree::Rmdir(const std::string& path) {
  std::vector<std::string> parts = Split(path);
  if (parts.size() != 2 || parts[0] != "tenants") {
    auto r = Resolve(path, false);
    if (!r.ok()) return r.status;
    return {r.value.node.dir ? EPERM : ENOTDIR, "only tenants/<name> can be removed"};
  }
  const std::string& name = parts[1];
  Status st = client_.DeleteTenant(name, false);
  if (!st.ok()) return TenantError(name, st, "deleting tenant '" + Printable(name) + "'");
  std::lock_guard<std::mutex> lock(mu_);
  tokens_.erase(name);
  return {};
}

FsStatus Tree::WriteCompute(const std::string& name, const std::string& file, std::string_view data) {
  // The other settings stay as the tenant has them now.
  auto tenants = client_.ListTenants();
  if (!tenants.ok()) return ServerError(tenants.status(), "listing tenants");
  auto t = std::find_if(tenants->begin(), tenants->end(), [&](const admin::TenantInfo& x) { return x.name == name; });
  if (t == tenants->end()) return NoEntry();
  sched::ComputeSettings cs = t->compute;
  if (file == "compute.weight") {
    auto w = sched::ParseWeight(data);
    if (!w.ok()) return {EINVAL, w.status().message()};
    cs.weight = *w;
  } else if (file == "compute.max") {
    auto m = sched::ParseMax(data);
    if (!m.ok()) return {EINVAL, m.status().message()};
    cs.max = *m;
  } else {
    auto p = sched::ParsePriority(data);
    if (!p.ok()) return {EINVAL, p.status().message()};
    cs.priority = *p;
  }
  Status st = client_.SetCompute(name, cs);
  return st.ok() ? FsStatus{} : TenantError(name, st, "setting " + file);
}

FsStatus Tree::TenantError(const std::string& name, const Status& st, const std::string& what) {
  FsStatus out = ServerError(st, what);
  // The server says "invalid" both for a bad value and for a tenant it does not know.
  if (out.err == EINVAL && Listed(client_, name) == false) out.err = ENOENT;
  return out;
}

}  // namespace remora::fs

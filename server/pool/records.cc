#include "pool/records.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "remora/base/util.h"
#include "remora/protocol/auth.h"

namespace remora::pool {

using json = nlohmann::json;

namespace {

Result<json> Parse(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Error(Err::kInvalidValue, "{}: not a JSON object", what);
  return j;
}

// A field that must be there with the right type; nlohmann's exceptions stay inside.
template <typename T>
Result<T> Get(const json& j, const char* field, const char* what) {
  auto it = j.find(field);
  if (it == j.end()) return Error(Err::kInvalidValue, "{}: no '{}'", what, field);
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return Error(Err::kInvalidValue, "{}: '{}' has the wrong type", what, field);
  }
}

template <typename T>
std::optional<T> Optional(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

json OptionalJson(const std::optional<uint64_t>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

Status ValidateServerName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 63 && name[0] != '.' && name[0] != '-';
  for (char c : name)
    ok &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  if (!ok)
    return Error(Err::kInvalidValue, "invalid server name '{}': 1 to 63 letters, digits, '.', '_' and '-'", Printable(name));
  return Status::Ok();
}

std::string EncodeServer(const ServerRecord& r) {
  json tenants = json::object();
  for (const auto& [name, t] : r.tenants) tenants[name] = {{"used", t.used}, {"sessions", t.sessions}};
  json gpus = json::array();
  for (const PoolGpu& g : r.gpus)
    gpus.push_back({{"index", g.index}, {"uuid", g.uuid}, {"name", g.name}, {"total_memory", g.total_memory}, {"used", g.used}});
  return json{{"name", r.name},         {"urls", r.urls},           {"gpus", gpus},
              {"backend", r.backend},   {"emulated", r.emulated},   {"version", r.version},
              {"health", r.health},     {"started_at", r.started_at}, {"updated_at", r.updated_at},
              {"sessions", r.sessions}, {"tenants", tenants}}
      .dump();
}

Result<ServerRecord> DecodeServer(std::string_view text) {
  const char* what = "server record";
  ASSIGN_OR_RETURN(json j, Parse(text, what));
  ServerRecord r;
  ASSIGN_OR_RETURN(r.name, Get<std::string>(j, "name", what));
  ASSIGN_OR_RETURN(r.urls, (Get<std::vector<std::string>>(j, "urls", what)));
  ASSIGN_OR_RETURN(json gpus, Get<json>(j, "gpus", what));
  if (!gpus.is_array()) return Error(Err::kInvalidValue, "{}: 'gpus' is not a list", what);
  for (const json& g : gpus) {
    PoolGpu x;
    ASSIGN_OR_RETURN(x.index, Get<int>(g, "index", what));
    ASSIGN_OR_RETURN(x.uuid, Get<std::string>(g, "uuid", what));
    x.name = g.value("name", std::string());
    x.total_memory = g.value("total_memory", uint64_t{0});
    x.used = g.value("used", uint64_t{0});
    r.gpus.push_back(std::move(x));
  }
  r.backend = j.value("backend", std::string());
  r.emulated = j.value("emulated", false);
  r.version = j.value("version", std::string());
  r.health = j.value("health", std::string("ok"));
  r.started_at = j.value("started_at", int64_t{0});
  r.updated_at = j.value("updated_at", int64_t{0});
  r.sessions = j.value("sessions", uint32_t{0});
  if (auto it = j.find("tenants"); it != j.end() && it->is_object())
    for (auto& [k, v] : it->items())
      if (v.is_object()) r.tenants[k] = {v.value("used", uint64_t{0}), v.value("sessions", uint32_t{0})};
  return r;
}

std::string EncodeTenant(const PoolTenant& t) {
  json compute = {{"weight", t.compute.weight ? json(*t.compute.weight) : json(nullptr)},
                  {"priority", std::string(sched::PriorityName(t.compute.priority))}};
  if (t.compute.max) {
    compute["max_quota_us"] = t.compute.max->quota_us;
    compute["max_period_us"] = t.compute.max->period_us;
  }
  json j = {{"name", t.name},
            {"stored_key", ToHex(t.stored_key.data(), t.stored_key.size())},
            {"memory_limit", OptionalJson(t.memory_limit)},
            {"pool_limit", OptionalJson(t.pool_limit)},
            {"created_at", t.created_at},
            {"compute", compute}};
  if (t.server_key) j["server_key"] = ToHex(t.server_key->data(), t.server_key->size());
  return j.dump();
}

Result<PoolTenant> DecodeTenant(std::string_view text) {
  const char* what = "tenant record";
  ASSIGN_OR_RETURN(json j, Parse(text, what));
  PoolTenant t;
  ASSIGN_OR_RETURN(t.name, Get<std::string>(j, "name", what));
  RETURN_IF_ERROR(ValidateTenantName(t.name));
  ASSIGN_OR_RETURN(std::string sk, Get<std::string>(j, "stored_key", what));
  ASSIGN_OR_RETURN(t.stored_key, KeyFromHex(sk));
  if (auto v = Optional<std::string>(j, "server_key")) {
    ASSIGN_OR_RETURN(Key k, KeyFromHex(*v));
    t.server_key = k;
  }
  t.memory_limit = Optional<uint64_t>(j, "memory_limit");
  t.pool_limit = Optional<uint64_t>(j, "pool_limit");
  t.created_at = j.value("created_at", int64_t{0});
  if (auto c = j.find("compute"); c != j.end() && c->is_object()) {
    if (auto w = Optional<uint32_t>(*c, "weight")) {
      if (*w < sched::kMinWeight || *w > sched::kMaxWeight) return Error(Err::kInvalidValue, "{}: bad weight", what);
      t.compute.weight = *w;
    }
    auto q = Optional<uint64_t>(*c, "max_quota_us"), p = Optional<uint64_t>(*c, "max_period_us");
    if (q && p) {
      if (*p < sched::kMinPeriodUs || *p > sched::kMaxPeriodUs || *q == 0 || *q >= *p)
        return Error(Err::kInvalidValue, "{}: bad compute cap", what);
      t.compute.max = sched::ComputeMax{*q, *p};
    }
    ASSIGN_OR_RETURN(t.compute.priority, sched::ParsePriority(c->value("priority", std::string("normal"))));
  }
  return t;
}

std::string EncodeAssignment(const Assignment& a) { return json{{"gpu", a.gpu}}.dump(); }

std::vector<Assignment> PoolView::AssignmentsOf(const std::string& tenant) const {
  std::vector<Assignment> out;
  for (const Assignment& a : assignments)
    if (a.tenant == tenant) out.push_back(a);
  return out;
}

uint64_t PoolView::SharesOf(const std::string& tenant) const {
  uint64_t sum = 0;
  if (auto it = shares.find(tenant); it != shares.end())
    for (const auto& [server, bytes] : it->second) sum += bytes;
  return sum;
}

PoolView BuildView(const PoolKeys& keys, const std::map<std::string, KeyValue>& kvs, int64_t revision, size_t* skipped,
                   std::string* why) {
  PoolView v;
  v.revision = revision;
  size_t bad = 0;
  auto skip = [&](const std::string& key, const Status& st) {
    if (bad++ == 0 && why != nullptr) *why = fmt::format("{}: {}", Printable(key), st.message());
  };
  // "<a>/<b>/<c>" after the section's prefix, split.
  auto parts = [](std::string_view rest) {
    std::vector<std::string> out;
    size_t pos = 0;
    for (size_t slash; (slash = rest.find('/', pos)) != std::string_view::npos; pos = slash + 1)
      out.emplace_back(rest.substr(pos, slash - pos));
    out.emplace_back(rest.substr(pos));
    return out;
  };
  const std::string& p = keys.prefix();
  for (const auto& [key, kv] : kvs) {
    if (key.compare(0, p.size(), p) != 0) continue;
    std::string_view rest(key);
    rest.remove_prefix(p.size());
    size_t slash = rest.find('/');
    if (slash == std::string_view::npos) continue;
    std::string_view section = rest.substr(0, slash);
    std::vector<std::string> name = parts(rest.substr(slash + 1));
    if (section == "servers" && name.size() == 1) {
      auto r = DecodeServer(kv.value);
      if (r.ok() && r->name == name[0]) v.servers[name[0]] = std::move(*r);
      else skip(key, r.ok() ? Status(Err::kInvalidValue, "its name differs") : r.status());
    } else if (section == "tenants" && name.size() == 1) {
      auto t = DecodeTenant(kv.value);
      if (t.ok() && t->name == name[0]) v.tenants[name[0]] = std::move(*t);
      else skip(key, t.ok() ? Status(Err::kInvalidValue, "its name differs") : t.status());
    } else if (section == "assign" && name.size() == 3) {
      json j = json::parse(kv.value, nullptr, false);
      if (j.is_object() && j.contains("gpu") && j["gpu"].is_number_integer())
        v.assignments.push_back({name[0], name[1], name[2], j["gpu"].get<int>(), kv.create_revision});
      else skip(key, Status(Err::kInvalidValue, "not an assignment"));
    } else if (section == "shares" && name.size() == 2) {
      char* end = nullptr;
      uint64_t bytes = std::strtoull(kv.value.c_str(), &end, 10);
      if (!kv.value.empty() && end == kv.value.c_str() + kv.value.size()) v.shares[name[0]][name[1]] = bytes;
      else skip(key, Status(Err::kInvalidValue, "not a byte count"));
    } else if (section == "applied" && name.size() == 1) {
      v.applied[name[0]] = std::strtoll(kv.value.c_str(), nullptr, 10);
    }
  }
  std::sort(v.assignments.begin(), v.assignments.end(), [](const Assignment& a, const Assignment& b) {
    return std::tie(a.tenant, a.revision, a.server, a.uuid) < std::tie(b.tenant, b.revision, b.server, b.uuid);
  });
  if (skipped != nullptr) *skipped = bad;
  return v;
}

}  // namespace remora::pool

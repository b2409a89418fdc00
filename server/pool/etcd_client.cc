#include "pool/etcd_client.h"

#include <sodium.h>

#include <nlohmann/json.hpp>

#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora::pool {

using json = nlohmann::json;

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto c = static_cast<unsigned char>(end.back());
    if (c < 0xff) {
      end.back() = static_cast<char>(c + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key (etcd's "\0" range end)
}

std::string Base64Encode(std::string_view bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

Result<std::string> Base64Decode(std::string_view text) {
  std::string out(text.size() / 4 * 3 + 3, '\0');
  size_t n = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(), text.size(), nullptr, &n,
                        nullptr, sodium_base64_VARIANT_ORIGINAL) != 0)
    return Error(Err::kInvalidValue, "the store sent malformed base64");
  out.resize(n);
  return out;
}

namespace {

// gRPC status codes the gateway reports (google.golang.org/grpc/codes).
constexpr int kGrpcNotFound = 5;
constexpr int kGrpcOutOfRange = 11;
constexpr int kGrpcUnavailable = 14;
constexpr int kGrpcDeadline = 4;

// A 64-bit number of the gateway's JSON: a string, a number, or absent (0).
int64_t Num(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_string()) return std::strtoll(it->get<std::string>().c_str(), nullptr, 10);
  if (it->is_number_integer()) return it->get<int64_t>();
  return 0;
}

Result<std::string> Bytes(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Error(Err::kInvalidValue, "the store sent a malformed '{}'", field);
  return Base64Decode(it->get<std::string>());
}

Result<KeyValue> ParseKv(const json& j) {
  KeyValue kv;
  ASSIGN_OR_RETURN(kv.key, Bytes(j, "key"));
  ASSIGN_OR_RETURN(kv.value, Bytes(j, "value"));
  kv.create_revision = Num(j, "create_revision");
  kv.mod_revision = Num(j, "mod_revision");
  kv.version = Num(j, "version");
  kv.lease = Num(j, "lease");
  return kv;
}

Result<RangeResult> ParseRange(const json& j) {
  RangeResult r;
  if (auto h = j.find("header"); h != j.end()) r.revision = Num(*h, "revision");
  if (auto kvs = j.find("kvs"); kvs != j.end() && kvs->is_array())
    for (const json& e : *kvs) {
      ASSIGN_OR_RETURN(KeyValue kv, ParseKv(e));
      r.kvs.push_back(std::move(kv));
    }
  return r;
}

json RangeBody(const std::string& key, const std::string& range_end) {
  json b = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) b["range_end"] = Base64Encode(range_end);
  return b;
}

json OpJson(const TxnOp& op) {
  switch (op.kind) {
    case TxnOp::Kind::kPut: {
      json p = {{"key", Base64Encode(op.key)}, {"value", Base64Encode(op.value)}};
      if (op.lease != 0) p["lease"] = std::to_string(op.lease);
      return {{"request_put", p}};
    }
    case TxnOp::Kind::kDelete:
      return {{"request_delete_range", RangeBody(op.key, op.range_end)}};
    case TxnOp::Kind::kRange:
      return {{"request_range", RangeBody(op.key, op.range_end)}};
  }
  return json::object();
}

json CompareJson(const Compare& c) {
  static const char* kTargets[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
  static const char* kOps[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
  static const char* kFields[] = {"version", "create_revision", "mod_revision", "value", "lease"};
  auto t = static_cast<size_t>(c.target);
  json j = {{"key", Base64Encode(c.key)}, {"target", kTargets[t]}, {"result", kOps[static_cast<size_t>(c.op)]}};
  if (!c.range_end.empty()) j["range_end"] = Base64Encode(c.range_end);
  if (c.target == Compare::Target::kValue) j[kFields[t]] = Base64Encode(c.value);
  else j[kFields[t]] = std::to_string(c.number);
  return j;
}

// The store's refusal in a gateway error body ({"error", "message", "code"}).
Status StoreError(const json& j, const char* path) {
  int code = static_cast<int>(Num(j, "code"));
  std::string msg = j.value("message", j.value("error", std::string("unknown error")));
  Err e = code == kGrpcNotFound || code == kGrpcOutOfRange ? Err::kInvalidValue
        : code == kGrpcUnavailable || code == kGrpcDeadline ? Err::kDevicesUnavailable
                                                            : Err::kUnknown;
  return Error(e, "etcd {}: {}", path, Printable(msg, 200));
}

}  // namespace

EtcdClient::EtcdClient(EtcdOptions options, std::unique_ptr<HttpClient> http)
    : options_(std::move(options)), http_(std::move(http)) {}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options, std::unique_ptr<HttpClient> http) {
  if (options.endpoints.empty()) return Error(Err::kInvalidValue, "no etcd endpoint given");
  for (std::string& e : options.endpoints) {
    if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0)
      return Error(Err::kInvalidValue, "etcd endpoint '{}': expected http://HOST:PORT or https://HOST:PORT", e);
    while (!e.empty() && e.back() == '/') e.pop_back();
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options), std::move(http)));
}

Result<std::string> EtcdClient::Call(const char* path, const std::string& body) {
  const size_t n = options_.endpoints.size();
  size_t start = current_.load();
  Status last;
  for (size_t i = 0; i < n; i++) {
    size_t e = (start + i) % n;
    auto r = http_->Post(options_.endpoints[e] + path, body, options_.timeout_ms);
    if (!r.ok()) {
      last = r.status();
      continue;
    }
    json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Error(Err::kUnknown, "etcd {}{}: not a JSON answer (HTTP {})", options_.endpoints[e], path, r->status);
    if (j.contains("error") || r->status != 200) {
      Status st = StoreError(j, path);
      // A member that cannot serve (no leader, a timeout inside the cluster): try another.
      if (st.code() == Err::kDevicesUnavailable || r->status >= 500) {
        last = st;
        continue;
      }
      return st;
    }
    if (e != start) {
      LOG_INFO("etcd: {} answers ({} did not: {})", options_.endpoints[e], options_.endpoints[start], last.message());
      current_.store(e);
    }
    return std::move(r->body);
  }
  return Status(Err::kDevicesUnavailable, fmt::format("no etcd member answers ({})", last.message()));
}

Result<RangeResult> EtcdClient::Range(const std::string& key, const std::string& range_end) {
  ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/range", RangeBody(key, range_end).dump()));
  return ParseRange(json::parse(text));
}

Result<TxnResult> EtcdClient::Txn(const std::vector<Compare>& compare, const std::vector<TxnOp>& success,
                                  const std::vector<TxnOp>& failure) {
  json body = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const Compare& c : compare) body["compare"].push_back(CompareJson(c));
  for (const TxnOp& op : success) body["success"].push_back(OpJson(op));
  for (const TxnOp& op : failure) body["failure"].push_back(OpJson(op));
  ASSIGN_OR_RETURN(std::string text, Call("/v3/kv/txn", body.dump()));
  json j = json::parse(text);
  TxnResult out;
  out.succeeded = j.value("succeeded", false);
  if (auto h = j.find("header"); h != j.end()) out.revision = Num(*h, "revision");
  if (auto rs = j.find("responses"); rs != j.end() && rs->is_array())
    for (const json& r : *rs)
      if (auto rr = r.find("response_range"); rr != r.end()) {
        ASSIGN_OR_RETURN(RangeResult range, ParseRange(*rr));
        out.ranges.push_back(std::move(range));
      }
  return out;
}

Result<Lease> EtcdClient::GrantLease(int64_t ttl_s) {
  ASSIGN_OR_RETURN(std::string text, Call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump()));
  json j = json::parse(text);
  Lease l{Num(j, "ID"), Num(j, "TTL")};
  if (l.id == 0) return Error(Err::kUnknown, "etcd granted no lease: {}", Printable(j.value("error", ""), 200));
  return l;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  ASSIGN_OR_RETURN(std::string text, Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  // One answer of the keep-alive stream: {"result": {"ID", "TTL"}}; no TTL once it is gone.
  json j = json::parse(text.substr(0, text.find('\n')), nullptr, false);
  const json& r = j.is_object() && j.contains("result") ? j["result"] : j;
  int64_t ttl = r.is_object() ? Num(r, "TTL") : 0;
  if (ttl <= 0) return Error(Err::kInvalidValue, "lease {:x} is gone (expired or revoked)", lease);
  return ttl;
}

Status EtcdClient::RevokeLease(int64_t lease) {
  auto r = Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  return r.ok() ? Status::Ok() : r.status();
}

Status EtcdClient::Watch(const std::string& key, const std::string& range_end, int64_t start_revision, int idle_ms,
                         const std::function<bool(int64_t, const std::vector<WatchEvent>&)>& on_events,
                         const std::atomic<bool>* stop) {
  json create = RangeBody(key, range_end);
  create["start_revision"] = std::to_string(start_revision);
  std::string body = json{{"create_request", create}}.dump();
  const size_t n = options_.endpoints.size();
  size_t e = current_.load() % n;
  std::string pending;   // a message not yet complete
  Status failure;        // why the stream was given up (set by the parser)
  auto on_data = [&](std::string_view chunk) -> bool {
    pending.append(chunk);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.empty()) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        failure = Error(Err::kUnknown, "etcd watch: a malformed message");
        return false;
      }
      if (j.contains("error")) {
        failure = StoreError(j.contains("error") && j["error"].is_object() ? j["error"] : j, "/v3/watch");
        return false;
      }
      const json& r = j.value("result", json::object());
      if (Num(r, "compact_revision") != 0 || r.value("canceled", false)) {
        failure = Error(Err::kInvalidValue, "etcd watch: revision {} is compacted (the store keeps {} on)", start_revision,
                        Num(r, "compact_revision"));
        return false;
      }
      int64_t revision = r.contains("header") ? Num(r["header"], "revision") : 0;
      std::vector<WatchEvent> events;
      if (auto ev = r.find("events"); ev != r.end() && ev->is_array()) {
        for (const json& x : *ev) {
          WatchEvent w;
          w.type = x.value("type", std::string()) == "DELETE" ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
          auto kv = ParseKv(x.value("kv", json::object()));
          if (!kv.ok()) {
            failure = kv.status();
            return false;
          }
          w.kv = std::move(*kv);
          events.push_back(std::move(w));
        }
      }
      if (r.value("created", false) && events.empty()) continue;
      if (!on_events(revision, events)) return false;
    }
    return true;
  };
  Status st = http_->PostStream(options_.endpoints[e] + "/v3/watch", body, options_.timeout_ms, idle_ms, on_data, stop);
  if (!failure.ok()) return failure;
  // A member that cannot be reached, closed the stream or fell silent (cut off from the
  // others, it hears of no change): the next watch asks another.
  if (!st.ok()) current_.store((e + 1) % n);
  return st;
}

}  // namespace remora::pool

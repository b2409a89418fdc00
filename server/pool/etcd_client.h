// KvStore over etcd v3's gRPC-JSON gateway (POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant,
// /v3/lease/keepalive, /v3/lease/revoke, /v3/watch): JSON bodies with base64 keys and values,
// 64-bit numbers as strings. Served by every etcd since 3.4 (Debian 12 ships 3.4.23); the
// gateway is part of etcd itself, so nothing runs beside the cluster. docs/ARCHITECTURE.md
// ("A pool of servers") says why this and not gRPC.
//
// Endpoints: the cluster's client URLs (http://host:2379, https://...). A call goes to the
// endpoint that answered last; when it cannot be reached, or answers that it cannot serve
// (no leader, a timeout inside the cluster), the next one is tried, each once per call.
// Thread-safety: as KvStore.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "pool/http.h"
#include "pool/kv_store.h"

namespace remora::pool {

struct EtcdOptions {
  std::vector<std::string> endpoints;
  int timeout_ms = 2000;  // each request to one member
};

class EtcdClient final : public KvStore {
 public:
  // kInvalidValue for an empty list or a URL that is not http:// or https://.
  static Result<std::unique_ptr<EtcdClient>> Create(EtcdOptions options, std::unique_ptr<HttpClient> http);

  Result<RangeResult> Range(const std::string& key, const std::string& range_end) override;
  Result<TxnResult> Txn(const std::vector<Compare>& compare, const std::vector<TxnOp>& success,
                        const std::vector<TxnOp>& failure) override;
  Result<Lease> GrantLease(int64_t ttl_s) override;
  Result<int64_t> KeepAlive(int64_t lease) override;
  Status RevokeLease(int64_t lease) override;
  Status Watch(const std::string& key, const std::string& range_end, int64_t start_revision, int idle_ms,
               const std::function<bool(int64_t, const std::vector<WatchEvent>&)>& on_events,
               const std::atomic<bool>* stop) override;

  const std::vector<std::string>& endpoints() const { return options_.endpoints; }

 private:
  EtcdClient(EtcdOptions options, std::unique_ptr<HttpClient> http);
  // POSTs `body` to `path` on the members in turn; the answer's JSON text on success.
  Result<std::string> Call(const char* path, const std::string& body);

  EtcdOptions options_;
  std::unique_ptr<HttpClient> http_;
  std::atomic<size_t> current_{0};
};

// Base64 (the gateway's encoding of bytes); exposed for tests.
std::string Base64Encode(std::string_view bytes);
Result<std::string> Base64Decode(std::string_view text);

}  // namespace remora::pool

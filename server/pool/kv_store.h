// The pool's replicated store as Remora uses it: etcd's v3 data model (keys with revisions,
// transactions with compares, leases, watches). One interface; EtcdClient (etcd_client.h)
// implements it over etcd's JSON gateway. Keys and values are arbitrary bytes.
//
// Thread-safety: implementations may be called from several threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "remora/base/status.h"

namespace remora::pool {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision the answer reflects
  std::vector<KeyValue> kvs;
};

// A transaction's guard: `target` of every key in [key, range_end) (just `key` when range_end
// is empty) compared with a number or a value.
struct Compare {
  enum class Target { kVersion, kCreate, kMod, kValue, kLease } target = Target::kMod;
  enum class Op { kEqual, kGreater, kLess, kNotEqual } op = Op::kEqual;
  std::string key;
  std::string range_end;
  int64_t number = 0;  // kVersion, kCreate, kMod, kLease
  std::string value;   // kValue
};

struct TxnOp {
  enum class Kind { kPut, kDelete, kRange } kind = Kind::kPut;
  std::string key;
  std::string range_end;  // kDelete, kRange: [key, range_end); empty: the key alone
  std::string value;      // kPut
  int64_t lease = 0;      // kPut: 0 = no lease
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  std::vector<RangeResult> ranges;  // the kRange ops' answers, in order
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // as granted (the store may raise a short one to its minimum)
};

struct WatchEvent {
  enum class Type { kPut, kDelete } type = Type::kPut;
  KeyValue kv;  // a delete's kv has the key and the deleting revision only
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Keys in [key, range_end) (just `key` when range_end is empty), linearizable.
  virtual Result<RangeResult> Range(const std::string& key, const std::string& range_end) = 0;
  virtual Result<TxnResult> Txn(const std::vector<Compare>& compare, const std::vector<TxnOp>& success,
                                const std::vector<TxnOp>& failure) = 0;
  virtual Result<Lease> GrantLease(int64_t ttl_s) = 0;
  // Renews the lease; returns its remaining TTL in seconds. kInvalidValue when the lease is
  // gone (expired or revoked).
  virtual Result<int64_t> KeepAlive(int64_t lease) = 0;
  virtual Status RevokeLease(int64_t lease) = 0;
  // Watches [key, range_end) from `start_revision` on, calling on_events with each batch (and
  // the store's revision after it) until on_events returns false or `*stop` becomes true
  // (then Ok). Errors: kDevicesUnavailable when no member answers or the stream breaks,
  // kInvalidValue ("compacted") when start_revision is older than the store keeps, kTimeout
  // when the stream fell silent for idle_ms (callers restart from the next revision).
  virtual Status Watch(const std::string& key, const std::string& range_end, int64_t start_revision, int idle_ms,
                       const std::function<bool(int64_t revision, const std::vector<WatchEvent>&)>& on_events,
                       const std::atomic<bool>* stop) = 0;
};

// The end of the range of every key that starts with `prefix` (etcd's prefix convention).
std::string PrefixEnd(const std::string& prefix);

}  // namespace remora::pool

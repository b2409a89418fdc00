// One server's member of a pool (docs/ARCHITECTURE.md, "A pool of servers"): it registers the
// server under a lease and keeps it alive, mirrors the pool's state (tenants, assignments,
// shares) into the server through a watch, publishes how far it applied it, and holds the
// server's shares of the tenants' pool-wide memory limits, borrowing and returning them
// through store transactions.
//
// Threads (all its own): the lease thread (registration, keep-alive, the server's record),
// the watch thread (the mirror), the work thread (shares: borrow requests in order, trims
// every second). Every change of a share's local limit goes through the work thread, so the
// store's share is never below the server's local limit (see PoolHost).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "pool/kv_store.h"
#include "pool/records.h"

namespace remora::pool {

struct AgentOptions {
  std::string prefix = "/remora/";
  std::string server_name;
  std::vector<std::string> urls;  // where clients reach this server
  int ttl_s = 10;                 // the lease's time to live
  int refresh_ms = 2000;          // the server record is rewritten this often
  std::string cache_file;         // the last view, for a start while the store is unreachable
};

// What the agent needs of its server; implemented by the supervisor. Called on the agent's
// threads; a method may wait for the server's event loop, never the other way round.
class PoolHost {
 public:
  virtual ~PoolHost() = default;
  // The server's GPUs, usage and sessions now (the agent fills in name, urls, times).
  virtual ServerRecord LocalRecord() = 0;
  // The pool's tenants or assignments changed (or the first view). `fresh`: read from the
  // store just now; false: from the cache file at start (the store unreachable).
  virtual void Apply(const PoolView& view, bool fresh) = 0;
  // The server holds lease `lease`: shares raised under it are valid.
  virtual void LeaseGranted(int64_t lease) = 0;
  // The lease is lost, or will be before it can be renewed: every share of this server is
  // void (others may take it). Returns once no allocation can use them any more.
  virtual void Fence(const std::string& why) = 0;
  // Sets the tenant's local share to `bytes` if `lease` is still the current one.
  virtual void RaiseShare(int64_t lease, const std::string& tenant, uint64_t bytes) = 0;
  // Lowers the tenant's local share to `bytes` and returns what its sessions claim now
  // (committed and in flight; the store's share must not go below it).
  virtual uint64_t LowerShare(const std::string& tenant, uint64_t bytes) = 0;
  // Bytes claimed now per tenant with a pool limit, and whether it has sessions here.
  struct Claim {
    uint64_t bytes = 0;
    uint32_t sessions = 0;
  };
  virtual std::map<std::string, Claim> Claims() = 0;
};

class PoolAgent {
 public:
  PoolAgent(KvStore& store, PoolHost& host, AgentOptions options);
  ~PoolAgent();  // Stop()
  PoolAgent(const PoolAgent&) = delete;
  PoolAgent& operator=(const PoolAgent&) = delete;

  // Loads the cache file (if the store cannot be read now) and starts the threads.
  void Start();
  // Ends the threads; the registration is revoked when `deregister` (a clean shutdown).
  void Stop(bool deregister = true);
  bool Stopped() const { return stopped_.load(); }

  // Asks for `bytes` more of the tenant's pool limit on this server. `done` runs on the work
  // thread with Ok (the local share was raised: try again) or why not.
  void Borrow(const std::string& tenant, uint64_t bytes, std::function<void(Status)> done);
  // The latest view the mirror holds (a copy), and whether it is the store's current one.
  PoolView View(bool* fresh = nullptr) const;
  int64_t lease() const { return lease_.load(); }
  // The share of each tenant this server holds in the store now.
  std::map<std::string, uint64_t> Shares() const;
  const PoolKeys& keys() const { return keys_; }

  // A borrow takes at least this much of a tenant's limit (and a trim leaves it as headroom).
  static uint64_t Chunk(uint64_t pool_limit);

 private:
  void LeaseThread();
  void WatchThread();
  void WorkThread();
  Status Register();
  Status PutRecord(int64_t lease);
  // Ends the lease's shares (fence) and forgets the lease.
  void LoseLease(const std::string& why);
  // Applies a watch batch or a full read to kvs_ and tells the host when it mattered.
  void Publish(bool fresh, bool tenants_changed);
  Status DoBorrow(const std::string& tenant, uint64_t bytes);
  void Trim();
  Status SetShare(int64_t lease, const std::string& tenant, uint64_t bytes);
  void SaveCache(const PoolView& v);
  bool Wait(std::unique_lock<std::mutex>& lock, int ms);  // false once stopping

  KvStore& store_;
  PoolHost& host_;
  AgentOptions options_;
  PoolKeys keys_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<int64_t> lease_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, KeyValue> kvs_;  // the prefix's keys, as the watch left them
  PoolView view_;
  bool fresh_ = false;
  struct BorrowTask {
    std::string tenant;
    uint64_t bytes = 0;
    std::function<void(Status)> done;
  };
  std::deque<BorrowTask> work_;
  std::map<std::string, uint64_t> shares_;  // work thread (readers copy under mu_)
  int64_t shares_lease_ = 0;                // the lease shares_ was built under
  std::thread lease_thread_, watch_thread_, work_thread_;
};

}  // namespace remora::pool

#include "pool/pool_agent.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pool/etcd_client.h"
#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora::pool {
namespace {

constexpr int kTrimMs = 1000;
constexpr int kBorrowTries = 8;

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

bool Under(const std::string& key, const std::string& prefix) { return key.compare(0, prefix.size(), prefix) == 0; }

// A warning repeated while the store is away is logged once per period.
class Every {
 public:
  explicit Every(int period_s) : period_ns_(uint64_t(period_s) * 1'000'000'000) {}
  bool Due() {
    uint64_t now = MonotonicNanos();
    if (now < next_) return false;
    next_ = now + period_ns_;
    return true;
  }

 private:
  uint64_t period_ns_;
  uint64_t next_ = 0;
};

}  // namespace

uint64_t PoolAgent::Chunk(uint64_t limit) {
  return std::min(limit, std::clamp<uint64_t>(limit / 16, 1ull << 20, 1ull << 30));
}

PoolAgent::PoolAgent(KvStore& store, PoolHost& host, AgentOptions options)
    : store_(store), host_(host), options_(std::move(options)), keys_(options_.prefix) {}

PoolAgent::~PoolAgent() { Stop(false); }

void PoolAgent::Start() {
  lease_thread_ = std::thread([this] { LeaseThread(); });
  watch_thread_ = std::thread([this] { WatchThread(); });
  work_thread_ = std::thread([this] { WorkThread(); });
}

void PoolAgent::Stop(bool deregister) {
  if (stopped_.load()) return;
  stop_.store(true);
  cv_.notify_all();
  for (std::thread* t : {&lease_thread_, &watch_thread_, &work_thread_})
    if (t->joinable()) t->join();
  if (int64_t l = lease_.exchange(0); l != 0 && deregister) {
    // Leaving cleanly: the registration and every share go now, not after the lease's TTL.
    if (Status st = store_.RevokeLease(l); !st.ok()) LOG_WARN("pool: cannot revoke this server's lease: {}", st.message());
  }
  stopped_.store(true);
}

bool PoolAgent::Wait(std::unique_lock<std::mutex>& lock, int ms) {
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stop_.load(); });
  return !stop_.load();
}

PoolView PoolAgent::View(bool* fresh) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (fresh != nullptr) *fresh = fresh_;
  return view_;
}

std::map<std::string, uint64_t> PoolAgent::Shares() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shares_lease_ == lease_.load() ? shares_ : std::map<std::string, uint64_t>{};
}

// ---- registration and the lease -------------------------------------------------------------

Status PoolAgent::PutRecord(int64_t lease) {
  ServerRecord r = host_.LocalRecord();
  r.name = options_.server_name;
  r.urls = options_.urls;
  r.updated_at = Now();
  TxnOp put{TxnOp::Kind::kPut, keys_.Server(options_.server_name), "", EncodeServer(r), lease};
  auto t = store_.Txn({}, {put}, {});
  return t.ok() ? Status::Ok() : t.status();
}

Status PoolAgent::Register() {
  ASSIGN_OR_RETURN(Lease lease, store_.GrantLease(options_.ttl_s));
  const std::string key = keys_.Server(options_.server_name);
  ServerRecord r = host_.LocalRecord();
  r.name = options_.server_name;
  r.urls = options_.urls;
  r.updated_at = Now();
  int64_t applied = View().revision;
  // Only if no live server has this name (a predecessor's registration expires with its lease).
  auto t = store_.Txn({Compare{Compare::Target::kVersion, Compare::Op::kEqual, key, "", 0, ""}},
                      {TxnOp{TxnOp::Kind::kPut, key, "", EncodeServer(r), lease.id},
                       TxnOp{TxnOp::Kind::kPut, keys_.Applied(options_.server_name), "", std::to_string(applied), lease.id}},
                      {TxnOp{TxnOp::Kind::kRange, key, "", "", 0}});
  if (!t.ok() || !t->succeeded) {
    (void)store_.RevokeLease(lease.id);
    if (!t.ok()) return t.status();
    std::string since;
    if (!t->ranges.empty() && !t->ranges[0].kvs.empty())
      if (auto old = DecodeServer(t->ranges[0].kvs[0].value); old.ok())
        since = fmt::format(" (started {} s ago, last heard of {} s ago)", Now() - old->started_at, Now() - old->updated_at);
    return Error(Err::kNotPermitted, "a server named '{}' is registered in the pool already{}: waiting for its lease to end",
                 options_.server_name, since);
  }
  lease_.store(lease.id);
  host_.LeaseGranted(lease.id);
  LOG_INFO("pool: registered as '{}' (lease {:x}, {} s)", options_.server_name, lease.id, lease.ttl_s);
  return Status::Ok();
}

void PoolAgent::LoseLease(const std::string& why) {
  int64_t old = lease_.exchange(0);
  if (old == 0) return;
  LOG_WARN("pool: this server's lease is lost ({}): its shares of the tenants' pool limits are void; it registers again "
           "when the store answers", why);
  host_.Fence(why);
  // If the store answers, the old registration and shares go now (not when the lease ends):
  // the server registers again at once. Nothing depends on it: the fence came first.
  (void)store_.RevokeLease(old);
}

void PoolAgent::LeaseThread() {
  const uint64_t ttl_ns = uint64_t(options_.ttl_s) * 1'000'000'000;
  // Fence while there is still time before the store can expire the lease: it counts the TTL
  // from when it got the last renewal, which was after it was sent.
  const uint64_t margin_ns = std::max<uint64_t>(ttl_ns / 4, 500'000'000);
  const int keepalive_ms = std::max(100, options_.ttl_s * 1000 / 3);
  uint64_t renewed_sent = 0, next_record = 0;
  Every budget{10};
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_.load()) {
    lock.unlock();
    uint64_t now = MonotonicNanos();
    if (lease_.load() == 0) {
      Status st = Register();
      if (st.ok()) {
        renewed_sent = now;
        next_record = now + uint64_t(options_.refresh_ms) * 1'000'000;
      } else if (budget.Due()) {
        LOG_WARN("pool: cannot register this server: {}", st.message());
      }
    } else {
      auto ttl = store_.KeepAlive(lease_.load());
      if (ttl.ok()) {
        renewed_sent = now;
      } else if (ttl.status().code() == Err::kInvalidValue) {
        LoseLease(ttl.status().message());
      } else if (MonotonicNanos() + margin_ns > renewed_sent + ttl_ns) {
        LoseLease(fmt::format("not renewed for {} ms: {}", (MonotonicNanos() - renewed_sent) / 1'000'000,
                              ttl.status().message()));
      }
      if (lease_.load() != 0 && MonotonicNanos() >= next_record) {
        next_record = MonotonicNanos() + uint64_t(options_.refresh_ms) * 1'000'000;
        if (Status st = PutRecord(lease_.load()); !st.ok() && st.code() == Err::kInvalidValue) LoseLease(st.message());
      }
    }
    lock.lock();
    int ms = keepalive_ms;
    if (lease_.load() == 0) ms = std::min(ms, 1000);
    else ms = std::min<int64_t>(ms, std::max<int64_t>(10, (int64_t(next_record) - int64_t(MonotonicNanos())) / 1'000'000));
    Wait(lock, ms);
  }
}

// ---- the mirror -------------------------------------------------------------------------------

void PoolAgent::SaveCache(const PoolView& v) {
  if (options_.cache_file.empty()) return;
  nlohmann::json kvs = nlohmann::json::object();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, kv] : kvs_)
      if (Under(key, keys_.prefix() + "tenants/") || Under(key, keys_.prefix() + "assign/"))
        kvs[Base64Encode(key)] = {{"value", Base64Encode(kv.value)}, {"create_revision", kv.create_revision}};
  }
  std::string text = nlohmann::json{{"revision", v.revision}, {"prefix", keys_.prefix()}, {"kvs", kvs}}.dump();
  std::string tmp = options_.cache_file + ".tmp";
  // The tenants' verifiers: 0600, like the state database.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok || ::rename(tmp.c_str(), options_.cache_file.c_str()) != 0)
    LOG_WARN("pool: cannot write the mirror's copy {}: {}", options_.cache_file, std::strerror(errno));
}

void PoolAgent::Publish(bool fresh, bool changed) {
  PoolView v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t skipped = 0;
    std::string why;
    view_ = BuildView(keys_, kvs_, view_.revision, &skipped, &why);
    fresh_ = fresh;
    v = view_;
    if (skipped != 0) LOG_DEBUG("pool: {} key(s) of the store not understood, e.g. {}", skipped, why);
  }
  if (!changed) return;
  host_.Apply(v, fresh);
  if (!fresh) return;
  SaveCache(v);
  if (int64_t l = lease_.load(); l != 0) {
    TxnOp put{TxnOp::Kind::kPut, keys_.Applied(options_.server_name), "", std::to_string(v.revision), l};
    if (auto t = store_.Txn({}, {put}, {}); !t.ok()) LOG_DEBUG("pool: cannot publish the applied revision: {}", t.status().message());
  }
}

void PoolAgent::WatchThread() {
  const std::string end = PrefixEnd(keys_.prefix());
  const int idle_ms = std::max(5000, 3 * options_.refresh_ms);
  bool synced = false, tried_cache = false;
  int64_t next = 0;
  Every budget{10};
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_.load()) {
    lock.unlock();
    if (!synced) {
      auto r = store_.Range(keys_.prefix(), end);
      if (r.ok()) {
        {
          std::lock_guard<std::mutex> g(mu_);
          kvs_.clear();
          for (KeyValue& kv : r->kvs) kvs_.emplace(kv.key, std::move(kv));
          view_.revision = r->revision;
        }
        Publish(true, true);
        next = r->revision + 1;
        synced = true;
        LOG_INFO("pool: mirror in step with the store (revision {})", r->revision);
      } else {
        if (budget.Due()) LOG_WARN("pool: cannot read the pool's state: {}", r.status().message());
        if (!tried_cache && !options_.cache_file.empty()) {
          tried_cache = true;
          std::ifstream in(options_.cache_file);
          std::stringstream text;
          text << in.rdbuf();
          auto j = nlohmann::json::parse(text.str(), nullptr, false);
          if (in && j.is_object() && j.value("prefix", std::string()) == keys_.prefix() && j.contains("kvs")) {
            {
              std::lock_guard<std::mutex> g(mu_);
              for (auto& [k, e] : j["kvs"].items()) {
                auto key = Base64Decode(k);
                auto value = Base64Decode(e.value("value", std::string()));
                if (!key.ok() || !value.ok()) continue;
                kvs_[*key] = KeyValue{*key, *value, e.value("create_revision", int64_t{0}), 0, 0, 0};
              }
              view_.revision = j.value("revision", int64_t{0});
            }
            LOG_WARN("pool: serving the tenants of the mirror's last copy ({}, revision {}) until the store answers",
                     options_.cache_file, View().revision);
            Publish(false, true);
          }
        }
      }
    } else {
      Status st = store_.Watch(
          keys_.prefix(), end, next, idle_ms,
          [&](int64_t revision, const std::vector<WatchEvent>& events) {
            bool changed = false;
            {
              std::lock_guard<std::mutex> g(mu_);
              for (const WatchEvent& e : events) {
                changed |= Under(e.kv.key, keys_.prefix() + "tenants/") || Under(e.kv.key, keys_.prefix() + "assign/");
                if (e.type == WatchEvent::Type::kDelete) kvs_.erase(e.kv.key);
                else kvs_[e.kv.key] = e.kv;
              }
              view_.revision = revision;
            }
            Publish(true, changed);
            next = revision + 1;
            return !stop_.load();
          },
          &stop_);
      if (!st.ok() && !stop_.load()) {
        if (st.code() == Err::kInvalidValue) synced = false;  // compacted: read everything again
        if (budget.Due()) LOG_WARN("pool: watch: {} (resuming)", st.message());
      }
    }
    lock.lock();
    if (!stop_.load()) Wait(lock, synced ? 100 : 500);
  }
}

// ---- shares -----------------------------------------------------------------------------------

void PoolAgent::Borrow(const std::string& tenant, uint64_t bytes, std::function<void(Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_.push_back(BorrowTask{tenant, bytes, std::move(done)});
  }
  cv_.notify_all();
}

void PoolAgent::WorkThread() {
  uint64_t next_trim = MonotonicNanos() + uint64_t(kTrimMs) * 1'000'000;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_.load()) {
    while (!work_.empty() && !stop_.load()) {
      BorrowTask task = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      task.done(DoBorrow(task.tenant, task.bytes));
      lock.lock();
    }
    if (MonotonicNanos() >= next_trim) {
      lock.unlock();
      Trim();
      lock.lock();
      next_trim = MonotonicNanos() + uint64_t(kTrimMs) * 1'000'000;
    }
    int ms = static_cast<int>(std::max<int64_t>(1, (int64_t(next_trim) - int64_t(MonotonicNanos())) / 1'000'000));
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stop_.load() || !work_.empty(); });
  }
  // Borrowers waiting on the stopped agent hear so.
  std::deque<BorrowTask> left;
  left.swap(work_);
  lock.unlock();
  for (BorrowTask& task : left) task.done(Error(Err::kMemoryAllocation, "the server is leaving the pool"));
}

Status PoolAgent::SetShare(int64_t lease, const std::string& tenant, uint64_t bytes) {
  std::string key = keys_.Share(tenant, options_.server_name);
  TxnOp op = bytes == 0 ? TxnOp{TxnOp::Kind::kDelete, key, "", "", 0}
                        : TxnOp{TxnOp::Kind::kPut, key, "", std::to_string(bytes), lease};
  auto t = store_.Txn({}, {op}, {});
  return t.ok() ? Status::Ok() : t.status();
}

Status PoolAgent::DoBorrow(const std::string& tenant, uint64_t bytes) {
  const int64_t lease = lease_.load();
  if (lease == 0) return Error(Err::kMemoryAllocation, "this server is not registered with the pool's store now");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shares_lease_ != lease) shares_.clear(), shares_lease_ = lease;
  }
  const std::string tkey = keys_.Tenant(tenant), prefix = keys_.TenantShares(tenant);
  const std::string mine_key = keys_.Share(tenant, options_.server_name);
  for (int i = 0; i < kBorrowTries; i++) {
    // One read at one revision: the tenant's limit and every server's share of it.
    ASSIGN_OR_RETURN(TxnResult read, store_.Txn({}, {TxnOp{TxnOp::Kind::kRange, tkey, "", "", 0},
                                                     TxnOp{TxnOp::Kind::kRange, prefix, PrefixEnd(prefix), "", 0}},
                                                {}));
    if (read.ranges.size() != 2 || read.ranges[0].kvs.empty())
      return Error(Err::kMemoryAllocation, "tenant '{}' is not in the pool any more", tenant);
    ASSIGN_OR_RETURN(PoolTenant t, DecodeTenant(read.ranges[0].kvs[0].value));
    if (!t.pool_limit) return Error(Err::kMemoryAllocation, "tenant '{}' has no pool-wide limit", tenant);
    uint64_t others = 0, mine = 0;
    for (const KeyValue& kv : read.ranges[1].kvs) {
      uint64_t v = std::strtoull(kv.value.c_str(), nullptr, 10);
      if (kv.key == mine_key) mine = kv.lease == lease ? v : 0;  // an older lease's is replaced
      else others += v;
    }
    const uint64_t limit = *t.pool_limit;
    uint64_t room = limit > others ? limit - others : 0;
    if (room < mine || room - mine < bytes)
      return Error(Err::kMemoryAllocation,
                   "tenant '{}' reached its pool-wide limit of {}: {} held by this server, {} by the others, {} more asked",
                   tenant, FormatSize(limit), FormatSize(mine), FormatSize(others), FormatSize(bytes));
    uint64_t grant = std::min(room - mine, std::max(bytes, Chunk(limit)));
    uint64_t share = mine + grant;
    std::vector<Compare> guard = {
        Compare{Compare::Target::kMod, Compare::Op::kLess, prefix, PrefixEnd(prefix), read.revision + 1, ""},
        Compare{Compare::Target::kMod, Compare::Op::kEqual, tkey, "", read.ranges[0].kvs[0].mod_revision, ""}};
    ASSIGN_OR_RETURN(TxnResult w, store_.Txn(guard, {TxnOp{TxnOp::Kind::kPut, mine_key, "", std::to_string(share), lease}}, {}));
    if (!w.succeeded) continue;  // another server's share or the limit changed: read again
    {
      std::lock_guard<std::mutex> lock(mu_);
      shares_[tenant] = share;
    }
    host_.RaiseShare(lease, tenant, share);
    LOG_DEBUG("pool: tenant '{}': this server's share {} (+{})", tenant, FormatSize(share), FormatSize(grant));
    return Status::Ok();
  }
  return Error(Err::kMemoryAllocation, "tenant '{}''s shares kept changing: try again", tenant);
}

void PoolAgent::Trim() {
  const int64_t lease = lease_.load();
  std::map<std::string, uint64_t> shares;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shares_lease_ != lease) shares_.clear(), shares_lease_ = lease;
    shares = shares_;
  }
  if (lease == 0 || shares.empty()) return;
  std::map<std::string, PoolHost::Claim> claims = host_.Claims();
  PoolView v = View();
  for (const auto& [tenant, held] : shares) {
    auto t = v.tenants.find(tenant);
    uint64_t target = 0, slack = 0;
    if (t != v.tenants.end() && t->second.pool_limit) {
      const PoolHost::Claim c = claims.count(tenant) ? claims[tenant] : PoolHost::Claim{};
      // Active here: keep one chunk of headroom, and lower only past two (no back and
      // forth). Idle: keep what is still held (memory open in other sessions), no more.
      uint64_t chunk = Chunk(*t->second.pool_limit);
      target = c.sessions != 0 ? c.bytes + chunk : c.bytes;
      slack = c.sessions != 0 ? chunk : 0;
    }
    if (held <= target + slack) continue;
    uint64_t claimed = host_.LowerShare(tenant, target);  // locally first: never below the store's
    uint64_t share = std::max(target, claimed);
    if (share >= held) continue;
    if (Status st = SetShare(lease, tenant, share); !st.ok()) {
      LOG_DEBUG("pool: cannot return part of tenant '{}''s share: {}", tenant, st.message());
      continue;  // the store keeps the larger share: still safe
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (share == 0) shares_.erase(tenant);
    else shares_[tenant] = share;
  }
}

}  // namespace remora::pool

#include "sched/board.h"

#include <pthread.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>

namespace remora::sched {

namespace {
constexpr uint64_t kBoardMagic = 0x31445242504d4352ull;  // "RCMPBRD1"
constexpr uint64_t kOwnerMask = 0xffff;
constexpr uint64_t kIdleBit = uint64_t{1} << 16;
constexpr int kGenerationShift = 17;
constexpr uint64_t kVtScale = 100;  // virtual time: GPU ns * kVtScale / weight (weight 100: ns)
static_assert(kBoardMaxSessions < kOwnerMask, "turn word owner field");
}  // namespace

struct TenantSettingsRow {
  std::atomic<uint32_t> weight;    // effective, 1..kMaxWeight
  std::atomic<uint32_t> priority;  // Priority
  std::atomic<uint64_t> quota_ns;  // 0: no cap
  std::atomic<uint64_t> period_ns;
};

struct TenantRunRow {
  std::atomic<uint64_t> vt;         // weighted virtual time (wraps; compared as differences)
  std::atomic<uint64_t> usage_ns;   // GPU time charged on this GPU since the tenant was added
  std::atomic<int64_t> tokens_ns;   // cap bucket
  std::atomic<uint64_t> refill_ns;  // when the bucket was last refilled
  std::atomic<uint64_t> busy_ns;    // when a session of it last asked for, got or kept the GPU
};

struct SessionRunRow {
  std::atomic<uint32_t> state;  // RunState
  std::atomic<uint64_t> usage_ns;
  std::atomic<uint64_t> waiting_since;
  std::atomic<uint64_t> drain_until;  // a holder told to drain expects to be done by then
};

struct GpuRow {
  pthread_mutex_t mu;
  std::atomic<uint32_t> enabled;
  std::atomic<uint32_t> waiting;  // sessions in kWaiting (under mu)
  std::atomic<uint32_t> yield;    // the holder should end its turn now
  std::atomic<uint64_t> turn;
  std::atomic<uint64_t> turn_end;
  std::atomic<uint64_t> contended_since;  // when the first of the current waiters arrived
  std::atomic<uint64_t> class_seen_ns[kNumPriorities];
  TenantRunRow tenants[kBoardMaxTenants];
  SessionRunRow sessions[kBoardMaxSessions];
};

struct BoardRegion {
  uint64_t magic;
  uint64_t bytes;
  Tunables tunables;
  TenantSettingsRow settings[kBoardMaxTenants];
  std::atomic<uint32_t> session_tenant[kBoardMaxSessions];  // tenant + 1; 0: closed
  GpuRow gpus[kBoardMaxGpus];
};

Turn Turn::Decode(uint64_t w) {
  Turn t;
  uint64_t o = w & kOwnerMask;
  t.owner = o == 0 ? kNoSession : static_cast<uint32_t>(o - 1);
  t.idle = (w & kIdleBit) != 0;
  t.generation = w >> kGenerationShift;
  return t;
}

uint64_t Turn::Encode() const {
  uint64_t o = owner == kNoSession ? 0 : uint64_t{owner} + 1;
  return o | (idle ? kIdleBit : 0) | (generation << kGenerationShift);
}

namespace {

int64_t Diff(uint64_t a, uint64_t b) { return static_cast<int64_t>(a - b); }

// The GPU row's mutex: tried (workers) or waited for with a timeout (supervisor). A dead
// holder's lock is taken over and marked consistent: every mutation is a single store.
class GpuLock {
 public:
  GpuLock(GpuRow& g, bool wait) : mu_(&g.mu) {
    int rc;
    if (wait) {
      struct timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_sec += 2;
      rc = pthread_mutex_timedlock(mu_, &deadline);
    } else {
      rc = pthread_mutex_trylock(mu_);
    }
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(mu_);
      rc = 0;
    }
    held_ = rc == 0;
  }
  ~GpuLock() {
    if (held_) pthread_mutex_unlock(mu_);
  }
  GpuLock(const GpuLock&) = delete;
  GpuLock& operator=(const GpuLock&) = delete;
  bool held() const { return held_; }

 private:
  pthread_mutex_t* mu_;
  bool held_ = false;
};

// Decisions on one GPU's row, with its lock held (except where a method says otherwise).
class GpuOps {
 public:
  GpuOps(BoardRegion* r, uint32_t gpu) : r_(r), g_(r->gpus[gpu]) {}

  uint32_t TenantOf(uint32_t slot) const {
    uint32_t t = r_->session_tenant[slot].load(std::memory_order_acquire);
    return t == 0 ? kNoSession : t - 1;
  }
  uint32_t Weight(uint32_t t) const {
    uint32_t w = r_->settings[t].weight.load(std::memory_order_relaxed);
    return w == 0 ? kDefaultWeight : w;
  }
  uint32_t Prio(uint32_t t) const { return r_->settings[t].priority.load(std::memory_order_relaxed); }
  SessionRunRow& S(uint32_t slot) { return g_.sessions[slot]; }
  TenantRunRow& T(uint32_t t) { return g_.tenants[t]; }

  // Refills a capped tenant's bucket up to now. Lock held (charges subtract concurrently).
  void Refill(uint32_t t, uint64_t now) {
    uint64_t quota = r_->settings[t].quota_ns.load(std::memory_order_relaxed);
    if (quota == 0) return;
    uint64_t period = r_->settings[t].period_ns.load(std::memory_order_relaxed);
    TenantRunRow& row = T(t);
    uint64_t last = row.refill_ns.load(std::memory_order_relaxed);
    if (Diff(now, last) <= 0) return;
    uint64_t elapsed = now - last;
    int64_t add = elapsed >= period ? static_cast<int64_t>(quota)
                                    : static_cast<int64_t>(static_cast<unsigned __int128>(elapsed) * quota / period);
    row.refill_ns.store(now, std::memory_order_relaxed);
    int64_t cur = row.tokens_ns.load(std::memory_order_relaxed);
    int64_t next;
    do {
      next = std::min<int64_t>(static_cast<int64_t>(quota), cur + add);
    } while (!row.tokens_ns.compare_exchange_weak(cur, next, std::memory_order_relaxed));
  }

  bool Eligible(uint32_t t, uint64_t now) {
    uint64_t quota = r_->settings[t].quota_ns.load(std::memory_order_relaxed);
    if (quota == 0) return true;
    Refill(t, now);
    int64_t need = static_cast<int64_t>(std::min(quota, r_->tunables.min_burst_ns));
    return T(t).tokens_ns.load(std::memory_order_relaxed) >= need;
  }

  // The lag a tenant may be ahead, in its own virtual-time units.
  int64_t LagVt(uint32_t t) const {
    return static_cast<int64_t>(r_->tunables.lag_ns * kVtScale / Weight(t));
  }

  // The session that should hold the GPU next: among the waiting ones (and `extra`, a
  // holder asking to continue), those whose tenant is eligible (cap); of those, the highest
  // class among tenants within their share, then the smallest virtual time, then the
  // longest wait. kNoSession if none is eligible.
  uint32_t Best(uint64_t now, uint32_t extra) {
    struct Cand {
      uint32_t slot, tenant;
      uint64_t vt, since;
    };
    std::array<Cand, kBoardMaxSessions + 1> c;
    size_t n = 0;
    if (g_.waiting.load(std::memory_order_relaxed) > 0) {
      for (uint32_t s = 0; s < kBoardMaxSessions; s++) {
        if (s == extra || S(s).state.load(std::memory_order_relaxed) != static_cast<uint32_t>(RunState::kWaiting)) continue;
        uint32_t t = TenantOf(s);
        if (t == kNoSession) continue;
        c[n++] = {s, t, 0, S(s).waiting_since.load(std::memory_order_relaxed)};
      }
    }
    if (extra != kNoSession && TenantOf(extra) != kNoSession) c[n++] = {extra, TenantOf(extra), 0, now};
    size_t m = 0;  // keep the eligible ones
    for (size_t i = 0; i < n; i++) {
      if (!Eligible(c[i].tenant, now)) continue;
      c[i].vt = T(c[i].tenant).vt.load(std::memory_order_relaxed);
      c[m++] = c[i];
    }
    if (m == 0) return kNoSession;
    max_weight_ = 0;
    for (size_t i = 0; i < m; i++) max_weight_ = std::max(max_weight_, Weight(c[i].tenant));
    uint64_t vmin = c[0].vt;
    for (size_t i = 1; i < m; i++)
      if (Diff(c[i].vt, vmin) < 0) vmin = c[i].vt;
    auto rank = [&](const Cand& x) { return Diff(x.vt, vmin) <= LagVt(x.tenant) ? 1 + Prio(x.tenant) : 0u; };
    size_t best = 0;
    uint32_t best_rank = rank(c[0]);
    for (size_t i = 1; i < m; i++) {
      uint32_t r = rank(c[i]);
      const Cand& b = c[best];
      bool better = r != best_rank ? r > best_rank
                    : c[i].vt != b.vt ? Diff(c[i].vt, b.vt) < 0
                    : c[i].since != b.since ? Diff(c[i].since, b.since) < 0
                                            : c[i].slot < b.slot;
      if (better) {
        best = i;
        best_rank = r;
      }
    }
    return c[best].slot;
  }

  // A turn's length: the quantum for the heaviest tenant competing in the last Best(), in
  // proportion to weight for lighter ones (so a small share gets short, frequent turns and
  // holds over short windows), never below a tenth of the quantum.
  uint64_t TurnLength(uint32_t slot) {
    uint64_t q = r_->tunables.quantum_ns;
    uint32_t t = slot == kNoSession ? kNoSession : TenantOf(slot);
    if (t == kNoSession || max_weight_ == 0) return q;
    return std::max(q / 10, q * Weight(t) / max_weight_);
  }

  // Whether `t` has a session other than `slot` that waits or holds an active turn.
  bool Busy(uint32_t t, uint32_t slot) {
    Turn turn = Turn::Decode(g_.turn.load(std::memory_order_acquire));
    if (turn.owner != kNoSession && turn.owner != slot && !turn.idle && TenantOf(turn.owner) == t) return true;
    if (g_.waiting.load(std::memory_order_relaxed) == 0) return false;
    for (uint32_t s = 0; s < kBoardMaxSessions; s++)
      if (s != slot && S(s).state.load(std::memory_order_relaxed) == static_cast<uint32_t>(RunState::kWaiting) &&
          TenantOf(s) == t)
        return true;
    return false;
  }

  // A tenant that becomes busy after an idle time starts at most one quantum (of its own GPU
  // time) behind the busy tenants: credit is not banked while idle (an idle tenant's share
  // went to the others). A pause shorter than two quanta - a loop's synchronisation - is not
  // idleness: the tenant keeps its place.
  void ClampOnBusy(uint32_t t, uint32_t slot, uint64_t now) {
    uint64_t last = T(t).busy_ns.load(std::memory_order_relaxed);
    if (last != 0 && Diff(now, last) < static_cast<int64_t>(2 * r_->tunables.quantum_ns)) return;
    if (Busy(t, slot)) return;
    bool found = false;
    uint64_t vmin = 0;
    auto consider = [&](uint32_t other) {
      if (other == kNoSession || other == t) return;
      uint64_t v = T(other).vt.load(std::memory_order_relaxed);
      if (!found || Diff(v, vmin) < 0) vmin = v;
      found = true;
    };
    Turn turn = Turn::Decode(g_.turn.load(std::memory_order_acquire));
    if (turn.owner != kNoSession && !turn.idle) consider(TenantOf(turn.owner));
    if (g_.waiting.load(std::memory_order_relaxed) > 0)
      for (uint32_t s = 0; s < kBoardMaxSessions; s++)
        if (S(s).state.load(std::memory_order_relaxed) == static_cast<uint32_t>(RunState::kWaiting)) consider(TenantOf(s));
    if (!found) return;
    uint64_t floor = vmin - r_->tunables.quantum_ns * kVtScale / Weight(t);
    if (Diff(T(t).vt.load(std::memory_order_relaxed), floor) < 0) T(t).vt.store(floor, std::memory_order_relaxed);
  }

  void Touch(uint32_t slot, uint64_t now) {
    uint32_t t = TenantOf(slot);
    if (t != kNoSession) T(t).busy_ns.store(now, std::memory_order_relaxed);
  }

  void EnterWaiting(uint32_t slot, uint64_t now) {
    Touch(slot, now);
    S(slot).state.store(static_cast<uint32_t>(RunState::kWaiting), std::memory_order_relaxed);
    S(slot).waiting_since.store(now, std::memory_order_relaxed);
    if (g_.waiting.fetch_add(1, std::memory_order_relaxed) == 0) g_.contended_since.store(now, std::memory_order_relaxed);
  }

  // Gives the turn to `b` (kNoSession: nobody), if the turn word is still `expected`.
  bool Grant(uint32_t b, uint64_t expected, uint64_t now) {
    Turn cur = Turn::Decode(expected);
    bool was_waiting = false;
    if (b != kNoSession) {
      was_waiting = S(b).state.load(std::memory_order_relaxed) == static_cast<uint32_t>(RunState::kWaiting);
      if (was_waiting) g_.waiting.fetch_sub(1, std::memory_order_relaxed);
      S(b).state.store(static_cast<uint32_t>(RunState::kOwner), std::memory_order_relaxed);
      Touch(b, now);
      uint32_t t = TenantOf(b);
      if (t != kNoSession) g_.class_seen_ns[Prio(t)].store(now, std::memory_order_relaxed);
    }
    g_.turn_end.store(now + TurnLength(b), std::memory_order_relaxed);
    Turn next{b, false, cur.generation + 1};
    if (!g_.turn.compare_exchange_strong(expected, next.Encode(), std::memory_order_acq_rel)) {
      if (b != kNoSession && was_waiting) {
        S(b).state.store(static_cast<uint32_t>(RunState::kWaiting), std::memory_order_relaxed);
        g_.waiting.fetch_add(1, std::memory_order_relaxed);
      }
      return false;
    }
    g_.yield.store(0, std::memory_order_relaxed);
    g_.contended_since.store(g_.waiting.load(std::memory_order_relaxed) > 0 ? now : 0, std::memory_order_relaxed);
    return true;
  }

  // The holder should have reacted to the waiters (or ended its drain) long ago.
  bool Unresponsive(uint32_t owner, uint64_t now) {
    uint64_t due = g_.turn_end.load(std::memory_order_relaxed);
    uint64_t drain = S(owner).drain_until.load(std::memory_order_relaxed);
    uint64_t since = g_.contended_since.load(std::memory_order_relaxed);
    if (Diff(drain, due) > 0) due = drain;
    if (Diff(since, due) > 0) due = since;
    return Diff(now, due) > static_cast<int64_t>(r_->tunables.hung_grace_ns);
  }

 private:
  BoardRegion* r_;
  GpuRow& g_;
  uint32_t max_weight_ = 0;  // of the eligible candidates of the last Best()
};

}  // namespace

size_t ComputeBoard::RegionBytes() { return sizeof(BoardRegion); }

Result<ComputeBoard> ComputeBoard::Create(void* mem, size_t bytes, const Tunables& tunables) {
  if (bytes < sizeof(BoardRegion)) return Error(Err::kInvalidValue, "compute board region too small");
  std::memset(mem, 0, sizeof(BoardRegion));
  auto* r = new (mem) BoardRegion();
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  for (GpuRow& g : r->gpus) {
    int rc = pthread_mutex_init(&g.mu, &attr);
    if (rc != 0) {
      pthread_mutexattr_destroy(&attr);
      return Error(Err::kInitializationError, "pthread_mutex_init: {}", std::strerror(rc));
    }
  }
  pthread_mutexattr_destroy(&attr);
  for (TenantSettingsRow& s : r->settings) {
    s.weight.store(kDefaultWeight);
    s.priority.store(static_cast<uint32_t>(Priority::kNormal));
  }
  r->tunables = tunables;
  r->bytes = sizeof(BoardRegion);
  r->magic = kBoardMagic;
  return ComputeBoard(r);
}

Result<ComputeBoard> ComputeBoard::Attach(void* mem, size_t bytes) {
  auto* r = static_cast<BoardRegion*>(mem);
  if (bytes < sizeof(BoardRegion) || r->magic != kBoardMagic || r->bytes != sizeof(BoardRegion))
    return Error(Err::kInitializationError, "compute board region is not formatted (or from another version)");
  return ComputeBoard(r);
}

const Tunables& ComputeBoard::tunables() const { return r_->tunables; }

void ComputeBoard::AddTenant(uint32_t tenant, const ComputeSettings& settings) {
  if (tenant >= kBoardMaxTenants) return;
  for (GpuRow& g : r_->gpus) {
    TenantRunRow& t = g.tenants[tenant];
    t.vt.store(0);
    t.usage_ns.store(0);
    t.tokens_ns.store(0);
    t.refill_ns.store(0);
    t.busy_ns.store(0);
  }
  SetTenant(tenant, settings);
}

void ComputeBoard::SetTenant(uint32_t tenant, const ComputeSettings& settings) {
  if (tenant >= kBoardMaxTenants) return;
  TenantSettingsRow& s = r_->settings[tenant];
  s.weight.store(settings.effective_weight(), std::memory_order_relaxed);
  s.priority.store(static_cast<uint32_t>(settings.priority), std::memory_order_relaxed);
  uint64_t quota = settings.max ? settings.max->quota_us * 1000 : 0;
  uint64_t period = settings.max ? settings.max->period_us * 1000 : 0;
  s.period_ns.store(period, std::memory_order_relaxed);
  s.quota_ns.store(quota, std::memory_order_relaxed);
  // A new cap starts with a full bucket, refilled from now on.
  for (GpuRow& g : r_->gpus) {
    if (quota == 0) continue;
    g.tenants[tenant].tokens_ns.store(static_cast<int64_t>(quota), std::memory_order_relaxed);
    g.tenants[tenant].refill_ns.store(0, std::memory_order_relaxed);
  }
}

void ComputeBoard::SetEnabled(uint32_t gpu, bool on) {
  if (gpu >= kBoardMaxGpus) return;
  GpuRow& g = r_->gpus[gpu];
  GpuLock lock(g, true);
  if (!on) {
    Turn t = Turn::Decode(g.turn.load());
    g.turn.store(Turn{kNoSession, false, t.generation + 1}.Encode());
    for (SessionRunRow& s : g.sessions)
      if (s.state.load() == static_cast<uint32_t>(RunState::kWaiting) ||
          s.state.load() == static_cast<uint32_t>(RunState::kOwner))
        s.state.store(static_cast<uint32_t>(RunState::kIdle));
    g.waiting.store(0);
    g.yield.store(0);
  }
  g.enabled.store(on ? 1 : 0, std::memory_order_release);
}

void ComputeBoard::OpenSession(uint32_t slot, uint32_t tenant) {
  if (slot >= kBoardMaxSessions || tenant >= kBoardMaxTenants) return;
  for (GpuRow& g : r_->gpus) {
    SessionRunRow& s = g.sessions[slot];
    s.usage_ns.store(0);
    s.waiting_since.store(0);
    s.drain_until.store(0);
    s.state.store(static_cast<uint32_t>(RunState::kIdle));
  }
  r_->session_tenant[slot].store(tenant + 1, std::memory_order_release);
}

void ComputeBoard::CloseSession(uint32_t slot, uint64_t now) {
  if (slot >= kBoardMaxSessions) return;
  for (uint32_t gi = 0; gi < kBoardMaxGpus; gi++) {
    GpuRow& g = r_->gpus[gi];
    GpuLock lock(g, true);
    GpuOps ops(r_, gi);
    SessionRunRow& s = g.sessions[slot];
    if (s.state.load() == static_cast<uint32_t>(RunState::kWaiting)) g.waiting.fetch_sub(1);
    s.state.store(static_cast<uint32_t>(RunState::kClosed));
    for (int attempt = 0; attempt < 100; attempt++) {
      uint64_t w = g.turn.load();
      if (Turn::Decode(w).owner != slot) break;
      if (ops.Grant(ops.Best(now, kNoSession), w, now)) break;
    }
  }
  r_->session_tenant[slot].store(0, std::memory_order_release);
}

bool ComputeBoard::enabled(uint32_t gpu) const {
  return gpu < kBoardMaxGpus && r_->gpus[gpu].enabled.load(std::memory_order_acquire) != 0;
}

uint64_t ComputeBoard::TenantUsageNs(uint32_t tenant, uint32_t gpu) const {
  if (tenant >= kBoardMaxTenants || gpu >= kBoardMaxGpus) return 0;
  return r_->gpus[gpu].tenants[tenant].usage_ns.load(std::memory_order_relaxed);
}

uint64_t ComputeBoard::SessionUsageNs(uint32_t slot, uint32_t gpu) const {
  if (slot >= kBoardMaxSessions || gpu >= kBoardMaxGpus) return 0;
  return r_->gpus[gpu].sessions[slot].usage_ns.load(std::memory_order_relaxed);
}

uint32_t ComputeBoard::TurnOwner(uint32_t gpu) const {
  if (gpu >= kBoardMaxGpus) return kNoSession;
  Turn t = Turn::Decode(r_->gpus[gpu].turn.load(std::memory_order_acquire));
  return t.idle ? kNoSession : t.owner;
}

uint32_t ComputeBoard::Waiting(uint32_t gpu) const {
  return gpu < kBoardMaxGpus ? r_->gpus[gpu].waiting.load(std::memory_order_relaxed) : 0;
}

uint32_t ComputeBoard::SessionTenant(uint32_t slot) const {
  if (slot >= kBoardMaxSessions) return kNoSession;
  uint32_t t = r_->session_tenant[slot].load(std::memory_order_acquire);
  return t == 0 ? kNoSession : t - 1;
}

RunState ComputeBoard::SessionState(uint32_t slot, uint32_t gpu) const {
  if (slot >= kBoardMaxSessions || gpu >= kBoardMaxGpus) return RunState::kClosed;
  return static_cast<RunState>(r_->gpus[gpu].sessions[slot].state.load(std::memory_order_relaxed));
}

uint64_t ComputeBoard::turn_word(uint32_t gpu) const { return r_->gpus[gpu].turn.load(std::memory_order_acquire); }
uint64_t ComputeBoard::turn_end(uint32_t gpu) const { return r_->gpus[gpu].turn_end.load(std::memory_order_relaxed); }

bool ComputeBoard::Contended(uint32_t gpu) const {
  const GpuRow& g = r_->gpus[gpu];
  return g.waiting.load(std::memory_order_relaxed) > 0 || g.yield.load(std::memory_order_relaxed) != 0;
}

bool ComputeBoard::YieldRequested(uint32_t gpu) const {
  return r_->gpus[gpu].yield.load(std::memory_order_relaxed) != 0;
}

bool ComputeBoard::HigherClassPresent(uint32_t gpu, uint32_t tenant, uint64_t now) const {
  const GpuRow& g = r_->gpus[gpu];
  uint32_t mine = r_->settings[tenant].priority.load(std::memory_order_relaxed);
  for (uint32_t p = mine + 1; p < kNumPriorities; p++) {
    uint64_t seen = g.class_seen_ns[p].load(std::memory_order_relaxed);
    if (seen != 0 && Diff(now, seen) < static_cast<int64_t>(r_->tunables.presence_ns)) return true;
  }
  return false;
}

int64_t ComputeBoard::CapTokens(uint32_t gpu, uint32_t tenant) const {
  if (r_->settings[tenant].quota_ns.load(std::memory_order_relaxed) == 0) return INT64_MAX;
  return r_->gpus[gpu].tenants[tenant].tokens_ns.load(std::memory_order_relaxed);
}

Priority ComputeBoard::TenantPriority(uint32_t tenant) const {
  return static_cast<Priority>(r_->settings[tenant].priority.load(std::memory_order_relaxed));
}

ComputeBoard::Outcome ComputeBoard::Request(uint32_t gpu, uint32_t slot, uint64_t now) {
  GpuRow& g = r_->gpus[gpu];
  GpuLock lock(g, false);
  if (!lock.held()) return Outcome::kBusy;
  GpuOps ops(r_, gpu);
  uint32_t t = ops.TenantOf(slot);
  if (t == kNoSession) return Outcome::kWait;  // closed under us
  uint64_t w = g.turn.load(std::memory_order_acquire);
  Turn turn = Turn::Decode(w);
  auto state = static_cast<RunState>(ops.S(slot).state.load(std::memory_order_relaxed));
  if (turn.owner == slot && state == RunState::kOwner) return Outcome::kGranted;
  if (state != RunState::kWaiting) {
    ops.ClampOnBusy(t, slot, now);
    ops.EnterWaiting(slot, now);
  }
  g.class_seen_ns[ops.Prio(t)].store(now, std::memory_order_relaxed);
  if (turn.owner == kNoSession || turn.idle || ops.Unresponsive(turn.owner, now)) {
    // Nobody is using the GPU (or its holder stopped answering): the best waiter gets it.
    uint32_t b = ops.Best(now, kNoSession);
    if (ops.Grant(b, w, now) && turn.owner != kNoSession && turn.owner != b &&
        ops.S(turn.owner).state.load(std::memory_order_relaxed) == static_cast<uint32_t>(RunState::kOwner))
      ops.S(turn.owner).state.store(static_cast<uint32_t>(RunState::kIdle), std::memory_order_relaxed);
    // An idle holder may have taken its turn back meanwhile (it does so without the lock):
    // then it is a holder like any other, below.
    turn = Turn::Decode(g.turn.load(std::memory_order_acquire));
  }
  if (turn.owner != slot && turn.owner != kNoSession && !turn.idle) {
    uint32_t holder = ops.TenantOf(turn.owner);
    // A higher class within its share does not wait for the end of a lower class's turn.
    if (holder != kNoSession && ops.Prio(t) > ops.Prio(holder) && ops.Best(now, turn.owner) == slot)
      g.yield.store(1, std::memory_order_relaxed);
  }
  return Turn::Decode(g.turn.load(std::memory_order_acquire)).owner == slot ? Outcome::kGranted : Outcome::kWait;
}

ComputeBoard::Outcome ComputeBoard::EndTurn(uint32_t gpu, uint32_t slot, uint64_t now, uint64_t inflight_ns) {
  GpuRow& g = r_->gpus[gpu];
  GpuLock lock(g, false);
  if (!lock.held()) return Outcome::kBusy;
  GpuOps ops(r_, gpu);
  Turn turn = Turn::Decode(g.turn.load(std::memory_order_acquire));
  if (turn.owner != slot) return Outcome::kLost;
  ops.Touch(slot, now);
  if (ops.Best(now, slot) == slot) {
    g.turn_end.store(now + ops.TurnLength(slot), std::memory_order_relaxed);
    g.yield.store(0, std::memory_order_relaxed);
    g.contended_since.store(g.waiting.load(std::memory_order_relaxed) > 0 ? now : 0, std::memory_order_relaxed);
    return Outcome::kRenewed;
  }
  ops.S(slot).drain_until.store(now + inflight_ns, std::memory_order_relaxed);
  return Outcome::kDrain;
}

bool ComputeBoard::Release(uint32_t gpu, uint32_t slot, uint64_t now, bool has_work) {
  GpuRow& g = r_->gpus[gpu];
  GpuLock lock(g, false);
  if (!lock.held()) return false;
  GpuOps ops(r_, gpu);
  if (ops.TenantOf(slot) == kNoSession) return true;
  uint64_t w = g.turn.load(std::memory_order_acquire);
  Turn turn = Turn::Decode(w);
  auto state = static_cast<RunState>(ops.S(slot).state.load(std::memory_order_relaxed));
  if (turn.owner == slot) {
    if (has_work) ops.EnterWaiting(slot, now);
    else ops.S(slot).state.store(static_cast<uint32_t>(RunState::kIdle), std::memory_order_relaxed);
    // Nobody else writes the word of an active holder; an idle one only this session.
    for (int attempt = 0; attempt < 100; attempt++) {
      if (ops.Grant(ops.Best(now, kNoSession), w, now)) break;
      w = g.turn.load(std::memory_order_acquire);
      if (Turn::Decode(w).owner != slot) break;
    }
    return true;
  }
  if (state == RunState::kWaiting && !has_work) {
    ops.S(slot).state.store(static_cast<uint32_t>(RunState::kIdle), std::memory_order_relaxed);
    g.waiting.fetch_sub(1, std::memory_order_relaxed);
  } else if (state == RunState::kOwner) {
    // Passed over while unresponsive: back in the queue, or idle.
    if (has_work) ops.EnterWaiting(slot, now);
    else ops.S(slot).state.store(static_cast<uint32_t>(RunState::kIdle), std::memory_order_relaxed);
  }
  return true;
}

bool ComputeBoard::MarkIdle(uint32_t gpu, uint32_t slot) {
  GpuRow& g = r_->gpus[gpu];
  uint64_t w = g.turn.load(std::memory_order_acquire);
  Turn t = Turn::Decode(w);
  if (t.owner != slot) return false;
  if (t.idle) return true;
  return g.turn.compare_exchange_strong(w, Turn{slot, true, t.generation + 1}.Encode(), std::memory_order_acq_rel);
}

bool ComputeBoard::TryActivate(uint32_t gpu, uint32_t slot, uint64_t now) {
  GpuRow& g = r_->gpus[gpu];
  uint64_t w = g.turn.load(std::memory_order_acquire);
  Turn t = Turn::Decode(w);
  if (t.owner != slot || !t.idle) return t.owner == slot && !t.idle;
  if (!g.turn.compare_exchange_strong(w, Turn{slot, false, t.generation + 1}.Encode(), std::memory_order_acq_rel))
    return false;
  g.turn_end.store(now + r_->tunables.quantum_ns, std::memory_order_relaxed);
  return true;
}

void ComputeBoard::Charge(uint32_t gpu, uint32_t slot, uint64_t ns) {
  if (gpu >= kBoardMaxGpus || slot >= kBoardMaxSessions || ns == 0) return;
  GpuOps ops(r_, gpu);
  uint32_t t = ops.TenantOf(slot);
  if (t == kNoSession) return;
  ops.S(slot).usage_ns.fetch_add(ns, std::memory_order_relaxed);
  TenantRunRow& row = ops.T(t);
  row.usage_ns.fetch_add(ns, std::memory_order_relaxed);
  row.vt.fetch_add(ns * kVtScale / ops.Weight(t), std::memory_order_relaxed);
  if (r_->settings[t].quota_ns.load(std::memory_order_relaxed) != 0)
    row.tokens_ns.fetch_sub(static_cast<int64_t>(ns), std::memory_order_relaxed);
}

}  // namespace remora::sched

#include "sched/board.h"

#include <pthread.h>

#include <cstring>
#include <new>

#include "sched/board_region.h"

namespace remora::sched {

namespace {
constexpr uint64_t kBoardMagic = 0x31445242504d4352ull;  // "RCMPBRD1"
constexpr uint64_t kOwnerMask = 0xffff;
constexpr uint64_t kIdleBit = uint64_t{1} << 16;
constexpr int kGenerationShift = 17;
static_assert(kBoardMaxSessions < kOwnerMask, "turn word owner field");
}  // namespace

Turn Turn::Decode(uint64_t w) {
  Turn t;
  uint64_t o = w & kOwnerMask;
  // Any word a worker wrote: an owner beyond the slots is nobody (board_region.h).
  t.owner = o == 0 || o > kBoardMaxSessions ? kNoSession : static_cast<uint32_t>(o - 1);
  t.idle = (w & kIdleBit) != 0;
  t.generation = w >> kGenerationShift;
  return t;
}

uint64_t Turn::Encode() const {
  uint64_t o = owner == kNoSession ? 0 : uint64_t{owner} + 1;
  return o | (idle ? kIdleBit : 0) | (generation << kGenerationShift);
}

using board_internal::BoardPriority;
using board_internal::BoardTenantOf;
using board_internal::Diff;
using board_internal::GpuLock;
using board_internal::GpuOps;

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

uint32_t ComputeBoard::SessionTenant(uint32_t slot) const { return BoardTenantOf(r_, slot); }

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
  uint32_t mine = BoardPriority(r_, tenant);
  for (uint32_t p = mine + 1; p < kNumPriorities; p++) {
    uint64_t seen = g.class_seen_ns[p].load(std::memory_order_relaxed);
    if (seen != 0 && Diff(now, seen) < static_cast<int64_t>(r_->tunables.presence_ns)) return true;
  }
  return false;
}

int64_t ComputeBoard::CapTokens(uint32_t gpu, uint32_t tenant) const {
  if (tenant >= kBoardMaxTenants || r_->settings[tenant].quota_ns.load(std::memory_order_relaxed) == 0)
    return INT64_MAX;
  return r_->gpus[gpu].tenants[tenant].tokens_ns.load(std::memory_order_relaxed);
}

Priority ComputeBoard::TenantPriority(uint32_t tenant) const {
  return static_cast<Priority>(BoardPriority(r_, tenant));
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
  uint64_t dv = ns * kVtScale / ops.Weight(t);
  uint64_t vt = row.vt.fetch_add(dv, std::memory_order_relaxed) + dv;
  // Nobody waits: the GPU's virtual time follows the tenant using it (the least of it and an
  // active holder of another tenant, whose in-flight work this may be the end of).
  GpuRow& g = r_->gpus[gpu];
  if (g.waiting.load(std::memory_order_relaxed) == 0) {
    Turn turn = Turn::Decode(g.turn.load(std::memory_order_acquire));
    uint32_t o = turn.idle ? kNoSession : ops.TenantOf(turn.owner);
    if (o != kNoSession && o != t) {
      uint64_t ov = ops.T(o).vt.load(std::memory_order_relaxed);
      if (Diff(ov, vt) < 0) vt = ov;
    }
    ops.AdvanceClock(vt);
  }
  if (r_->settings[t].quota_ns.load(std::memory_order_relaxed) != 0)
    row.tokens_ns.fetch_sub(static_cast<int64_t>(ns), std::memory_order_relaxed);
}

}  // namespace remora::sched

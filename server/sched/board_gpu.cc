// The decisions on one GPU's row of the compute board (board_region.h): who holds the GPU
// next, turn lengths, caps and catch-up limits. Called by ComputeBoard (board.cc) with the
// row's lock held.
#include <algorithm>
#include <array>

#include "sched/board_region.h"

namespace remora::sched::board_internal {

void GpuOps::Refill(uint32_t t, uint64_t now) {
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

bool GpuOps::Eligible(uint32_t t, uint64_t now) {
  uint64_t quota = r_->settings[t].quota_ns.load(std::memory_order_relaxed);
  if (quota == 0) return true;
  Refill(t, now);
  int64_t need = static_cast<int64_t>(std::min(quota, r_->tunables.min_burst_ns));
  return T(t).tokens_ns.load(std::memory_order_relaxed) >= need;
}

uint32_t GpuOps::Best(uint64_t now, uint32_t extra) {
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
  AdvanceClock(vmin);
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

void GpuOps::AdvanceClock(uint64_t vt) {
  uint64_t cur = g_.vclock.load(std::memory_order_relaxed);
  while (Diff(vt, cur) > 0 && !g_.vclock.compare_exchange_weak(cur, vt, std::memory_order_relaxed)) {
  }
}

uint64_t GpuOps::TurnLength(uint32_t slot) {
  uint64_t q = r_->tunables.quantum_ns;
  uint32_t t = slot == kNoSession ? kNoSession : TenantOf(slot);
  if (t == kNoSession || max_weight_ == 0) return q;
  return std::max(q / 10, q * Weight(t) / max_weight_);
}

bool GpuOps::Busy(uint32_t t, uint32_t slot) {
  Turn turn = Turn::Decode(g_.turn.load(std::memory_order_acquire));
  if (turn.owner != kNoSession && turn.owner != slot && !turn.idle && TenantOf(turn.owner) == t) return true;
  if (g_.waiting.load(std::memory_order_relaxed) == 0) return false;
  for (uint32_t s = 0; s < kBoardMaxSessions; s++)
    if (s != slot && S(s).state.load(std::memory_order_relaxed) == static_cast<uint32_t>(RunState::kWaiting) &&
        TenantOf(s) == t)
      return true;
  return false;
}

void GpuOps::ClampOnBusy(uint32_t t, uint32_t slot, uint64_t now) {
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
  if (!found) vmin = g_.vclock.load(std::memory_order_relaxed);
  uint64_t floor = vmin - r_->tunables.quantum_ns * kVtScale / Weight(t);
  if (Diff(T(t).vt.load(std::memory_order_relaxed), floor) < 0) T(t).vt.store(floor, std::memory_order_relaxed);
}

void GpuOps::EnterWaiting(uint32_t slot, uint64_t now) {
  Touch(slot, now);
  S(slot).state.store(static_cast<uint32_t>(RunState::kWaiting), std::memory_order_relaxed);
  S(slot).waiting_since.store(now, std::memory_order_relaxed);
  if (g_.waiting.fetch_add(1, std::memory_order_relaxed) == 0) g_.contended_since.store(now, std::memory_order_relaxed);
}

bool GpuOps::Grant(uint32_t b, uint64_t expected, uint64_t now) {
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

bool GpuOps::Unresponsive(uint32_t owner, uint64_t now) {
  uint64_t due = g_.turn_end.load(std::memory_order_relaxed);
  uint64_t drain = S(owner).drain_until.load(std::memory_order_relaxed);
  uint64_t since = g_.contended_since.load(std::memory_order_relaxed);
  if (Diff(drain, due) > 0) due = drain;
  if (Diff(since, due) > 0) due = since;
  return Diff(now, due) > static_cast<int64_t>(r_->tunables.hung_grace_ns);
}

}  // namespace remora::sched::board_internal

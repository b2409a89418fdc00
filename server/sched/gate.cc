#include "sched/gate.h"

#include <algorithm>

namespace remora::sched {

namespace {
constexpr uint64_t kRetryNs = 20'000;             // a waiter asks the board again this often
constexpr uint64_t kMarkerIntervalNs = 1'000'000; // uncontended: a marker per stream this often
constexpr uint64_t kTailNs = 50'000;              // ...or once a stream got no work for this long
constexpr uint64_t kFlushNs = 200'000;            // measured time reaches the board this often
constexpr uint64_t kIdleWaitNs = 100'000;         // uncontended busy: poll completions this often
constexpr uint64_t kMinLaunchNs = 1'000;
constexpr uint64_t kInitialLaunchNs = 20'000;
constexpr size_t kMaxMarkersPerStream = 256;
constexpr uint64_t kPruneNs = 1'000'000'000;      // forget a stream idle this long

int64_t Diff(uint64_t a, uint64_t b) { return static_cast<int64_t>(a - b); }
}  // namespace

GpuGate::GpuGate(ComputeBoard& board, uint32_t gpu, uint32_t slot, MarkerOps& ops)
    : board_(board), gpu_(gpu), slot_(slot), tenant_(board.SessionTenant(slot)), ops_(ops),
      avg_launch_ns_(kInitialLaunchNs) {}

GpuGate::~GpuGate() { DropTracking(); }

GpuGate::Track& GpuGate::Find(StreamKey s) {
  if (last_track_ < tracks_.size() && tracks_[last_track_].stream == s) return tracks_[last_track_];
  for (size_t i = 0; i < tracks_.size(); i++) {
    if (tracks_[i].stream == s) {
      last_track_ = i;
      return tracks_[i];
    }
  }
  tracks_.emplace_back();
  tracks_.back().stream = s;
  last_track_ = tracks_.size() - 1;
  return tracks_.back();
}

bool GpuGate::Admit(uint64_t now) {
  if (!board_.enabled(gpu_)) {
    if (active_) Deactivate(now);
    return true;
  }
  if (!active_) {
    active_ = true;
    tenant_ = board_.SessionTenant(slot_);
    last_tick_ns_ = now;
  }
  if (idle_since_ns_ != 0) {
    last_gap_ns_ = Diff(now, idle_since_ns_) > 0 ? now - idle_since_ns_ : 0;
    idle_since_ns_ = 0;
  }
  for (int round = 0; round < 2; round++) {
    Turn t = Turn::Decode(board_.turn_word(gpu_));
    if (t.owner != slot_) return Refuse(now);
    if (t.idle && !board_.TryActivate(gpu_, slot_, now)) continue;  // taken meanwhile: look again
    if (draining_) {
      wants_ = true;
      return false;
    }
    bool contended = board_.Contended(gpu_);
    if (contended && (board_.YieldRequested(gpu_) || Diff(now, board_.turn_end(gpu_)) >= 0) && !EndTurn(now)) {
      wants_ = true;
      return false;
    }
    if (outstanding_ > 0 && !Room(now, contended)) {
      wants_ = true;
      return false;
    }
    return Admitted(now);
  }
  return Refuse(now);
}

bool GpuGate::Admitted(uint64_t now) {
  wants_ = false;
  linger_since_ns_ = 0;
  if (refused_since_ns_ != 0) {
    uint64_t waited = Diff(now, refused_since_ns_) > 0 ? now - refused_since_ns_ : 0;
    wait_stats_.waits++;
    wait_stats_.total_ns += waited;
    wait_stats_.max_ns = std::max(wait_stats_.max_ns, waited);
    refused_since_ns_ = 0;
  }
  return true;
}

bool GpuGate::Refuse(uint64_t now) {
  if (!wants_) next_request_ns_ = now;  // the first refusal asks at once
  if (refused_since_ns_ == 0) refused_since_ns_ = now;
  wants_ = true;
  if (Diff(now, next_request_ns_) >= 0 && Request(now)) {
    Turn t = Turn::Decode(board_.turn_word(gpu_));
    if (t.owner == slot_ && (!t.idle || board_.TryActivate(gpu_, slot_, now)) && !draining_) return Admitted(now);
  }
  return false;
}

bool GpuGate::Request(uint64_t now) {
  ComputeBoard::Outcome o = board_.Request(gpu_, slot_, now);
  next_request_ns_ = now + kRetryNs;
  if (o == ComputeBoard::Outcome::kGranted) {
    draining_ = false;
    return true;
  }
  return false;
}

bool GpuGate::EndTurn(uint64_t now) {
  bool yield = board_.YieldRequested(gpu_);
  switch (board_.EndTurn(gpu_, slot_, now, InflightNs())) {
    case ComputeBoard::Outcome::kRenewed: return true;
    case ComputeBoard::Outcome::kDrain:
      // A higher class preempts: with at most one launch in flight (what a lower class keeps
      // while a higher one is present), the turn goes over now. The GPU runs one context at a
      // time and finishes that launch before the next one's work, so the higher class's
      // launch waits there for it, not for this loop to see it complete, give the turn back
      // and the other loop to notice.
      draining_ = true;
      hand_over_ = yield && outstanding_ <= 1;
      return false;
    case ComputeBoard::Outcome::kBusy: return true;  // ask again at the next Admit or Poll
    default: return false;                           // lost: the next Admit asks for it again
  }
}

uint64_t GpuGate::InflightNs() const { return outstanding_ * std::max(avg_launch_ns_, kMinLaunchNs); }

bool GpuGate::Room(uint64_t now, bool contended) {
  uint64_t inflight = InflightNs();
  // A capped tenant stops where its bucket would run dry; the work in flight may overshoot.
  if (board_.CapTokens(gpu_, tenant_) - static_cast<int64_t>(inflight) <= 0) return false;
  // A higher class used this GPU lately: keep what it would wait behind small (one launch,
  // or the budget), and watch each launch complete.
  precise_ = board_.HigherClassPresent(gpu_, tenant_, now);
  if (precise_) return inflight < board_.tunables().preempt_budget_ns;
  if (!contended) return true;
  // Others wait: what is in flight should be done by the end of the turn.
  return static_cast<int64_t>(inflight) < Diff(board_.turn_end(gpu_), now);
}

void GpuGate::Issued(StreamKey s, uint64_t now) {
  if (!active_) return;
  Track& t = Find(s);
  t.issued++;
  t.last_issue_ns = now;
  outstanding_++;
  if (!ticking_) {
    ticking_ = true;
    last_tick_ns_ = now;
  }
  if (precise_) RecordMarker(t, now);
}

void GpuGate::Covered(StreamKey s, const void* event) {
  if (!active_) return;
  Track& t = Find(s);
  if (t.issued == t.done || t.issued == t.covered) return;
  t.covers.emplace_back(event, t.issued);
  t.covered = t.issued;
  covers_++;
}

void GpuGate::Released(const void* event) {
  if (covers_ == 0) return;
  for (Track& t : tracks_) {
    for (auto it = t.covers.begin(); it != t.covers.end(); ++it) {
      if (it->first != event) continue;
      uint64_t count = it->second;
      t.covers.erase(it);
      covers_--;
      MarkDone(t, count);
      return;
    }
  }
}

void GpuGate::MarkDone(Track& t, uint64_t count) {
  if (count <= t.done) return;
  uint64_t n = count - t.done;
  t.done = count;
  outstanding_ -= std::min(outstanding_, n);
  // The launch-time estimate: busy time since the last completion over the launches it saw.
  uint64_t sample = estimate_busy_ns_ / n;
  avg_launch_ns_ = (3 * avg_launch_ns_ + std::max(sample, kMinLaunchNs)) / 4;
  estimate_busy_ns_ = 0;
}

void GpuGate::RecordMarker(Track& t, uint64_t now) {
  if (t.issued == t.covered) return;
  if (t.markers.size() >= kMaxMarkersPerStream) return;
  Result<Marker> m = ops_.Record(t.stream);
  t.last_marker_ns = now;
  if (!m.ok()) {
    // No marker possible (the stream is gone or captures into a graph): nothing to wait for.
    t.covered = t.issued;
    MarkDone(t, t.issued);
    return;
  }
  t.markers.emplace_back(*m, t.issued);
  t.covered = t.issued;
}

void GpuGate::Tick(uint64_t now) {
  // The session had work in flight since the last tick: that time was the GPU's for it
  // (until this poll saw the work complete).
  if (ticking_ && Diff(now, last_tick_ns_) > 0) {
    unflushed_ns_ += now - last_tick_ns_;
    estimate_busy_ns_ += now - last_tick_ns_;
  }
  last_tick_ns_ = now;
  ticking_ = outstanding_ > 0 || linger_since_ns_ != 0;
  if (unflushed_ns_ >= kFlushNs || (!ticking_ && unflushed_ns_ > 0)) Flush();
}

void GpuGate::Flush() {
  if (unflushed_ns_ == 0) return;
  board_.Charge(gpu_, slot_, unflushed_ns_);
  charged_ns_ += unflushed_ns_;
  unflushed_ns_ = 0;
}

void GpuGate::Poll(uint64_t now) {
  if (!active_) return;
  if (!board_.enabled(gpu_)) {
    Deactivate(now);
    return;
  }
  for (size_t i = 0; i < tracks_.size(); i++) {
    Track& t = tracks_[i];
    while (!t.markers.empty() && ops_.Done(t.markers.front().first)) {
      uint64_t count = t.markers.front().second;
      ops_.Release(t.markers.front().first);
      t.markers.pop_front();
      MarkDone(t, count);
    }
  }
  contended_ = board_.Contended(gpu_);
  for (size_t i = 0; i < tracks_.size(); i++) {
    Track& t = tracks_[i];
    if (t.issued == t.covered) continue;
    if (contended_ || draining_ || Diff(now, t.last_marker_ns) >= static_cast<int64_t>(kMarkerIntervalNs) ||
        Diff(now, t.last_issue_ns) >= static_cast<int64_t>(kTailNs))
      RecordMarker(t, now);
  }
  Tick(now);
  if (outstanding_ == 0 && !wants_ && idle_since_ns_ == 0) idle_since_ns_ = now;
  // Streams that have been quiet for long (destroyed, most likely) are forgotten.
  if (outstanding_ == 0 && tracks_.size() > 8) {
    std::erase_if(tracks_, [&](const Track& t) {
      return t.markers.empty() && t.covers.empty() && t.issued == t.done && Diff(now, t.last_issue_ns) > static_cast<int64_t>(kPruneNs);
    });
    last_track_ = 0;
  }
  TurnStep(now);
}

void GpuGate::TurnStep(uint64_t now) {
  Turn t = Turn::Decode(board_.turn_word(gpu_));
  // Lingering is holding a turn with nothing to do; anything else ends it.
  if (t.owner != slot_ || t.idle || outstanding_ > 0 || wants_) linger_since_ns_ = 0;
  if (t.owner != slot_) {
    draining_ = hand_over_ = false;
    if (wants_ && Diff(now, next_request_ns_) >= 0) Request(now);
    return;
  }
  if (t.idle) {
    if (wants_) board_.TryActivate(gpu_, slot_, now);
    else if (board_.Waiting(gpu_) > 0) board_.Release(gpu_, slot_, now, false);
    return;
  }
  if (draining_) {
    if ((outstanding_ == 0 || hand_over_) && board_.Release(gpu_, slot_, now, wants_)) {
      draining_ = hand_over_ = false;
      next_request_ns_ = now + kRetryNs;
    }
    return;
  }
  if (outstanding_ == 0 && !wants_) {
    // Nothing in flight, nothing to issue. Alone, the turn is marked idle (anyone may take
    // it). With others waiting, a session whose last pause was short (a loop that only
    // synchronised) keeps the turn a moment for its client's next call, and that moment is
    // charged; one that pauses longer, or is asked to yield, gives the turn back at once.
    if (board_.Waiting(gpu_) == 0) {
      if (board_.MarkIdle(gpu_, slot_)) linger_since_ns_ = 0;
      return;
    }
    if (linger_since_ns_ == 0 && !board_.YieldRequested(gpu_) && last_gap_ns_ < board_.tunables().linger_ns) {
      linger_since_ns_ = now;
      ticking_ = true;
      return;
    }
    if (board_.YieldRequested(gpu_) || Diff(now, linger_since_ns_) >= static_cast<int64_t>(board_.tunables().linger_ns)) {
      Tick(now);
      linger_since_ns_ = 0;
      ticking_ = false;
      Flush();
      board_.Release(gpu_, slot_, now, false);
    }
    return;
  }
  if (contended_ && (board_.YieldRequested(gpu_) || Diff(now, board_.turn_end(gpu_)) >= 0)) {
    EndTurn(now);
    return;
  }
  // Out of cap with work waiting and nothing in flight: let the board decide who runs.
  if (wants_ && outstanding_ == 0 && board_.CapTokens(gpu_, tenant_) <= 0 && board_.Release(gpu_, slot_, now, true))
    next_request_ns_ = now + kRetryNs;
}

uint64_t GpuGate::MaxWaitNs() const {
  if (!active_) return UINT64_MAX;
  bool owner = Turn::Decode(board_.turn_word(gpu_)).owner == slot_;
  if (wants_) {
    // Waiting for room in its own turn, or for a turn (a high class reacts at once).
    if (owner || board_.TenantPriority(tenant_) == Priority::kHigh) return 0;
    return kRetryNs;
  }
  if (outstanding_ > 0) return contended_ || draining_ ? 0 : kIdleWaitNs;
  if (linger_since_ns_ != 0) return 0;
  return UINT64_MAX;
}

void GpuGate::DropTracking() {
  ticking_ = false;
  linger_since_ns_ = 0;
  for (Track& t : tracks_)
    for (auto& m : t.markers) ops_.Release(m.first);
  tracks_.clear();
  last_track_ = 0;
  outstanding_ = 0;
  covers_ = 0;
}

void GpuGate::Deactivate(uint64_t now) {
  Tick(now);
  Flush();
  DropTracking();
  active_ = wants_ = draining_ = hand_over_ = precise_ = false;
  refused_since_ns_ = 0;
}

void GpuGate::Close(uint64_t now) {
  if (!active_) {
    DropTracking();
    return;
  }
  Tick(now);
  Flush();
  DropTracking();
  for (int i = 0; i < 1000 && !board_.Release(gpu_, slot_, now, false); i++) {
  }
  active_ = wants_ = draining_ = hand_over_ = false;
  refused_since_ns_ = 0;
}

}  // namespace remora::sched

// GpuGate: one session's admission of GPU work on one GPU, and the measurement of the GPU
// time that work takes. The worker's executor asks Admit() before it issues GPU work (a
// kernel launch, a library call that launches kernels); when the answer is no, the work
// waits in the session's queue and the executor asks again, while it keeps serving the rest
// of the loop. Poll() runs once per loop iteration.
//
// Measurement: the session's GPU time on this GPU is the time during which it has work in
// flight there - from the issue of work while none was in flight to the moment all of it is
// seen complete - measured on the host clock. Completion is seen through markers (events
// recorded behind the issued work, MarkerOps) and through the executor's own completion
// events (Covered/Released: a synchronising call's event covers the work before it, at no
// extra cost). Because turns are exclusive, that interval is the GPU time the session held;
// its error is the launch latency at the start and the polling delay at the end (a few
// microseconds while others wait, when the executor polls without sleeping).
//
// Cost when the board has enforcement off: one atomic load per Admit, nothing else.
// Threading: the executor's thread only. Pure logic: the caller passes the time.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "remora/base/status.h"
#include "sched/board.h"

namespace remora::sched {

using StreamKey = const void*;  // the driver's stream handle (nullptr: the legacy stream)
using Marker = void*;           // a completion marker the gate owns (an event)

// The GPU as the gate needs it.
class MarkerOps {
 public:
  virtual ~MarkerOps() = default;
  // A marker behind everything issued on `s` so far. An error means the stream takes no
  // marker (it is gone, or being captured into a graph): its work is then counted as done.
  virtual Result<Marker> Record(StreamKey s) = 0;
  // Whether the GPU has passed the marker (or failed at it).
  virtual bool Done(Marker m) = 0;
  virtual void Release(Marker m) = 0;
};

class GpuGate {
 public:
  // `board` and `ops` must outlive the gate. `slot` is the session's board (ledger) slot.
  GpuGate(ComputeBoard& board, uint32_t gpu, uint32_t slot, MarkerOps& ops);
  ~GpuGate();
  GpuGate(const GpuGate&) = delete;
  GpuGate& operator=(const GpuGate&) = delete;

  // May GPU work be issued on this GPU now? false: keep it queued, ask again (the gate has
  // asked for the GPU). Always true while the board has enforcement off for this GPU.
  bool Admit(uint64_t now);
  // Work admitted by the last Admit was issued on `s`.
  void Issued(StreamKey s, uint64_t now);
  // The executor recorded `event` on `s` for its own use: it follows everything issued there
  // so far. It has completed (or the session is ending) when the executor releases it.
  void Covered(StreamKey s, const void* event);
  void Released(const void* event);
  // Completions, markers, time charged, the turn given back or ended. Once per loop.
  void Poll(uint64_t now);
  // How long the executor may sleep before the next Poll: 0 spin, UINT64_MAX as it likes.
  uint64_t MaxWaitNs() const;
  // Gives back markers and the turn (charging what was measured). Idempotent.
  void Close(uint64_t now);

  bool active() const { return active_; }     // enforcement on: work is being measured
  bool busy() const { return outstanding_ > 0; }
  bool wants() const { return wants_; }       // refused work is waiting
  uint64_t charged_ns() const { return charged_ns_; }  // measured so far (this gate)

  // How long GPU work waited for a turn: admissions that had to wait, their total and
  // longest wait (from the first refusal to the admission). For the worker's session log.
  struct WaitStats {
    uint64_t waits = 0, total_ns = 0, max_ns = 0;
  };
  const WaitStats& wait_stats() const { return wait_stats_; }

 private:
  struct Track {
    StreamKey stream = nullptr;
    uint64_t issued = 0;   // launches issued
    uint64_t covered = 0;  // launches a marker or cover follows
    uint64_t done = 0;     // launches seen complete
    uint64_t last_marker_ns = 0, last_issue_ns = 0;
    std::deque<std::pair<Marker, uint64_t>> markers;            // in stream order
    std::vector<std::pair<const void*, uint64_t>> covers;
  };

  Track& Find(StreamKey s);
  bool Refuse(uint64_t now);
  bool Admitted(uint64_t now);
  bool Request(uint64_t now);
  bool EndTurn(uint64_t now);
  bool Room(uint64_t now, bool contended);
  uint64_t InflightNs() const;
  void RecordMarker(Track& t, uint64_t now);
  void MarkDone(Track& t, uint64_t count);
  void Tick(uint64_t now);
  void Flush();
  void TurnStep(uint64_t now);
  void Deactivate(uint64_t now);
  void DropTracking();

  ComputeBoard& board_;
  const uint32_t gpu_, slot_;
  uint32_t tenant_;
  MarkerOps& ops_;

  bool active_ = false;    // the board had enforcement on at the last look
  bool wants_ = false;     // refused work waits
  bool draining_ = false;  // told to end the turn: issue nothing, give it back when drained
  bool hand_over_ = false; // ...to a higher class: give it back at once, the GPU orders the rest
  bool precise_ = false;   // a higher class is present: a marker after every launch
  bool contended_ = false; // as of the last Poll
  uint64_t next_request_ns_ = 0;

  std::vector<Track> tracks_;
  size_t last_track_ = 0;
  uint64_t outstanding_ = 0;  // launches issued, not seen complete
  uint32_t covers_ = 0;

  bool ticking_ = false;        // work was in flight (or the turn held) at the last tick
  uint64_t linger_since_ns_ = 0;  // holding the turn, idle, for the client's next call
  uint64_t idle_since_ns_ = 0;    // nothing in flight nor wanted since
  uint64_t last_gap_ns_ = 0;      // the last such pause, from its start to the next work
  uint64_t last_tick_ns_ = 0;
  uint64_t unflushed_ns_ = 0;   // measured, not yet charged to the board
  uint64_t estimate_busy_ns_ = 0;
  uint64_t avg_launch_ns_;      // running estimate of one launch's GPU time
  uint64_t charged_ns_ = 0;
  uint64_t refused_since_ns_ = 0;  // waiting for a turn since (0: not waiting)
  WaitStats wait_stats_;
};

}  // namespace remora::sched

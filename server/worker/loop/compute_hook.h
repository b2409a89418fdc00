// ComputeHook: the executor's end of compute shares (server/sched/). One admission point -
// Admit(), asked before a request that issues GPU work is dispatched - and the accounting
// of that work: Issued() where it was issued, and the executor's own completion events
// (Covered/Released), which tell for free that the work before them is done. A refused
// request stays at the head of the session's queue; the executor's loop keeps running and
// asks again (it never blocks). Per GPU of the session, a sched::GpuGate decides and
// measures; its markers are events of the executor's pool.
//
// While the board has enforcement off for a GPU (no tenant of it has a share, a cap or a
// priority), Admit costs a switch on the request type and one atomic load, and nothing is
// recorded or measured. Executor thread only; borrows the board and the executor.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "remora.capnp.h"
#include "sched/board.h"
#include "sched/gate.h"
#include "worker/session/session_state.h"

namespace remora::worker {

class Executor;

class ComputeHook {
 public:
  ComputeHook(sched::ComputeBoard& board, uint32_t slot, Executor& ex);
  ~ComputeHook();
  ComputeHook(const ComputeHook&) = delete;
  ComputeHook& operator=(const ComputeHook&) = delete;

  // Whether `req` may be dispatched now: true for anything but GPU work (kernel launches, and
  // generated calls whose description says `launches`), and for GPU work when its GPU is
  // this session's to use.
  bool Admit(wire::Request::Reader req);
  // The admitted work was issued on `s` (the driver accepted it).
  void Issued(const Stream& s);
  // The executor recorded `e` on `s` / gave it back once complete (or at the session's end).
  void Covered(const Stream& s, DEvent e);
  void Released(int gpu, DEvent e);
  // Once per loop iteration: completions, the time measured, the turns.
  void Poll();
  // How long the loop may sleep before polling again (UINT64_MAX: as it likes).
  uint64_t MaxWaitUs() const;
  // GPU work is in flight or waiting to be admitted: the loop must keep polling.
  bool Busy() const;
  // Gives back every turn and marker (before the executor's pools go). Idempotent.
  void Close();

 private:
  class Markers;
  struct PerGpu;
  sched::GpuGate* Gate(int gpu);

  sched::ComputeBoard& board_;
  const uint32_t slot_;
  Executor& ex_;
  std::array<std::unique_ptr<PerGpu>, sched::kBoardMaxGpus> gpus_;
  uint64_t admitted_ns_ = 0;  // when the last GPU work was admitted (its issue time)
  bool any_active_ = false;   // some gate measures: Poll has work
};

}  // namespace remora::worker

// ComputeRegion: the shared memory of the compute board (server/sched/board.h) - a memfd the
// supervisor creates and formats, and every worker maps (the worker gets the descriptor as
// `--compute-fd N`). Owns the descriptor and the mapping; move-only; unmapped, then closed,
// on destruction.
#pragma once

#include <memory>

#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "sched/board.h"

namespace remora {

class ComputeRegion {
 public:
  ComputeRegion() = default;
  ~ComputeRegion();
  ComputeRegion(ComputeRegion&& o) noexcept;
  ComputeRegion& operator=(ComputeRegion&& o) noexcept;
  ComputeRegion(const ComputeRegion&) = delete;
  ComputeRegion& operator=(const ComputeRegion&) = delete;

  // The supervisor's side: a fresh, formatted board.
  static Result<ComputeRegion> Create(const sched::Tunables& tunables);
  // A worker's side: maps the board behind `fd` (which it then owns).
  static Result<ComputeRegion> Attach(Fd fd);

  bool valid() const { return board_ != nullptr; }
  sched::ComputeBoard& board() const { return *board_; }
  int fd() const { return fd_.get(); }

 private:
  void Reset();
  Fd fd_;
  void* mem_ = nullptr;
  std::unique_ptr<sched::ComputeBoard> board_;
};

}  // namespace remora

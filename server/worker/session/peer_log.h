// The budget of the worker's log lines a client can cause with its calls - refusals, reports,
// failures of one call - so that no client fills the server's log by repeating a call
// (docs/SECURITY.md, N6): at most 20 lines per 10 s for the session, then one line saying how
// many were left out. Use: LOG_PEER(PeerLog(), Info, "...", ...). Any thread.
#pragma once

#include "remora/base/log_budget.h"

namespace remora::worker {

inline SharedLogBudget& PeerLog() {
  static SharedLogBudget budget(20, 10);
  return budget;
}

}  // namespace remora::worker

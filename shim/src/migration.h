// Planned migration, the shim's part (docs/ARCHITECTURE.md, "Planned migration"): the
// administrator's `remoractl session migrate` reaches the application as a notice on one
// link; MoveLink then moves that link's session to the new server while the application
// runs: it holds the link still at a quiet point (Client::Quiesce), has the old server say
// what the session holds, connects to the new server in the same window, has it recreate
// the memory at the same addresses and the streams, events, modules and functions under the
// same handles, copies the memory's contents through this process, swaps the link's
// connection and says goodbye to the old server. On any failure before the swap the session
// stays where it was, whole, and the new server's half-made session ends.
#pragma once

#include <string>

#include "client.h"
#include "remora/protocol/transport.h"

namespace remora::shim {

// Moves `link`'s session to `endpoint` (connected with `options`, whose window must be the
// link's). Blocking; called on a thread of its own, never on a thread inside a call of
// `link`. Thread-safe against the application's calls on the link, which wait meanwhile.
Status MoveLink(Client& link, const Endpoint& endpoint, const ConnectOptions& options);

}  // namespace remora::shim

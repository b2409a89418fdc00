// The name of a request kind: its member of Request's union (protocol/schema/remora.capnp),
// as the census and the worker's log print it. The shim's Cap'n Proto is built lite (no
// reflection), so the names are listed here. Thread-safe; the strings are static.
#pragma once

#include "remora.capnp.h"

namespace remora {

// nullptr for a kind this build does not name (a retired or newer member).
const char* RequestName(wire::Request::Which w);

}  // namespace remora

#!/usr/bin/env bash
# stream_idle_census_test.sh REMORA_RUN PROGRAM TRANSPORT: runs tests/gpu/stream_idle through
# remora-run (host backend) over TRANSPORT with REMORA_CALL_STATS=FILE and checks the census of
# its interval: a stream drained by a copy into pageable memory is synchronised and queried
# without a round trip (51 + 51 times), work queued after the copy by this thread or another
# and a stream never drained are waited for (3 round trips of cuStreamSynchronize; issue 45).
set -euo pipefail
. "$(dirname "$0")/census_run.sh"
census_run "$1" "$2" "$3" stream_idle
python3 - "$census" "$3" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steady = [l for l in lines if l["interval"] != "session"]
assert len(steady) == 1, "one interval expected, found %d" % len(steady)
calls = {c["call"]: c for c in steady[0]["calls"]}
sync = calls.get("cuStreamSynchronize", {"round_trips": 0})["round_trips"]
query = calls.get("cuStreamQuery", {"round_trips": 0})["round_trips"]
assert sync == 3, "cuStreamSynchronize made %d round trips, 3 expected (after work queued by this thread, by another, and on a stream never drained): %s" % (sync, steady[0]["calls"])
assert query == 0, "cuStreamQuery of a drained stream made %d round trips, 0 expected" % query
print("PASS stream idle census over %s: 53 synchronisations, 3 round trips; 51 queries, none" % sys.argv[2])
PY

#!/usr/bin/env bash
# occupancy_census_test.sh REMORA_RUN PROGRAM TRANSPORT: runs tests/gpu/occupancy_memo through
# remora-run (host backend) over TRANSPORT with REMORA_CALL_STATS=FILE and checks the census of
# its interval: 200 repeated occupancy questions answered in the client, one round trip after
# the kernel's carveout changed and one after the context's cache configuration did, and the
# carveout set a second time to the same value answered in the client (issue 45).
set -euo pipefail
. "$(dirname "$0")/census_run.sh"
census_run "$1" "$2" "$3" occupancy_memo
python3 - "$census" "$3" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steady = [l for l in lines if l["interval"] != "session"]
assert len(steady) == 1, "one interval expected, found %d" % len(steady)
calls = {c["call"]: c for c in steady[0]["calls"]}
occ = calls.get("occupancy", {"round_trips": 0})
assert occ["round_trips"] == 2, "occupancy questions made %d round trips, 2 expected (one after each change): %s" % (
    occ["round_trips"], steady[0]["calls"])
fsa = calls.get("funcSetAttribute", {"round_trips": 0})
assert fsa["round_trips"] == 1, "cudaFuncSetAttribute twice with one value made %d round trips, 1 expected" % fsa["round_trips"]
print("PASS occupancy census over %s: 202 questions, %d round trips (after the two changes)" % (sys.argv[2], occ["round_trips"]))
PY

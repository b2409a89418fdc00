#!/usr/bin/env bash
# cudnn_census_test.sh REMORA_RUN PROGRAM TRANSPORT: runs tests/gpu/cudnn_graph (cuDNN's backend
# API with a by-value scalar, against the host backend's emulated cuDNN) through remora-run over
# TRANSPORT with REMORA_CALL_STATS=FILE, then checks the call census of its steady interval
# (between cudaProfilerStart and cudaProfilerStop: 10 steps, each rebuilding heuristics and a
# plan for the graph and asking what cudnn-frontend asks of them, then a variant pack made,
# executed and destroyed and an attribute the application set read back; one stream
# synchronisation): every descriptor call posted but the two finalizes whose status and
# results cudnn-frontend reads (remoraCudnnBackendFinalizeKnown), every query answered in the
# client (those that fill descriptors posted to the worker as remoraCudnnBackendFillPosted),
# the executes carrying their by-value bytes, and no other round trip (issues 42 and 45).
set -euo pipefail
. "$(dirname "$0")/census_run.sh"
census_run "$1" "$2" "$3" cudnn_graph
python3 - "$census" "$3" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steady = [l for l in lines if l["interval"] != "session"]
session = [l for l in lines if l["interval"] == "session"]
assert len(steady) == 1, "one steady interval expected, found %d" % len(steady)
assert len(session) == 1, "one session line expected at the end"
s = steady[0]
calls = {c["call"]: c for c in s["calls"]}
def posted(name, n):
    c = calls.get(name, {"posted": 0, "round_trips": 0})
    assert c["round_trips"] == 0, "%s made %d round trips" % (name, c["round_trips"])
    assert c["posted"] == n, "%s: %d posted, %d expected" % (name, c["posted"], n)
posted("remoraCudnnBackendExecuteByValue", 10)
posted("remoraCudnnBackendFillPosted", 40)  # per step: the results, two engines, the plan's configuration
creates = calls["cudnnBackendCreateDescriptor"]
destroys = calls["cudnnBackendDestroyDescriptor"]
assert creates["round_trips"] == destroys["round_trips"] == 0 and creates["posted"] == destroys["posted"], (creates, destroys)
assert "cudnnBackendGetAttribute" not in calls, "a query was asked of the server: %s" % calls["cudnnBackendGetAttribute"]
known = calls.get("remoraCudnnBackendFinalizeKnown", {"round_trips": 0})
assert known["round_trips"] == 20, "the heuristics' and plans' finalizes: %s" % known
others = [c for c in s["calls"] if c["round_trips"] and not c["synchronising"] and c["call"] != "remoraCudnnBackendFinalizeKnown"]
assert not others, "round trips besides the finalizes and the synchronisation: %s" % others
assert s["round_trips"] == 21 and s["synchronising"] == 1, "20 finalizes and one synchronisation expected: %s" % s
assert s["messages"] == s["posted"] + s["round_trips"]
print("PASS cudnn census over %s: %d messages in the steady interval, %d posted, %d round trips (20 finalizes that "
      "bring what the library computed, the stream synchronisation)" % (sys.argv[2], s["messages"], s["posted"], s["round_trips"]))
PY

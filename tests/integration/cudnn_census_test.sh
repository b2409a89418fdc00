#!/usr/bin/env bash
# cudnn_census_test.sh REMORA_RUN PROGRAM TRANSPORT: runs tests/gpu/cudnn_graph (cuDNN's backend
# API with a by-value scalar, against the host backend's emulated cuDNN) through remora-run over
# TRANSPORT with REMORA_CALL_STATS=FILE, then checks the call census of its steady interval
# (between cudaProfilerStart and cudaProfilerStop: 10 variant packs made, executed and
# destroyed, an attribute the application set read back, one stream synchronisation): every
# descriptor call posted, the executes carrying their by-value bytes, the read answered in the
# client, and no round trip but the synchronisation (issues 42 and 45).
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
posted("cudnnBackendCreateDescriptor", 10)
posted("cudnnBackendSetAttribute", 30)
posted("cudnnBackendFinalize", 10)
posted("remoraCudnnBackendExecuteByValue", 10)
posted("cudnnBackendDestroyDescriptor", 10)
assert "cudnnBackendGetAttribute" not in calls, "an attribute the application set was asked of the server: %s" % calls["cudnnBackendGetAttribute"]
assert s["other_round_trips"] == 0, "round trips besides the synchronisation: %s" % [
    c for c in s["calls"] if c["round_trips"] and not c["synchronising"]]
assert s["round_trips"] == s["synchronising"] == 1, "one synchronisation expected: %s" % s
assert s["messages"] == s["posted"] + s["round_trips"]
print("PASS cudnn census over %s: %d messages in the steady interval, %d posted, %d round trip (the stream "
      "synchronisation)" % (sys.argv[2], s["messages"], s["posted"], s["round_trips"]))
PY

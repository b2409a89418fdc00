#!/usr/bin/env bash
# tcp-stripes.sh BUILD_DIR [STREAMS...]: issue 21's GPU check (CTest gpu.tcp_stripes, label
# gpu). For each STREAMS (default: "default 4 8"; "default" leaves REMORA_TCP_STREAMS unset),
# one remora-bench run (remora-server --backend cuda over tcp://, plus the raw loopback TCP
# ceiling measured in the same run) of the 64 MiB pinned and pageable copies both ways and
# the 4 KiB copies. Passes when, in every run:
#   - the tcp column negotiated data streams (its note says "N tcp data stream(s)", N > 0);
#   - each 64 MiB copy over tcp is >= 10 GB/s, or >= 80% of the raw 4-stream ceiling;
#   - each 4 KiB copy over tcp takes <= 3x native.
# Then prints remora-copy-floor's table (the least a remoted 4 KiB copy takes here; not a check).
# Prints each run's table. Without an NVIDIA GPU: SKIP line, exit 77.
set -u
build=$(cd "${1:?usage: tcp-stripes.sh BUILD_DIR [STREAMS...]}" && pwd)
shift
runs=("$@")
[ ${#runs[@]} -eq 0 ] && runs=(default 4 8)
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
only=memcpy_h2d_pinned_64MiB,memcpy_d2h_pinned_64MiB,memcpy_h2d_pageable_64MiB,memcpy_d2h_pageable_64MiB
only=$only,memcpy_h2d_pinned_4KiB,memcpy_d2h_pinned_4KiB,memcpy_h2d_pageable_4KiB,memcpy_d2h_pageable_4KiB
failures=0
for n in "${runs[@]}"; do
  echo "=== REMORA_TCP_STREAMS=$n"
  if [ "$n" = default ]; then unset REMORA_TCP_STREAMS; else export REMORA_TCP_STREAMS=$n; fi
  "$build/bin/remora-bench" --transports tcp --only "$only" --matmul none --json-file "$work/$n.json"
  python3 - "$work/$n.json" <<'PY' || failures=$((failures + 1))
import json, sys
d = json.load(open(sys.argv[1]))
native, tcp = d["runs"][0], d["runs"][1]
ceil = {p["streams"]: p["gb_per_s"] for p in d.get("tcp_loopback_ceiling", [])}
bad = 0
def check(name, ok, detail):
    global bad
    print(("PASS " if ok else "FAIL ") + name + ": " + detail)
    bad += 0 if ok else 1
streams = [n for n in tcp.get("notes", []) if "tcp data stream" in n]
check("streams", bool(streams) and not streams[0].split(": ", 1)[1].startswith("0 "), streams[0] if streams else "no stream note")
floor = min(10.0, 0.8 * ceil.get(4, 0)) if ceil.get(4) else 10.0
for m in ("memcpy_h2d_pinned_64MiB", "memcpy_d2h_pinned_64MiB", "memcpy_h2d_pageable_64MiB", "memcpy_d2h_pageable_64MiB"):
    v = tcp["metrics"].get(m, {}).get("value")
    check(m, v is not None and v >= floor, f"{v} GB/s (needs >= {floor:.2f}: 10 GB/s or 80% of the 4-stream ceiling {ceil.get(4)})")
for m in ("memcpy_h2d_pinned_4KiB", "memcpy_d2h_pinned_4KiB", "memcpy_h2d_pageable_4KiB", "memcpy_d2h_pageable_4KiB"):
    v, n = tcp["metrics"].get(m, {}).get("value"), native["metrics"].get(m, {}).get("value")
    check(m, v is not None and n and v <= 3 * n, f"{v} us vs native {n} us (needs <= 3x)")
sys.exit(1 if bad else 0)
PY
done
# Context, not a check: the least a remoted 4 KiB copy takes over loopback TCP on this machine.
[ -x "$build/bin/remora-copy-floor" ] && "$build/bin/remora-copy-floor"
[ "$failures" -eq 0 ] && echo "tcp-stripes: PASS" || echo "tcp-stripes: FAIL ($failures run(s))"
[ "$failures" -eq 0 ]

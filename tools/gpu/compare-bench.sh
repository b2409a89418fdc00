#!/usr/bin/env bash
# compare-bench.sh NEW_BUNDLE OLD_BUNDLE [remora-bench options]: runs the remora-bench of two
# bundles (made by make-bundle.sh from two commits) one after the other on this machine, and
# prints per row the remoted/native ratio of each and the change, so a regression shows as a
# same-machine, same-session comparison. Full reports land in $OUT (or /tmp) as
# bench-new.json and bench-old.json.
set -u
new=$(cd "$1" && pwd)
old=$(cd "$2" && pwd)
shift 2
out=${OUT:-/tmp/remora-compare}
mkdir -p "$out"
for which in old new; do
  b=$([ $which = new ] && echo "$new" || echo "$old")
  echo "== remora-bench of $which ($(cat "$b/COMMIT"))"
  LD_LIBRARY_PATH=$b/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} REMORA_COMMIT=$(cat "$b/COMMIT") \
    "$b/bin/remora-bench" --transports shm,tcp --matmul "$b/bin/gpu_matmul_tiled" --json-file "$out/bench-$which.json" "$@" \
    >"$out/bench-$which.txt" 2>&1
  tail -3 "$out/bench-$which.txt"
done
python3 - "$out/bench-old.json" "$out/bench-new.json" <<'PY'
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:3])
rows = {r["id"]: r for r in old["table"]}
print("%-44s %-4s %9s %9s %7s   %9s %9s %7s" % ("metric", "", "old shm x", "new shm x", "change", "old tcp x", "new tcp x", "change"))
worst = 0.0
for r in new["table"]:
    o = rows.get(r["id"])
    if o is None:
        continue
    cells = []
    for t in ("shm", "tcp"):
        a, b = o["x_native"].get(t), r["x_native"].get(t)
        if a is None or b is None:
            cells += ["-", "-", "-"]
            continue
        # Ratios are remoted/native; for times lower is better, for bandwidths higher is.
        change = (b / a - 1) * 100 if r["lower_is_better"] else (a / b - 1) * 100
        worst = max(worst, change)
        cells += ["%.3f" % a, "%.3f" % b, "%+.1f%%" % change]
    print("%-44s %-4s %9s %9s %7s   %9s %9s %7s" % (r["label"][:44], r["unit"], *cells))
print("worst change (positive = slower than before): %+.1f%%" % worst)
PY

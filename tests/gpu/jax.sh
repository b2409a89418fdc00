#!/usr/bin/env bash
# jax.sh BUNDLE_OR_BUILD_DIR: JAX (its own CUDA 13 plugin) natively and through Remora
# (remora-run over shm and tcp, the client touching no local GPU): first the start-up census
# (jax_check.py census: every version query JAX's plugin makes, JAX_PLATFORMS=cuda), with
# REMORA_CALL_STATS=1 and the shim's warnings kept (what is not remoted is logged by name),
# then the checks (devices, jit, grad, conv, random, 100 training steps against the CPU).
# A table; exit 0 when every remoted mode passed what passed natively (77 without GPU or JAX).
set -u
b=$(cd "${1:?usage: jax.sh BUNDLE_OR_BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || { echo "SKIP: no NVIDIA GPU"; exit 77; }
python3 -c 'import jax' 2>/dev/null || { echo "SKIP: no JAX"; exit 77; }
work=$(mktemp -d)
fails=0
for mode in native shm tcp; do
  for what in census check; do
    log=$work/$mode.$what.log
    arg=$([ $what = census ] && echo census)
    if [ $mode = native ]; then
      timeout 500 python3 "$here/jax_check.py" $arg >"$log" 2>&1
    else
      REMORA_CALL_STATS=1 REMORA_ASSERT_NO_LOCAL_GPU=1 timeout 500 \
        "$b/bin/remora-run" --transport $mode --backend cuda -- python3 "$here/jax_check.py" $arg >"$log" 2>&1
    fi
    rc=$?
    line=$(grep -E '^(PASS|FAIL) jax_(check|census)' "$log" | tail -1)
    [ -z "$line" ] && line="FAIL jax_$what: exit $rc: $(tail -1 "$log")"
    printf '%-7s %-7s %s\n' $mode $what "$line"
    grep -E '^(PASS|FAIL) ' "$log" | grep -v '^PASS jax_' | sed 's/^/    /'
    if [ $mode != native ]; then
      # What the shim logged as not remoted, once each.
      grep -iE 'not (supported|remoted)|unsupported|NOT_SUPPORTED' "$log" | sort -u | head -20 | sed 's/^/    shim: /'
    fi
    if [ $rc -ne 0 ]; then
      [ $mode = native ] || fails=$((fails + 1))
      grep -E '^census: .*FAILED|Error|error' "$log" | head -10 | sed 's/^/    | /'
    fi
  done
done
[ -n "${OUT:-}" ] && cp -r "$work" "$OUT/jax-logs"
exit $((fails > 0))

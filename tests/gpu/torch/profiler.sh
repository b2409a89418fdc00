#!/usr/bin/env bash
# profiler.sh BUNDLE_OR_BUILD_DIR: torch.profiler with CUDA activities listing the kernels of a
# matmul (profiler_check.py), natively and through Remora (remora-run over shm and tcp, the
# client touching no local GPU). A table; exit 0 when every mode passed (77 without a GPU or
# PyTorch).
set -u
b=$(cd "${1:?usage: profiler.sh BUNDLE_OR_BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || { echo "SKIP: no NVIDIA GPU"; exit 77; }
python3 -c 'import torch' 2>/dev/null || { echo "SKIP: no PyTorch"; exit 77; }
work=$(mktemp -d)
fails=0
for mode in native shm tcp; do
  if [ $mode = native ]; then
    timeout 300 python3 "$here/profiler_check.py" >"$work/$mode.log" 2>&1
  else
    REMORA_ASSERT_NO_LOCAL_GPU=1 timeout 300 "$b/bin/remora-run" --transport $mode --backend cuda -- \
      python3 "$here/profiler_check.py" >"$work/$mode.log" 2>&1
  fi
  rc=$?
  line=$(grep -E '^(PASS|FAIL|SKIP) profiler_check' "$work/$mode.log" | tail -1)
  [ -z "$line" ] && line="FAIL profiler_check: exit $rc: $(tail -1 "$work/$mode.log")"
  [ $rc -eq 0 ] || fails=$((fails + 1))
  printf '%-7s %s\n' "$mode" "$line"
  [ $rc -eq 0 ] || tail -15 "$work/$mode.log" | sed 's/^/    | /'
done
[ -n "${OUT:-}" ] && cp -r "$work" "$OUT/profiler-logs"
exit $((fails > 0))

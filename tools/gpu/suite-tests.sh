#!/usr/bin/env bash
# suite-tests.sh TESTS_DIR REMORA_BUNDLE_OR_BUILD [pytest paths...]: a framework's own pytest
# suite (CuPy's tests/, PyTorch's test/, JAX's tests/: brought in from its public repository
# at the installed version's tag, never copied into this project) natively and through Remora
# in one run, compared test by test (issue 42: "measure against what we did not write").
#
# Each mode runs `pytest -q -n $JOBS` (pytest-xdist; each worker process is its own Remora
# session) from TESTS_DIR, stopped with SIGINT after $LIMIT seconds (pytest then writes what
# ran), with `--junitxml`; remoted modes through `remora-run --transport T --backend cuda`
# with REMORA_ASSERT_NO_LOCAL_GPU=1. Then tools/gpu/suite_compare.py prints each mode's counts
# and, on the tests every mode ran, the ones whose outcome differs from native's.
#
# Environment: MODES (default "native shm tcp"), JOBS (16), LIMIT (seconds per mode, 170),
# OUT (where logs and junit files go; default ./suite-out).
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
tests=$1 remora=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
run=$remora/bin/remora-run
out=${OUT:-$PWD/suite-out}; mkdir -p "$out"
files=()
for m in ${MODES:-native shm tcp}; do
  pre=(); envs=()
  if [ "$m" != native ]; then pre=("$run" --transport "$m" --backend cuda --); envs=(REMORA_ASSERT_NO_LOCAL_GPU=1); fi
  t0=$(date +%s)
  (cd "$tests" && env "${envs[@]}" "${pre[@]}" timeout -s INT -k 20 "${LIMIT:-170}" python3 -m pytest -q -rfE -p no:cacheprovider \
      -n "${JOBS:-16}" "$@" --junitxml="$out/$m.xml" > "$out/$m.log" 2>&1)
  echo "$m: rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 "$out/$m.log")"
  files+=("$m=$out/$m.xml")
done
python3 "$here/suite_compare.py" "${files[@]}"

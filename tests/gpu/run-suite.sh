#!/bin/bash
# run-suite.sh BUILD_DIR [--static] [--modes "native shm tcp"] [--timeout SECONDS] [PROGRAM...]
#
# Runs every GPU test program (BUILD_DIR/bin/gpu_<name>) in each mode through
# run-gpu-test.sh and prints a table program x mode: PASS/FAIL/SKIP with the wall time, and for
# shim modes the ratio to the native time. A cell is PASS only if the program exited 0 and
# printed its "PASS <name>:" line. Logs: BUILD_DIR/gpu-suite-logs/<name>.<mode>.log.
# --static: the same programs linked with nvcc's default static CUDA runtime
# (BUILD_DIR/bin/gpu_static_<name>, issue 15; logs <name>.static.<mode>.log).
# Exit status: 1 if any cell FAILed, 77 if every cell was skipped (no GPU), else 0.
#
# Environment: REMORA_RUN (default BUILD_DIR/bin/remora-run) for the shm/tcp modes.
set -u

usage() {
  echo "usage: $0 BUILD_DIR [--static] [--modes \"native shm tcp\"] [--timeout SECONDS] [PROGRAM...]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
build=$(cd "$1" 2>/dev/null && pwd) || { echo "no such build dir: $1" >&2; exit 2; }
shift
modes="native shm tcp"
timeout_s=120
programs=()
variant=gpu_
logtag=
while [ $# -gt 0 ]; do
  case "$1" in
    --static) variant=gpu_static_; logtag=.static; shift ;;
    --modes) [ $# -ge 2 ] || usage; modes=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || usage; timeout_s=$2; shift 2 ;;
    -h|--help) usage ;;
    *) programs+=("$1"); shift ;;
  esac
done

here=$(cd "$(dirname "$0")" && pwd)
wrapper=$here/run-gpu-test.sh
export REMORA_RUN=${REMORA_RUN:-$build/bin/remora-run}

if [ ${#programs[@]} -eq 0 ]; then
  list=$build/tests/gpu/gpu-programs.txt
  if [ -f "$list" ]; then
    mapfile -t programs < <(grep -v '^\s*$' "$list")
  else
    for f in "$build"/bin/gpu_*; do [ -x "$f" ] && programs+=("$(basename "$f" | sed 's/^gpu_//')"); done
  fi
fi
[ ${#programs[@]} -gt 0 ] || { echo "no GPU test programs found under $build" >&2; exit 2; }

logs=$build/gpu-suite-logs
mkdir -p "$logs"

now_ns() { date +%s%N; }

declare -A status secs
fails=0
passes=0
skips=0
failures=()

for prog in "${programs[@]}"; do
  exe=$build/bin/$variant$prog
  for mode in $modes; do
    log=$logs/$prog$logtag.$mode.log
    if [ ! -x "$exe" ]; then
      echo "FAIL $prog: $exe not built" >"$log"
      status[$prog.$mode]=FAIL
      secs[$prog.$mode]=0
      fails=$((fails + 1))
      failures+=("$prog/$mode: not built ($exe)")
      continue
    fi
    t0=$(now_ns)
    timeout -k 10 "$timeout_s" "$wrapper" "$mode" "$exe" >"$log" 2>&1
    rc=$?
    t1=$(now_ns)
    s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    secs[$prog.$mode]=$s
    if [ $rc -eq 0 ] && grep -q "^PASS $prog:" "$log"; then
      st=PASS
      passes=$((passes + 1))
    elif [ $rc -eq 77 ]; then
      st=SKIP
      skips=$((skips + 1))
    else
      st=FAIL
      fails=$((fails + 1))
      if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        why="timed out after ${timeout_s}s"
      elif [ $rc -eq 0 ]; then
        why="exit 0 without a PASS line"
      else
        if grep -qE '^(FAIL|SKIP)' "$log"; then
          why="exit $rc: $(grep -E '^(FAIL|SKIP)' "$log" | tail -n 1)"
        else
          why="exit $rc: $(tail -n 1 "$log")"
        fi
      fi
      failures+=("$prog/$mode: $why  [$log]")
    fi
    status[$prog.$mode]=$st
    printf '%-28s %-7s %-5s %6ss\n' "$prog" "$mode" "$st" "$s" >&2
  done
done

# Table.
echo
printf '%-28s' "program"
for mode in $modes; do printf ' | %-20s' "$mode"; done
echo
printf '%-28s' "----------------------------"
for mode in $modes; do printf ' | %-20s' "--------------------"; done
echo
for prog in "${programs[@]}"; do
  printf '%-28s' "$prog"
  for mode in $modes; do
    st=${status[$prog.$mode]}
    s=${secs[$prog.$mode]}
    cell="$st ${s}s"
    if [ "$mode" != native ] && [ "$st" = PASS ] && [ "${status[$prog.native]:-}" = PASS ]; then
      ratio=$(awk -v a="$s" -v b="${secs[$prog.native]}" 'BEGIN { if (b > 0) printf "%.2fx", a / b }')
      cell="$cell ($ratio)"
    fi
    printf ' | %-20s' "$cell"
  done
  echo
done
echo
echo "pass $passes, fail $fails, skip $skips  (logs: $logs)"
if [ $passes -eq 0 ] && [ $fails -eq 0 ]; then
  echo "NOTE: everything was skipped (no NVIDIA GPU on this machine?)"
fi
if [ $fails -gt 0 ]; then
  echo "failures:"
  for f in "${failures[@]}"; do echo "  $f"; done
  exit 1
fi
# Everything skipped (no GPU): 77, so CTest reports the run as skipped rather than passed.
[ $passes -eq 0 ] && exit 77
exit 0

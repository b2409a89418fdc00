#!/usr/bin/env bash
# Runs the libFuzzer targets of a -DREMORA_FUZZ=ON build and prints one table row per target:
# executions, executions per second, corpus size, crashes (docs/ROBUSTNESS.md).
#
#   tools/fuzz/run.sh [-b BUILD] [-t SECONDS | -n RUNS] [-j JOBS] [-w WORKDIR] [TARGET...]
#     -b  the fuzzing build (default build-asan)
#     -t  seconds per target (default 5); -n  executions per target instead
#     -j  targets run at the same time (default 1)
#     -w  where the grown corpora and crash artifacts go (default BUILD/fuzz-work); a
#         corpus kept there grows over runs, the committed seeds (tools/fuzz/corpus/) are
#         only read
#     TARGET  names without the fuzz_ prefix (default: every target the build has)
# Every run first replays the whole corpus, committed crash regressions included. Exit status
# 1 if any target found a crash, leak, timeout or out-of-memory (the input is saved as
# WORKDIR/artifacts/<target>-crash-...; reproduce with BUILD/bin/fuzz_<target> FILE).
# Long runs on a shared machine: nice -n 19 tools/fuzz/run.sh -n 10000000 -j 1 ...
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-asan
seconds=5
runs=""
jobs=1
work=""
while getopts "b:t:n:j:w:h" o; do
  case $o in
    b) build=$(cd "$OPTARG" && pwd) ;;
    t) seconds=$OPTARG ;;
    n) runs=$OPTARG ;;
    j) jobs=$OPTARG ;;
    w) work=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
work=${work:-$build/fuzz-work}
bin=$build/bin
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$bin"/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f" | sed 's/^fuzz_//')"); done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "run.sh: no fuzz targets in $bin (configure with -DREMORA_FUZZ=ON, see docs/ROBUSTNESS.md)" >&2
  exit 2
fi
mkdir -p "$work/artifacts" "$work/logs"

# Per-target limits: the largest input, and how long one input may take.
max_len() {
  case $1 in
    request|reply|frame_stream|shm_ring) echo 16384 ;;
    admin_rpc) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

run_one() {
  local t=$1 exe=$bin/fuzz_$1 log=$work/logs/$1.log
  mkdir -p "$work/corpus/$t"
  local seeds=$here/corpus/$t
  [ -d "$seeds" ] || seeds=""
  local limit=(-max_total_time="$seconds")
  [ -n "$runs" ] && limit=(-runs="$runs")
  # UBSan findings abort (the build makes them fatal); ASan's leak check runs after each input.
  ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$exe" "${limit[@]}" -max_len="$(max_len "$t")" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$t-" "$work/corpus/$t" $seeds >"$log" 2>&1
  echo $? >"$log.rc"
}

before=$(ls "$work/artifacts" | wc -l)
for t in "${targets[@]}"; do ls "$work/artifacts" | grep "^$t-" | sort >"$work/logs/$t.before"; done
start=$(date +%s)
running=0
for t in "${targets[@]}"; do
  if [ ! -x "$bin/fuzz_$t" ]; then echo "run.sh: no target fuzz_$t in $bin" >&2; exit 2; fi
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
elapsed=$(( $(date +%s) - start ))

status=0
printf '%-18s %14s %9s %8s %8s\n' target executions exec/s corpus crashes
for t in "${targets[@]}"; do
  log=$work/logs/$t.log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "$work/corpus/$t" -type f | wc -l)
  [ -d "$here/corpus/$t" ] && corpus=$((corpus + $(find "$here/corpus/$t" -type f | wc -l)))
  # libFuzzer stops at its first finding and saves the input: count what this run saved.
  crashes=$(comm -13 "$work/logs/$t.before" <(ls "$work/artifacts" | grep "^$t-" | sort) | grep -vc -- '-slow-unit-')
  rc=$(cat "$log.rc")
  if [ "$rc" != 0 ] && [ "$crashes" = 0 ]; then crashes=1; fi
  [ "$crashes" != 0 ] && status=1
  printf '%-18s %14s %9s %8s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$crashes"
  if [ "$crashes" != 0 ]; then
    echo "  $t: see $log; inputs in $work/artifacts/$t-*" >&2
    grep -m3 -E 'ERROR|FINDING|SUMMARY' "$log" | sed 's/^/    /' >&2
  fi
done
echo "($(( ${#targets[@]} )) targets, ${elapsed}s; artifacts: $(( $(ls "$work/artifacts" | wc -l) - before )) new in $work/artifacts)"
exit $status

#!/usr/bin/env bash
# Runs the libFuzzer targets of a -DREMORA_FUZZ=ON build and prints one table row per target:
# executions, executions per second, corpus size, crashes (docs/ROBUSTNESS.md).
#
#   tools/fuzz/run.sh [-b BUILD] [-t SECONDS] [-n RUNS] [-j JOBS] [-p WORKERS] [-w WORKDIR] [TARGET...]
#     -b  the fuzzing build (default build-asan)
#     -t  seconds per target (default 5); -n  executions per target instead (with -t too:
#         whichever comes first)
#     -j  targets run at the same time (default 1)
#     -p  processes per target (default 1), sharing its corpus (libFuzzer reloads what the
#         others add); -n is then split between them and the table sums their executions
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
seconds_given=""
runs=""
jobs=1
workers=1
work=""
while getopts "b:t:n:j:p:w:h" o; do
  case $o in
    b) build=$(cd "$OPTARG" && pwd) ;;
    t) seconds=$OPTARG seconds_given=1 ;;
    n) runs=$OPTARG ;;
    j) jobs=$OPTARG ;;
    p) workers=$OPTARG ;;
    w) work=$OPTARG ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
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

# One libFuzzer process of target $1: worker $2 of $workers, log $3.
fuzz_process() {
  local t=$1 log=$3 exe=$bin/fuzz_$1
  local seeds=$here/corpus/$t
  [ -d "$seeds" ] || seeds=""
  local limit=(-max_total_time="$seconds")
  if [ -n "$runs" ]; then
    limit=(-runs=$(( (runs + workers - 1) / workers )))
    [ -n "$seconds_given" ] && limit+=(-max_total_time="$seconds")
  fi
  # UBSan findings abort (the build makes them fatal); ASan's leak check runs after each input.
  # shellcheck disable=SC2086
  ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$exe" "${limit[@]}" -max_len="$(max_len "$t")" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$t-" "$work/corpus/$t" $seeds >"$log" 2>&1
  echo $? >"$log.rc"
}

# Runs target $1 ($workers processes); its logs are $work/logs/<target>.log[.<worker>].
run_one() {
  local t=$1 log=$work/logs/$1.log
  mkdir -p "$work/corpus/$t"
  rm -f "$log" "$log".*
  if [ "$workers" -le 1 ]; then
    fuzz_process "$t" 0 "$log"
    return
  fi
  local i
  for ((i = 0; i < workers; i++)); do fuzz_process "$t" "$i" "$log.$i" & done
  wait
}

# Sums a final statistic of target $1 over its processes' logs.
stat_sum() {
  cat "$work/logs/$1.log" "$work/logs/$1".log.[0-9]* 2>/dev/null |
    sed -n "s/^stat::$2: *//p" | awk '{ s += $1; n++ } END { if (n) print s; else print "?" }'
}

# The worst exit status of target $1's processes.
target_rc() {
  cat "$work/logs/$1.log.rc" "$work/logs/$1".log.[0-9]*.rc 2>/dev/null | sort -n | tail -1
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
  [ "$workers" -gt 1 ] && log="$work/logs/$t.log.*"
  execs=$(stat_sum "$t" number_of_executed_units)
  rate=$(stat_sum "$t" average_exec_per_sec)
  corpus=$(find "$work/corpus/$t" -type f | wc -l)
  [ -d "$here/corpus/$t" ] && corpus=$((corpus + $(find "$here/corpus/$t" -type f | wc -l)))
  # libFuzzer stops at its first finding and saves the input: count what this run saved.
  crashes=$(comm -13 "$work/logs/$t.before" <(ls "$work/artifacts" | grep "^$t-" | sort) | grep -vc -- '-slow-unit-')
  rc=$(target_rc "$t")
  if [ "$rc" != 0 ] && [ "$crashes" = 0 ]; then crashes=1; fi
  [ "$crashes" != 0 ] && status=1
  printf '%-18s %14s %9s %8s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$crashes"
  if [ "$crashes" != 0 ]; then
    echo "  $t: see $log; inputs in $work/artifacts/$t-*" >&2
    # shellcheck disable=SC2086
    grep -h -m3 -E 'ERROR|FINDING|SUMMARY' $log | sed 's/^/    /' >&2
  fi
done
echo "($(( ${#targets[@]} )) targets, ${elapsed}s; artifacts: $(( $(ls "$work/artifacts" | wc -l) - before )) new in $work/artifacts)"
exit $status

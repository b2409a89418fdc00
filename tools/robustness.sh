#!/usr/bin/env bash
# The robustness stages of CI (docs/ROBUSTNESS.md), run by tools/test.sh after the normal
# build and tests, which they need (build/: its CUDA test programs, its shim for TSan):
#   asan    clang ASan+UBSan build of everything but the CUDA programs, with the libFuzzer
#           targets; the unit and integration tests under it; each fuzz target for a few
#           seconds (its corpus, committed regressions included, is replayed first)
#   tsan    clang TSan build; the unit and integration tests under it
#   chaos   a short chaos soak on the normal build
# A sanitizer report from any process a test starts (servers, workers, tools, applications
# loading the shim) fails its stage: the reports go to files (log_path) checked afterwards.
#
#   tools/robustness.sh [STAGE...]        default: asan tsan chaos
# Environment: REMORA_FUZZ_SECONDS (5 per target), REMORA_ASAN_OPT (-O0; -O1 for a tree that
# long fuzzing runs will use), REMORA_CHAOS_SECONDS (90),
# REMORA_CHAOS_SEED (random; printed).
# REMORA_DEADLINE_EPOCH (unix time; tools/test.sh sets it from CI's 45-minute budget): a stage
# that would need more than is left before it (its usual cost on a 2-core machine, below) is
# skipped with the reason printed, so that the whole run stays inside the budget; skipping is
# not a failure, and is said in the summary.
# REMORA_STAGE_TIMES (a file; tools/test.sh sets it): a line "stage: N s" per stage is appended.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
# The compiler cache's settings (tools/ccache-env.sh); tools/test.sh has already set them.
# shellcheck source=tools/ccache-env.sh
. tools/ccache-env.sh "$root"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(asan tsan chaos)
failed=()
summary=()
details=()  # lines a stage adds under its own line in the summary

now() { date +%s; }

# Configures and builds a sanitizer build: DIR SANITIZERS OPT [extra cmake args]; OPT is the
# optimisation level of everything but the generated code (-O0 always) and the code tests run
# millions of times (-O1 always; tools/sanitizers.cmake).
san_build() {
  local dir=$1 san=$2 opt=$3
  shift 3
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=$opt -g1" \
    "-DCMAKE_C_FLAGS_DEBUG=$opt -g1" -DREMORA_WERROR=ON -DREMORA_BUILD_CUDA_PROGRAMS=OFF -DREMORA_SANITIZE="$san" \
    -DREMORA_TEST_APPS_DIR="$root/build/bin" "$@" >/dev/null && cmake --build "$dir" -j2
}

# Runs the unit and integration tests of DIR with reports going to LOGDIR; fails on a failed
# test or on any report.
san_tests() {
  local dir=$1 logs=$2
  shift 2
  rm -rf "$logs" && mkdir -p "$logs"
  local rc=0
  ctest --test-dir "$dir" --output-on-failure -j2 -L 'unit|integration' "$@" || rc=1
  # LeakSanitizer's notes about a thread still running or ending while it checks at exit are
  # not reports ("was not suspended": it could not stop the thread; "Unable to get registers":
  # the thread ended between being stopped and being read - LSan then treats its whole stack
  # as reachable or skips it, and any leak is still reported on its own): a file with nothing
  # else is dropped.
  for f in "$logs"/*; do
    [ -f "$f" ] && ! grep -qvE 'was not suspended\. False leaks are possible|^==[0-9]+==Unable to get registers from thread [0-9]+\.$' "$f" && rm -f "$f"
  done
  if [ -n "$(ls -A "$logs")" ]; then
    echo "sanitizer reports (in $logs):"
    for f in "$logs"/*; do echo "--- $f"; head -40 "$f"; done
    rc=1
  fi
  return $rc
}

# What each stage usually costs on the 2-core CI machine, build from scratch included
# (docs/ROBUSTNESS.md, "CI cost"), with a margin.
stage_cost() {
  case $1 in
    # measured cold on idle 2-core VMs (2026-11-29, at -O0): 636 s (492 s build, 107 s tests,
    # 37 s fuzzing) alone, 699 s as the last stage of a clean clone's .ci/run. The budget's
    # 2,640 s leaves 60 s to CI's 45 minutes, so a stage started with 720 s left ends inside them.
    asan) echo 720 ;;
    tsan) echo 900 ;;
    chaos) echo $(( ${REMORA_CHAOS_SECONDS:-90} + 60 )) ;;
    *) echo 0 ;;
  esac
}

run_stage() {
  local name=$1
  local t0
  t0=$(now)
  if [ -n "${REMORA_DEADLINE_EPOCH:-}" ]; then
    local left=$(( REMORA_DEADLINE_EPOCH - t0 )) need
    need=$(stage_cost "$name")
    if [ "$left" -lt "$need" ]; then
      echo "==== robustness stage: $name SKIPPED: $left s of the time budget left, it needs about $need s"
      summary+=("$name: SKIPPED ($left s of the budget left, needs about $need s)")
      if [ -n "${REMORA_STAGE_TIMES:-}" ]; then
        printf '%-18s SKIPPED (%d s left of the budget)\n' "$name" "$left" >>"$REMORA_STAGE_TIMES"
      fi
      return
    fi
  fi
  echo "==== robustness stage: $name"
  details=()
  built=""
  local outcome=passed
  "stage_$name" || outcome=FAILED
  local took=$(( $(now) - t0 ))
  summary+=("$name: $outcome in $took s${built:+ (built in $built s)}")
  [ $outcome = passed ] || failed+=("$name")
  summary+=("${details[@]}")
  if [ -n "${REMORA_STAGE_TIMES:-}" ]; then
    printf '%-18s %5d s%s\n' "$name" "$took" "${built:+ (build $built s)}$([ $outcome = passed ] || echo ' FAILED')" >>"$REMORA_STAGE_TIMES"
  fi
}

stage_asan() {
  local t0 rc=0
  t0=$(now)
  # -O0 (REMORA_ASAN_OPT): the tree builds in two thirds of -O1's time (492 s against 727
  # cold) and its tests run as fast (107 s against 112: what dominates them is waiting); long
  # fuzzing runs want -O1 (docs/ROBUSTNESS.md).
  san_build build-asan address,undefined "${REMORA_ASAN_OPT:--O0}" -DREMORA_FUZZ=ON || return 1
  built=$(( $(now) - t0 ))
  echo "asan: built in $built s"
  # Every unit and integration test: remora-run, the process harness and local_gpu_check put
  # the ASan runtime ahead of the shim in LD_PRELOAD (REMORA_SANITIZER_PRELOAD).
  ASAN_OPTIONS=log_path=$root/build-asan/reports/asan:detect_leaks=1 \
  UBSAN_OPTIONS=log_path=$root/build-asan/reports/ubsan:print_stacktrace=1 \
    san_tests build-asan "$root/build-asan/reports" || rc=1
  # REMORA_FUZZ_RUNS=0: replay the corpora (committed regressions included) without fuzzing.
  local limit=(-t "${REMORA_FUZZ_SECONDS:-5}")
  [ -n "${REMORA_FUZZ_RUNS:-}" ] && limit=(-n "$REMORA_FUZZ_RUNS")
  # Two targets at a time: CI's two cores (one at a time left one idle for a minute).
  tools/fuzz/run.sh -b build-asan "${limit[@]}" -j 2 -w build-asan/fuzz-ci || rc=1
  return $rc
}

stage_tsan() {
  local t0
  t0=$(now)
  san_build build-tsan thread -O1 || return 1
  built=$(( $(now) - t0 ))
  echo "tsan: built in $built s"
  # die_after_fork=0: a test that forks a multi-threaded process whose child starts threads
  # (transport_peer_loss_test's shm requester) is otherwise killed by TSan itself.
  # integration.local_gpu_check is left out: its fake driver library is built instrumented
  # and loaded into an application that is not (undefined __tsan_init; a TSan runtime cannot
  # be preloaded).
  TSAN_OPTIONS="log_path=$root/build-tsan/reports/tsan die_after_fork=0 second_deadlock_stack=1" \
    san_tests build-tsan "$root/build-tsan/reports" -E 'integration.local_gpu_check'
}

stage_chaos() {
  local seed=${REMORA_CHAOS_SEED:-$RANDOM} out rc=0
  out=$(mktemp)
  python3 tools/chaos/chaos.py --build build --duration "${REMORA_CHAOS_SECONDS:-90}" --clients 6 \
    --checkpoint 30 --seed "$seed" | tee "$out" || rc=1
  # The summary comes last in CI's log, which keeps only its tail: a failed soak's failures
  # (printed by chaos.py after "failures (seed N):") go into it too.
  if [ $rc -ne 0 ]; then
    while IFS= read -r line; do details+=("    | $line"); done < <(sed -n '/^failures (seed/,/^chaos soak/p' "$out" | head -40)
  fi
  rm -f "$out"
  return $rc
}

for s in "${stages[@]}"; do
  if ! declare -F "stage_$s" >/dev/null; then echo "robustness.sh: unknown stage $s" >&2; exit 2; fi
  run_stage "$s"
done
echo "==== robustness summary"
printf '  %s\n' "${summary[@]}"
[ ${#failed[@]} -eq 0 ]

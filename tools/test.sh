#!/usr/bin/env bash
# The second README command (and CI's): installs what Remora needs, builds everything with
# warnings as errors and runs the whole test suite. Tests labelled gpu are skipped, with the
# reason printed, on machines without an NVIDIA GPU; extra arguments go to ctest (e.g. -L unit).
# Then it runs the robustness stages (tools/robustness.sh, docs/ROBUSTNESS.md), in this order:
# a short chaos soak, the unit and integration tests under TSan, and under ASan+UBSan with
# every fuzz target's corpus replayed and 5 s of fuzzing each. A stage that would not end
# before REMORA_TEST_BUDGET_S (from this script's start; 85 minutes, CI's hard limit being 90)
# is skipped with the reason printed: on a 2-core machine every stage fits (about 40 minutes
# cold, 20 with a warm compiler cache; docs/ROBUSTNESS.md, "CI cost"). REMORA_ROBUSTNESS=0
# skips them all; extra arguments (a ctest selection) too. Every stage's time is printed at
# the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
t_begin=$(date +%s)
times=()  # "stage: N s", printed at the end
lap() { local now; now=$(date +%s); times+=("$(printf '%-18s %5d s' "$1" $(( now - t_lap )))"); t_lap=$now; }
t_lap=$t_begin
bash tools/install-deps.sh
lap install
# The compiler cache (ccache, when installed): shared by clones at any path (tools/ccache-env.sh).
# shellcheck source=tools/ccache-env.sh
. tools/ccache-env.sh "$root"
mkdir -p build && : >"$CCACHE_STATSLOG"
has_gpu() { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; }
# Without a GPU only the GPU suite's programs that the host-emulated tests run are built (the
# rest could only be skipped); REMORA_GPU_SUITE=ON builds them all anyway (for a GPU bundle).
gpu_suite=${REMORA_GPU_SUITE:-$(has_gpu && echo ON || echo OFF)}
# Line tables only (-g1): backtraces keep their files and lines, and the build is about a
# fifth faster than with full debug information.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMORA_WERROR=ON -DREMORA_BUILD_CUDA_PROGRAMS=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DREMORA_GPU_SUITE="$gpu_suite" >/dev/null
cmake --build build -j2
lap "configure+build"
rc=0
ctest --test-dir build --output-on-failure -j2 "$@" || rc=$?
lap tests
if ! has_gpu; then
  echo "note: the tests labelled 'gpu' were skipped: no NVIDIA GPU on this machine (run tests/gpu/run-suite.sh build on a GPU host)"
fi
if [ "$gpu_suite" != ON ]; then
  echo "note: the GPU suite's programs that only a GPU runs were not built (REMORA_GPU_SUITE=$gpu_suite; REMORA_GPU_SUITE=ON builds them, as tools/gpu/make-bundle.sh needs)"
fi
if [ "${REMORA_ROBUSTNESS:-1}" = 0 ] || [ $# -gt 0 ]; then
  echo "note: the robustness stages (sanitizers, fuzzing, chaos) were not run: tools/robustness.sh runs them"
else
  # REMORA_ROBUSTNESS_STAGES picks the stages (docs/ROBUSTNESS.md, "CI cost"); each stage's
  # time comes back through REMORA_STAGE_TIMES.
  stage_file=$(mktemp)
  # shellcheck disable=SC2086
  REMORA_DEADLINE_EPOCH=$(( t_begin + ${REMORA_TEST_BUDGET_S:-5100} )) REMORA_CHAOS_SECONDS=${REMORA_CHAOS_SECONDS:-60} \
    REMORA_STAGE_TIMES=$stage_file bash tools/robustness.sh ${REMORA_ROBUSTNESS_STAGES:-chaos tsan asan} || rc=1
  while IFS= read -r line; do times+=("$line"); done <"$stage_file"
  rm -f "$stage_file"
  t_lap=$(date +%s)
fi
echo "==== test.sh: stage times"
printf '  %s\n' "${times[@]}"
printf '  %-18s %5d s\n' "in all" $(( $(date +%s) - t_begin ))
if command -v ccache >/dev/null 2>&1 && [ -s "$CCACHE_STATSLOG" ]; then
  echo "  compiler cache (this run): $(ccache --show-log-stats 2>/dev/null | grep -E '^ *(Hits|Misses):' | tr -s ' ' | paste -sd';' -)"
fi
exit $rc

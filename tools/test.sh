#!/usr/bin/env bash
# The second README command (and CI's): installs what Remora needs, builds everything with
# warnings as errors and runs the whole test suite. Tests labelled gpu are skipped, with the
# reason printed, on machines without an NVIDIA GPU; extra arguments go to ctest (e.g. -L unit).
# Then it runs the robustness stages (tools/robustness.sh, docs/ROBUSTNESS.md), in this order:
# a short chaos soak, the unit and integration tests under TSan, and under ASan+UBSan with
# every fuzz target's corpus replayed and 5 s of fuzzing each - each only if what is left of
# CI's 45 minutes (REMORA_TEST_BUDGET_S, from this script's start) covers its usual cost; a
# stage skipped for time says so. REMORA_ROBUSTNESS=0 skips them all; extra arguments (a ctest selection) too.
set -euo pipefail
cd "$(dirname "$0")/.."
t_begin=$(date +%s)
bash tools/install-deps.sh
start=$(date +%s)
has_gpu() { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; }
# Without a GPU only the GPU suite's programs that the host-emulated tests run are built (the
# rest could only be skipped); REMORA_GPU_SUITE=ON builds them all anyway (for a GPU bundle).
gpu_suite=${REMORA_GPU_SUITE:-$(has_gpu && echo ON || echo OFF)}
# Line tables only (-g1): backtraces keep their files and lines, and the build is about a
# fifth faster than with full debug information, which CI's 45 minutes need.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMORA_WERROR=ON -DREMORA_BUILD_CUDA_PROGRAMS=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DREMORA_GPU_SUITE="$gpu_suite" >/dev/null
cmake --build build -j2
rc=0
ctest --test-dir build --output-on-failure -j2 "$@" || rc=$?
if ! has_gpu; then
  echo "note: the tests labelled 'gpu' were skipped: no NVIDIA GPU on this machine (run tests/gpu/run-suite.sh build on a GPU host)"
fi
if [ "$gpu_suite" != ON ]; then
  echo "note: the GPU suite's programs that only a GPU runs were not built (REMORA_GPU_SUITE=$gpu_suite; REMORA_GPU_SUITE=ON builds them, as tools/gpu/make-bundle.sh needs)"
fi
echo "build and tests: $(( $(date +%s) - start )) s"
if [ "${REMORA_ROBUSTNESS:-1}" = 0 ] || [ $# -gt 0 ]; then
  echo "note: the robustness stages (sanitizers, fuzzing, chaos) were not run: tools/robustness.sh runs them"
else
  # REMORA_ROBUSTNESS_STAGES picks the stages (docs/ROBUSTNESS.md, "CI cost").
  # shellcheck disable=SC2086
  REMORA_DEADLINE_EPOCH=$(( t_begin + ${REMORA_TEST_BUDGET_S:-2640} )) REMORA_CHAOS_SECONDS=${REMORA_CHAOS_SECONDS:-60} \
    bash tools/robustness.sh ${REMORA_ROBUSTNESS_STAGES:-chaos tsan asan} || rc=1
fi
echo "test.sh: $(( $(date +%s) - t_begin )) s in all"
exit $rc

#!/usr/bin/env bash
# The second README command (and CI's): installs what Remora needs, builds everything with
# warnings as errors and runs the whole test suite, then the robustness stages
# (tools/robustness.sh, docs/ROBUSTNESS.md): the unit and integration tests under ASan+UBSan
# and under TSan, every fuzz target for a few seconds, and a short chaos soak. Tests labelled
# gpu are skipped, with the reason printed, on machines without an NVIDIA GPU; extra arguments
# go to ctest (e.g. -L unit) and then skip the robustness stages, as REMORA_SKIP_ROBUSTNESS=1
# does (the fast local path).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
start=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMORA_WERROR=ON -DREMORA_BUILD_CUDA_PROGRAMS=ON >/dev/null
cmake --build build -j2
rc=0
ctest --test-dir build --output-on-failure -j2 "$@" || rc=$?
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; }; then
  echo "note: the tests labelled 'gpu' were skipped: no NVIDIA GPU on this machine (run tests/gpu/run-suite.sh build on a GPU host)"
fi
echo "build and tests: $(( $(date +%s) - start )) s"
if [ "${REMORA_SKIP_ROBUSTNESS:-0}" = 1 ] || [ $# -gt 0 ]; then
  echo "note: the robustness stages were skipped (REMORA_SKIP_ROBUSTNESS=1 or a ctest filter); tools/robustness.sh runs them"
else
  # REMORA_ROBUSTNESS_STAGES picks the stages (default: asan tsan chaos; docs/ROBUSTNESS.md, CI cost).
  # shellcheck disable=SC2086
  bash tools/robustness.sh ${REMORA_ROBUSTNESS_STAGES:-} || rc=1
fi
exit $rc

#!/usr/bin/env bash
# The second README command (and CI's): installs what Remora needs, builds everything with
# warnings as errors and runs the whole test suite. Tests labelled gpu are skipped, with the
# reason printed, on machines without an NVIDIA GPU; extra arguments go to ctest (e.g. -L unit).
# With REMORA_ROBUSTNESS=1 it then runs the robustness stages (tools/robustness.sh,
# docs/ROBUSTNESS.md): the unit and integration tests under ASan+UBSan and under TSan, every
# fuzz target for a few seconds, and a short chaos soak. They are not on by default: they
# add 14-29 minutes to a CI run that already takes about 43 of its 45 (docs/ROBUSTNESS.md,
# "CI cost").
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
start=$(date +%s)
has_gpu() { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; }
# Without a GPU only the GPU suite's programs that the host-emulated tests run are built (the
# rest could only be skipped); REMORA_GPU_SUITE=ON builds them all anyway (for a GPU bundle).
gpu_suite=${REMORA_GPU_SUITE:-$(has_gpu && echo ON || echo OFF)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMORA_WERROR=ON -DREMORA_BUILD_CUDA_PROGRAMS=ON \
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
if [ "${REMORA_ROBUSTNESS:-0}" != 1 ] || [ $# -gt 0 ]; then
  echo "note: the robustness stages (sanitizers, fuzzing, chaos) were not run: REMORA_ROBUSTNESS=1 runs them, or tools/robustness.sh"
else
  # REMORA_ROBUSTNESS_STAGES picks the stages (default: asan tsan chaos; docs/ROBUSTNESS.md, CI cost).
  # shellcheck disable=SC2086
  bash tools/robustness.sh ${REMORA_ROBUSTNESS_STAGES:-} || rc=1
fi
exit $rc

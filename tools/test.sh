#!/usr/bin/env bash
# The second README command (and CI's): installs what Remora needs, builds everything with
# warnings as errors and runs the whole test suite. Tests labelled gpu are skipped, with the
# reason printed, on machines without an NVIDIA GPU; extra arguments go to ctest
# (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMORA_WERROR=ON -DREMORA_BUILD_CUDA_PROGRAMS=ON >/dev/null
cmake --build build -j2
rc=0
ctest --test-dir build --output-on-failure -j2 "$@" || rc=$?
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; }; then
  echo "note: the tests labelled 'gpu' were skipped: no NVIDIA GPU on this machine (run tests/gpu/run-suite.sh build on a GPU host)"
fi
exit $rc

#!/usr/bin/env bash
# profiler_test.sh REMORA_RUN APP: CUPTI's activity API through Remora's libcupti.so.13 (issue
# 43): tests/apps/profiler.cu, linked against NVIDIA's CUPTI, run by remora-run against a
# host-emulated server over shared memory and over tcp. The host backend synthesizes its
# records (a kernel at its launch, copies and memsets as its streams run them); the path from
# the worker's records to the application's buffers is the one a GPU server's CUPTI takes.
set -euo pipefail
run=$1 app=$2
for transport in shm tcp; do
  out=$("$run" --backend host --transport "$transport" -- "$app" 2>&1) || { echo "$out"; echo "FAIL profiler_test over $transport"; exit 1; }
  echo "$out" | tail -3
  echo "$out" | grep -q "^PASS profiler:" || { echo "FAIL profiler_test over $transport: no PASS line"; exit 1; }
done
echo "PASS profiler_test: activity records over shm and tcp"

#!/usr/bin/env bash
# REMORA_ASSERT_NO_LOCAL_GPU: a remoted program that maps an NVIDIA driver library of its own
# fails (exit 98, "remora-shim: FAIL"); the same program without it passes. (The GPU test
# scripts rely on this check to prove a client never fell back to the local GPU.)
set -u
bin=$1
fake=$2  # a library named like one of NVIDIA's driver libraries
export REMORA_ASSERT_NO_LOCAL_GPU=1
out=$("$bin/remora-run" --backend host -- "$bin/app_device_info" 2>&1); rc=$?
[ $rc -eq 0 ] || { echo "FAIL: a clean run exited $rc"; echo "$out"; exit 1; }
# In an ASan build remora-run and the fake library are instrumented: the sanitizer's runtime
# (REMORA_SANITIZER_PRELOAD) must come first in LD_PRELOAD, as remora-run puts it for the shim.
out=$(LD_PRELOAD="${REMORA_SANITIZER_PRELOAD:+$REMORA_SANITIZER_PRELOAD:}$fake" "$bin/remora-run" --backend host -- "$bin/app_device_info" 2>&1); rc=$?
[ $rc -eq 98 ] || { echo "FAIL: a run that loaded a driver library exited $rc, expected 98"; echo "$out"; exit 1; }
echo "$out" | grep -q "remora-shim: FAIL: this process used the local GPU (loaded $fake)" ||
  { echo "FAIL: no clear message"; echo "$out"; exit 1; }
echo "PASS local_gpu_check"

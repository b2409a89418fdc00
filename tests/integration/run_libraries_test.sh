#!/usr/bin/env bash
# run_libraries_test.sh REMORA_RUN: remora-run preloads all of Remora's math libraries by
# default, only those --libraries names, and refuses a name it does not know.
set -euo pipefail
run=$1
fail() { echo "FAIL: $*"; exit 1; }
preloaded() { "$run" --backend host "$@" -- sh -c 'echo "$LD_PRELOAD"' | tr ':' '\n' | sed 's|.*/||' | sort | tr '\n' ' '; }
all=$(preloaded)
for l in libcublas.so.13 libcudnn.so.9 libcufft.so.12 libcusolver.so.12 libcusparse.so.12 libnccl.so.2; do
  [[ " $all " == *" $l "* ]] || fail "$l is not preloaded by default: $all"
done
some=$(preloaded --libraries cublas,cudnn)
[[ " $some " == *" libcublas.so.13 "* && " $some " == *" libcudnn.so.9 "* ]] || fail "--libraries cublas,cudnn: $some"
[[ " $some " != *" libcusolver.so.12 "* && " $some " != *" libcublasLt.so.13 "* ]] || fail "--libraries cublas,cudnn: $some"
if "$run" --backend host --libraries cublas,nope -- true 2>/dev/null; then fail "an unknown library name was accepted"; fi
echo "PASS run_libraries: default [$all], --libraries cublas,cudnn [$some]"

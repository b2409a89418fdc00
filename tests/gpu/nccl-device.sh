#!/usr/bin/env bash
# nccl-device.sh BUILD_DIR: NCCL 2.28's device API through Remora on one GPU (issue 44;
# docs/ARCHITECTURE.md "NCCL", "Device API"). bin/nccl_device_check (tests/gpu/nccl_device.cu):
# a one-rank communicator, ncclMemAlloc, ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC), the
# teams, ncclLsaBarrierCreateRequirement and ncclLLA2ACreateRequirement chained into
# ncclDevCommCreate, a kernel that syncs an LSA barrier and writes and reads back through
# ncclGetLsaPointer / ncclGetLocalPointer, checked, then ncclDevCommDestroy and cleanup.
#   1. natively (NVIDIA's libnccl.so.2 in the process)
#   2. remoted over shm and tcp: Remora's libnccl.so.2 preloaded as remora-run does,
#      REMORA_ASSERT_NO_LOCAL_GPU=1; every NCCL call runs in the server's NCCL and the kernel on
#      the server's GPU with the ncclDevComm and ncclWindow_t the server's NCCL made.
# NVIDIA's NCCL (native run and server): REMORA_NCCL_PATH, else PyTorch's wheel's, else the
# toolkit's. It must be NCCL 2.28.9, the release of the nccl.h Remora and the program were built
# with (the device structs' layout changes between releases).
# Prints PASS/FAIL per run and a table; exit 0 when every run passed, 77 without a GPU.
set -u
build=$(cd "${1:?usage: nccl-device.sh BUILD_DIR}" && pwd)
bin=$build/bin
lib=$build/lib
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"; exit 77
fi
prog=$bin/nccl_device_check
[ -x "$prog" ] || { echo "FAIL nccl-device: $prog is not built"; exit 1; }
[ -e "$lib/libnccl.so.2" ] || { echo "FAIL nccl-device: $lib/libnccl.so.2 (Remora's NCCL) is not built"; exit 1; }
if [ -z "${REMORA_NCCL_PATH:-}" ]; then
  REMORA_NCCL_PATH=$(python3 - 2>/dev/null <<'PY'
import glob, os, sys
try:
    import torch
    roots = [os.path.dirname(os.path.dirname(torch.__file__))] + sys.path
except Exception:
    roots = sys.path
for r in roots:
    for p in glob.glob(os.path.join(r, "nvidia", "**", "libnccl.so.2"), recursive=True):
        print(p)
        sys.exit(0)
PY
)
fi
if [ -z "${REMORA_NCCL_PATH:-}" ] || [ ! -e "$REMORA_NCCL_PATH" ]; then
  for p in /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2; do
    [ -e "$p" ] && REMORA_NCCL_PATH=$p && break
  done
fi
[ -n "${REMORA_NCCL_PATH:-}" ] || { echo "FAIL nccl-device: no NVIDIA libnccl.so.2 (set REMORA_NCCL_PATH)"; exit 1; }
export REMORA_NCCL_PATH
nccl_dir=$(dirname "$REMORA_NCCL_PATH")
echo "NVIDIA NCCL: $REMORA_NCCL_PATH"

. "$(dirname "$0")/gpu-server.sh"
start_gpu_server nccl-device --listen tcp://127.0.0.1:0 --nccl-env NCCL_NVLS_ENABLE=0
token=$(token_of nccldev)
[ -n "$token" ] || { echo "FAIL nccl-device: tenant creation"; exit 1; }

failures=0
declare -A result took
run() {  # run NAME COMMAND...
  local name=$1 start rc
  shift
  start=$(date +%s.%N)
  "$@" >"$work/$name.log" 2>&1
  rc=$?
  took[$name]=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
  if [ $rc -eq 0 ] && grep -q '^PASS nccl_device' "$work/$name.log"; then
    result[$name]=PASS
  else
    result[$name]="FAIL (exit $rc)"
    failures=$((failures + 1))
  fi
  echo "${result[$name]} $name"
  grep -E '^(PASS|FAIL) ' "$work/$name.log" | sed 's/^/    /'
  [ "${result[$name]}" = PASS ] || tail -20 "$work/$name.log" | sed 's/^/    | /'
}
run native env LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NVLS_ENABLE=0 "$prog"
for url in $(grep -E '^(shm|tcp)://' "$ready"); do
  t=${url%%://*}
  run "remoted-$t" env LD_PRELOAD="$lib/libremora.so $lib/libcuda.so.1 $lib/libnvidia-ml.so.1 $lib/libnccl.so.2" \
    LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" REMORA_SERVER="$url" REMORA_TOKEN="$token" \
    REMORA_ASSERT_NO_LOCAL_GPU=1 "$prog"
done
if grep -qiE 'nccl.*(warn|error)|device api' "$work/server.log"; then
  echo "server log (NCCL):"
  grep -iE 'nccl' "$work/server.log" | tail -8 | sed 's/^/    /'
fi
echo
printf '%-14s %-10s %s\n' run result seconds
for k in native remoted-shm remoted-tcp; do printf '%-14s %-10s %.1f\n' "$k" "${result[$k]:-missing}" "${took[$k]:-0}"; done
[ "$failures" -eq 0 ] && { echo "PASS nccl-device.sh"; exit 0; }
echo "FAIL nccl-device.sh: $failures run(s) failed"
exit 1

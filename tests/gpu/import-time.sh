#!/usr/bin/env bash
# import-time.sh BUILD_DIR [RUNS]: what a program with many fat binaries pays at start, natively
# and through Remora (issue 5: lazy, cached fat binaries). gpu_many_modules is built from 64
# translation units, one fat binary each; it uses kernels of 2 of them (or of all 64).
#
# For each case it prints the median wall time of the whole process over RUNS runs (default 5)
# and how many fat binaries the shim shipped to the server (debug log lines "shipping a ... fat
# binary"):
#   native                     - libcudart registers every fat binary with the driver
#   remora cold                - a fresh server (empty module cache): the used fat binaries ship
#   remora warm                - later runs against the same server: the cache (by content hash,
#                                in STATE_DIR/modules) has them, nothing ships
# All remote runs go over shm to one long-running remora-server --backend cuda.
# Without an NVIDIA GPU: SKIP line, exit 77. Exit 0 when every run passed and warm runs shipped
# nothing; 1 otherwise.
set -u
build=$(cd "${1:?usage: import-time.sh BUILD_DIR [RUNS]}" && pwd)
runs=${2:-5}
bin=$build/bin
shim=$build/lib/libremora.so
prog=$bin/gpu_many_modules

if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"
  exit 77
fi
[ -x "$prog" ] || { echo "FAIL import-time: $prog is missing"; exit 1; }

. "$(dirname "$0")/gpu-server.sh"
failures=0
# timed LOG CMD...: runs CMD, appends its output to LOG, prints its wall time in ms.
timed() {
  local log=$1
  shift
  local t0 t1 rc
  t0=$(date +%s%N)
  "$@" >>"$log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  if [ $rc -ne 0 ]; then
    echo "FAIL import-time: $* exited $rc" >&2
    sed 's/^/    /' "$log" | tail -20 >&2
    failures=$((failures + 1))
  fi
  echo $(((t1 - t0) / 1000000))
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : int((a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
shipped() { grep -c 'shipping a .* fat binary' "$1"; }
remote() { LD_PRELOAD=$shim REMORA_SERVER=$url REMORA_TOKEN=$token REMORA_LOG=debug "$@"; }

start_gpu_server import-time
url=$(grep '^shm://' "$ready")
token=$(token_of importer)
[ -n "$token" ] || { echo "FAIL import-time: tenant creation"; exit 1; }

printf '%-26s %6s %12s %10s\n' "gpu_many_modules (64 fatbins)" "used" "median ms" "shipped"
for used in 2 64; do
  times=""
  for _ in $(seq 1 "$runs"); do times+=" $(timed "$work/native-$used.log" "$prog" "$used")"; done
  printf '%-26s %6s %12s %10s\n' "native" "$used" "$(echo "$times" | median)" "-"

  cold=$(timed "$work/cold-$used.log" remote "$prog" "$used")
  printf '%-26s %6s %12s %10s\n' "remora shm, cold cache" "$used" "$cold" "$(shipped "$work/cold-$used.log")"

  times=""
  for _ in $(seq 1 "$runs"); do times+=" $(timed "$work/warm-$used.log" remote "$prog" "$used")"; done
  warm_shipped=$(shipped "$work/warm-$used.log")
  printf '%-26s %6s %12s %10s\n' "remora shm, warm cache" "$used" "$(echo "$times" | median)" "$warm_shipped"
  if [ "$warm_shipped" -ne 0 ]; then
    echo "FAIL import-time: warm runs shipped $warm_shipped fat binaries (the server's cache should have them)"
    failures=$((failures + 1))
  fi
done
echo "(wall time of the whole process: start, registration of 64 fat binaries, kernels of USED of them, checked result)"

# Where a whole-process wall time goes, for the tiled matmul app of remora-bench: start-up
# (exec, loader, static initialisation), main() to its PASS line, and exit (teardown).
matmul=$bin/gpu_matmul_tiled
if [ -x "$matmul" ]; then
  printf '\n%-26s %10s %10s %10s %10s\n' "gpu_matmul_tiled (ms)" "start-up" "main" "exit" "total"
  for mode in native remote; do
    s_up="" s_main="" s_exit="" s_tot=""
    for _ in $(seq 1 "$runs"); do
      t0=$(date +%s%N)
      if [ $mode = native ]; then
        GPU_TEST_TIMESTAMPS=1 "$matmul" >"$work/mm.log" 2>&1
      else
        GPU_TEST_TIMESTAMPS=1 remote "$matmul" >"$work/mm.log" 2>&1
      fi
      rc=$?
      t1=$(date +%s%N)
      line=$(grep '^timestamps:' "$work/mm.log")
      if [ $rc -ne 0 ] || [ -z "$line" ]; then
        echo "FAIL import-time: gpu_matmul_tiled ($mode) exited $rc"; tail -20 "$work/mm.log"
        failures=$((failures + 1)); continue
      fi
      init=$(echo "$line" | sed 's/.*init=\([0-9]*\).*/\1/')
      pass=$(echo "$line" | sed 's/.*pass=\([0-9]*\).*/\1/')
      s_up+=" $(((init - t0) / 1000000))"; s_main+=" $(((pass - init) / 1000000))"
      s_exit+=" $(((t1 - pass) / 1000000))"; s_tot+=" $(((t1 - t0) / 1000000))"
    done
    label=$([ $mode = native ] && echo native || echo "remora shm")
    printf '%-26s %10s %10s %10s %10s\n' "$label" "$(echo "$s_up" | median)" "$(echo "$s_main" | median)" \
      "$(echo "$s_exit" | median)" "$(echo "$s_tot" | median)"
  done
  echo "(medians of $runs runs; start-up = exec to static initialisation, exit = PASS line to the process's end)"
fi
[ $failures -eq 0 ] && echo "PASS import-time" && exit 0
echo "FAIL import-time: $failures failure(s)"
exit 1

#!/usr/bin/env bash
# libs-gpu.sh BUILD_DIR: cuSOLVER, cuSPARSE, cuRAND and cuFFT as PyTorch and CuPy use them,
# through Remora on a real GPU (CTest gpu.libs_python, issue 42). libs_check.py (torch.linalg,
# torch.sparse, CuPy linalg, cupyx.scipy.sparse, cupy.random, cupy.fft, each against the CPU)
# runs natively, then remoted over shm and tcp with REMORA_ASSERT_NO_LOCAL_GPU=1 (the client
# fails if it opened /dev/nvidia* or mapped an NVIDIA driver library), and the C programs of
# the math-library parameter roles, the solvers and cuFFT (gpu_math_roles, gpu_cusolver_solve,
# gpu_cusolver_host_outputs, gpu_cusparse_spmv, gpu_curand_generate, gpu_cufft_transform) the
# same three ways. Prints a PASS/FAIL table with
# every check's line; the remoted runs also list functions a library answered "not supported"
# for (Remora logs each once).
# Without a GPU: SKIP, exit 77. Exit 0 when every run passed.
set -u
build=$(cd "${1:?usage: libs-gpu.sh BUILD_DIR}" && pwd)
bin=$build/bin
here=$(cd "$(dirname "$0")" && pwd)
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"; exit 77
fi
work=$(mktemp -d /tmp/remora-libs-gpu.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
export CUPY_CACHE_DIR=$work/cupy-cache

failures=0
table=()
report() {  # report NAME RC LOG
  local verdict=PASS
  [ "$2" -eq 0 ] || [ "$2" -eq 77 ] || { verdict=FAIL; failures=$((failures + 1)); }
  [ "$2" -eq 77 ] && verdict=SKIP
  table+=("$(printf '%-4s %s' "$verdict" "$1")")
  echo "$verdict $1 (exit $2)"
  grep -E '^(PASS|FAIL|SKIP) ' "$3" | sed 's/^/    /'
  grep -hoE '[a-zA-Z0-9_]+ is not (supported|remoted)[^"]*|not supported: [a-zA-Z0-9_]+' "$3" | sort -u | sed 's/^/    ! /'
  [ "$verdict" != FAIL ] || tail -30 "$3" | sed 's/^/    | /'
}
run() {  # run NAME MODE CMD...: MODE native, shm or tcp
  local name=$1 mode=$2; shift 2
  if [ "$mode" = native ]; then
    "$@" >"$work/$name-$mode.log" 2>&1
  else
    REMORA_ASSERT_NO_LOCAL_GPU=1 "$bin/remora-run" --transport "$mode" --backend cuda -- "$@" >"$work/$name-$mode.log" 2>&1
  fi
  report "$name $mode" $? "$work/$name-$mode.log"
}
for mode in native shm tcp; do
  run libs_check "$mode" python3 "$here/libs_check.py"
  for p in math_roles cusolver_solve cusolver_host_outputs cusparse_spmv curand_generate cufft_transform; do
    [ -x "$bin/gpu_$p" ] && run "$p" "$mode" "$bin/gpu_$p"
  done
done
echo
echo "libs-gpu summary:"
printf '  %s\n' "${table[@]}"
echo "libs-gpu: $failures failure(s)"
[ $failures -eq 0 ]

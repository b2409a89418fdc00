#!/usr/bin/env bash
# cupy-gpu.sh BUILD_DIR: CuPy through Remora on a real GPU (CTest gpu.cupy, issue 15).
# CuPy 14 links the CUDA runtime statically: it reaches Remora only through libcuda.so.1 (the
# driver facade and the runtime's private tables); its cuBLAS, cuFFT, cuRAND... are NVIDIA's
# shared libraries, replaced by Remora's client libraries (preloaded by SONAME, as remora-run
# does). cupy_check.py (elementwise, reductions, matmul, an NVRTC RawKernel, fft, each against
# NumPy) runs natively, then remoted over shm and tcp with REMORA_ASSERT_NO_LOCAL_GPU=1 (the
# client fails if it opened /dev/nvidia* or mapped an NVIDIA driver library). The remoted runs
# also list any private table or slot the facade did not serve.
# Without a GPU or CuPy: SKIP, exit 77. Exit 0 when every check passed.
set -u
build=$(cd "${1:?usage: cupy-gpu.sh BUILD_DIR}" && pwd)
bin=$build/bin
here=$(cd "$(dirname "$0")" && pwd)
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"; exit 77
fi
python3 -c 'import cupy' 2>/dev/null || { echo "SKIP: no CuPy"; exit 77; }
work=$(mktemp -d /tmp/remora-cupy-gpu.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
export CUPY_CACHE_DIR=$work/cupy-cache  # RawKernel and ElementwiseKernel compile afresh

failures=0
report() {  # report NAME RC LOG
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi
  grep -E '^(cupy|PASS|FAIL) ' "$3" | sed 's/^/    /'
  grep -hE 'not a table Remora serves|not served by Remora|a real NVIDIA library is loaded' "$3" | sort -u | sed 's/^/    ! /'
  [ "$2" -eq 0 ] || tail -25 "$3" | sed 's/^/    | /'
}
python3 "$here/cupy_check.py" >"$work/native.log" 2>&1
report "cupy_check native" $? "$work/native.log"
for t in shm tcp; do
  # remora-run starts a private server (cuda backend) and preloads the runtime, the driver
  # facade, NVML and the client math libraries.
  REMORA_ASSERT_NO_LOCAL_GPU=1 "$bin/remora-run" --transport $t --backend cuda -- \
    python3 "$here/cupy_check.py" >"$work/remoted-$t.log" 2>&1
  report "cupy_check remoted over $t" $? "$work/remoted-$t.log"
done
echo "cupy-gpu: $failures failure(s)"
[ $failures -eq 0 ]

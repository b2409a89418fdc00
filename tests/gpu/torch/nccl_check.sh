#!/usr/bin/env bash
# nccl_check.sh BUILD_DIR: torch.distributed with the NCCL backend through Remora on one GPU
# (issue 44; docs/ARCHITECTURE.md "NCCL").
#   1. nccl_check.py natively (NCCL in the process).
#   2. nccl_check.py remoted over shm and tcp: Remora's libnccl.so.2 (and cuBLAS, cuBLASLt,
#      cuRAND, for the model) preloaded as remora-run does, REMORA_ASSERT_NO_LOCAL_GPU=1 (the
#      client fails if it touches the local GPU); every NCCL call runs in the server's NCCL.
# The server's workers use PyTorch's own libnccl.so.2 (REMORA_NCCL_PATH, found in its wheel
# unless set) and NCCL_NVLS_ENABLE=0 (--nccl-env: NVLink SHARP needs multicast objects the
# workers' sandbox and the one-GPU case do not use).
# Prints PASS/FAIL per run and a table; exit 0 when every run passed, 77 without a GPU or PyTorch.
set -u
build=$(cd "${1:?usage: nccl_check.sh BUILD_DIR}" && pwd)
bin=$build/bin
lib=$build/lib
here=$(cd "$(dirname "$0")" && pwd)
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"; exit 77
fi
python3 -c 'import torch, torch.distributed' 2>/dev/null || { echo "SKIP: no PyTorch"; exit 77; }
[ -e "$lib/libnccl.so.2" ] || { echo "FAIL nccl_check: $lib/libnccl.so.2 (Remora's NCCL) is not built"; exit 1; }

# NVIDIA's NCCL for the server: PyTorch's wheel's (the one it was built against).
if [ -z "${REMORA_NCCL_PATH:-}" ]; then
  REMORA_NCCL_PATH=$(python3 - <<'EOF'
import glob, os, sys
import torch
roots = [os.path.dirname(os.path.dirname(torch.__file__))] + sys.path
for r in roots:
    for p in glob.glob(os.path.join(r, "nvidia", "**", "libnccl.so.2"), recursive=True):
        print(p)
        sys.exit(0)
EOF
)
fi
if [ -z "$REMORA_NCCL_PATH" ] || [ ! -e "$REMORA_NCCL_PATH" ]; then
  for p in /usr/local/cuda/lib64/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2; do
    [ -e "$p" ] && REMORA_NCCL_PATH=$p && break
  done
fi
[ -n "${REMORA_NCCL_PATH:-}" ] || { echo "FAIL nccl_check: no NVIDIA libnccl.so.2 for the server (set REMORA_NCCL_PATH)"; exit 1; }
export REMORA_NCCL_PATH
echo "server NCCL: $REMORA_NCCL_PATH"
# cuDNN as torch-gpu.sh does (the model needs none, but PyTorch loads it).
if [ -z "${REMORA_LIBRARY_PATH:-}" ]; then
  cudnn_dir=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$cudnn_dir" ] && [ -e "$cudnn_dir/libcudnn.so.9" ] && export REMORA_LIBRARY_PATH=$cudnn_dir
fi

. "$here/../gpu-server.sh"
start_gpu_server nccl-gpu --listen tcp://127.0.0.1:0 --nccl-env NCCL_NVLS_ENABLE=0
shm_url=$(grep '^shm://' "$ready")
tcp_url=$(grep '^tcp://' "$ready")
token=$(token_of nccl)
[ -n "$token" ] || { echo "FAIL nccl_check: tenant creation"; exit 1; }
libs="$lib/libnccl.so.2 $lib/libcublas.so.13 $lib/libcublasLt.so.13 $lib/libcurand.so.10"
remoted() {  # remoted URL COMMAND...: remora-run's environment, with its client libraries
  local url=$1
  shift
  LD_PRELOAD="$lib/libremora.so $lib/libcuda.so.1 $lib/libnvidia-ml.so.1 $libs" LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    TRITON_LIBCUDA_PATH=$lib REMORA_SERVER=$url REMORA_TOKEN=$token REMORA_ASSERT_NO_LOCAL_GPU=1 "$@"
}

failures=0
declare -A took
report() {  # report NAME RC LOG SECONDS
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi
  grep -E '^(ok|SKIP|PASS|FAIL) ' "$3" | sed 's/^/    /'
  [ "$2" -eq 0 ] || tail -30 "$3" | sed 's/^/    | /'
  took[$1]=$4
}
start=$(date +%s.%N)
NCCL_NVLS_ENABLE=0 python3 "$here/nccl_check.py" >"$work/native.log" 2>&1
rc=$?
report native $rc "$work/native.log" "$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')"
for url in "$shm_url" "$tcp_url"; do
  t=${url%%://*}
  start=$(date +%s.%N)
  remoted "$url" python3 "$here/nccl_check.py" >"$work/remoted-$t.log" 2>&1
  rc=$?
  report "remoted-$t" $rc "$work/remoted-$t.log" "$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')"
done
if grep -q 'libnccl' "$work/server.log"; then
  echo "server log:"
  grep -E 'libnccl|NCCL' "$work/server.log" | head -5 | sed 's/^/    /'
fi
echo
printf '%-14s %s\n' run seconds
for k in native remoted-shm remoted-tcp; do printf '%-14s %.1f\n' "$k" "${took[$k]:-0}"; done
[ "$failures" -eq 0 ] && { echo "PASS nccl_check.sh"; exit 0; }
echo "FAIL nccl_check.sh: $failures run(s) failed"
exit 1

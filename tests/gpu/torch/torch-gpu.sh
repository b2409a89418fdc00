#!/usr/bin/env bash
# torch-gpu.sh BUNDLE_OR_BUILD_DIR: PyTorch through Remora on a real GPU (CTest gpu.torch).
#  1. torch_basics.py natively, then remoted over shm and tcp as a tenant limited to 8 GiB with
#     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (so its allocations go through the VMM
#     API and the quota refuses the excess with torch.OutOfMemoryError). Every remoted run has
#     REMORA_ASSERT_NO_LOCAL_GPU=1: the client fails if it opened /dev/nvidia* or mapped an
#     NVIDIA driver library, so a fall-back to the local GPU cannot pass.
#  2. matmul_train.py natively, remoted through the driver facade, and remoted with Remora's
#     client libraries (cuBLAS, cuBLASLt, cuRAND) preloaded, over shm and tcp.
#  3. cuda_graph.py: torch.cuda.graph capture and replay, natively and remoted.
#  The runs with NVIDIA's own math libraries in the client (through the facade only) are
#  left out unless TORCH_FACADE=1: those libraries ask the driver for private tables Remora
#  does not serve by design (it replaces the libraries whole, docs/COMPATIBILITY.md), so they
#  fail there with an error-level line naming the table.
#  3b. torch_ipc.py: torch.multiprocessing shares a CUDA tensor by IPC, natively and remoted;
#      again with expandable segments (shareable handles of cuMemCreate's memory).
#  4. torch_libs.py (conv2d, fft2, linalg, CNN training) natively, through the facade, and with
#     Remora's client libraries, cuDNN, cuFFT and cuSOLVER included, over shm and tcp.
#  5. torch_bench.py natively and remoted over shm and tcp; a table of us per op and ratios.
# Without a GPU or PyTorch: SKIP, exit 77. Exit 0 when every check passed.
set -u
build=$(cd "${1:?usage: torch-gpu.sh BUILD_DIR}" && pwd)
bin=$build/bin
lib=$build/lib
here=$(cd "$(dirname "$0")" && pwd)
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"; exit 77
fi
python3 -c 'import torch' 2>/dev/null || { echo "SKIP: no PyTorch"; exit 77; }
quota_mib=${QUOTA_MIB:-8192}

# The worker loads NVIDIA's real libraries: the toolkit's, except cuDNN, which is PyTorch's
# wheel's when it has one (REMORA_LIBRARY_PATH, inherited by the server's workers): PyTorch
# refuses a cuDNN other than the one it was built against (a toolkit's 9.14 under a PyTorch
# built for 9.19 failed at torch.backends.cudnn.version()).
if [ -z "${REMORA_LIBRARY_PATH:-}" ]; then
  cudnn_dir=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$cudnn_dir" ] && [ -e "$cudnn_dir/libcudnn.so.9" ] && export REMORA_LIBRARY_PATH=$cudnn_dir
fi
. "$here/../gpu-server.sh"
start_gpu_server torch-gpu --listen tcp://127.0.0.1:0
shm_url=$(grep '^shm://' "$ready")
tcp_url=$(grep '^tcp://' "$ready")
token=$(token_of torch --memory ${quota_mib}MiB)
[ -n "$token" ] || { echo "FAIL torch-gpu: tenant creation"; exit 1; }
remoted() {  # remoted URL COMMAND...: the documented environment for LD_PRELOAD users
  local url=$1
  shift
  LD_PRELOAD="$lib/libremora.so $lib/libcuda.so.1 $lib/libnvidia-ml.so.1${LD_PRELOAD_EXTRA:+ $LD_PRELOAD_EXTRA}" LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    TRITON_LIBCUDA_PATH=$lib REMORA_SERVER=$url REMORA_TOKEN=$token REMORA_ASSERT_NO_LOCAL_GPU=1 "$@"
}
export TORCHINDUCTOR_CACHE_DIR=$work/inductor TRITON_CACHE_DIR=$work/triton

failures=0
report() {  # report NAME RC LOG
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi
  grep -E '^(ok|PASS|FAIL) ' "$3" | sed 's/^/    /'
  [ "$2" -eq 0 ] || tail -25 "$3" | sed 's/^/    | /'
}
python3 "$here/torch_basics.py" >"$work/native.log" 2>&1
report "torch_basics native" $? "$work/native.log"
for url in "$shm_url" "$tcp_url"; do
  t=${url%%://*}
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True remoted "$url" python3 "$here/torch_basics.py" --quota-mib $quota_mib \
    >"$work/remoted-$t.log" 2>&1
  report "torch_basics remoted over $t (tenant of $quota_mib MiB, expandable segments)" $? "$work/remoted-$t.log"
done

# matmul_train.py: natively; remoted with NVIDIA's cuBLAS/cuBLASLt running on the client
# through the driver facade; and remoted with Remora's client libraries preloaded by SONAME
# (one call per library call, issue 13), as remora-run does.
libs="$lib/libcublas.so.13 $lib/libcublasLt.so.13 $lib/libcurand.so.10"
python3 "$here/matmul_train.py" >"$work/mm-native.log" 2>&1
report "matmul_train native" $? "$work/mm-native.log"
for url in "$shm_url" "$tcp_url"; do
  t=${url%%://*}
  if [ "${TORCH_FACADE:-0}" = 1 ]; then
    remoted "$url" python3 "$here/matmul_train.py" >"$work/mm-facade-$t.log" 2>&1
    report "matmul_train remoted over $t (NVIDIA's libraries through the driver facade)" $? "$work/mm-facade-$t.log"
  else
    echo "SKIP matmul_train over $t through the facade with NVIDIA's own libraries (TORCH_FACADE=1 runs it)"
  fi
  LD_PRELOAD_EXTRA=$libs remoted "$url" python3 "$here/matmul_train.py" >"$work/mm-libs-$t.log" 2>&1
  report "matmul_train remoted over $t (Remora's cuBLAS, cuBLASLt, cuRAND)" $? "$work/mm-libs-$t.log"
done

# torch.cuda.graph: capture and replay on the server's streams (the matmul through Remora's cuBLAS).
python3 "$here/cuda_graph.py" >"$work/graph-native.log" 2>&1
report "cuda_graph native" $? "$work/graph-native.log"
for url in "$shm_url" "$tcp_url"; do
  t=${url%%://*}
  LD_PRELOAD_EXTRA=$libs remoted "$url" python3 "$here/cuda_graph.py" >"$work/graph-$t.log" 2>&1
  report "cuda_graph remoted over $t (capture, 100 replays checked against eager)" $? "$work/graph-$t.log"
done

# torch.multiprocessing: a CUDA tensor shared with a spawned process by IPC handles (each
# process its own session of one tenant; the consumer inherits the environment).
python3 "$here/torch_ipc.py" >"$work/ipc-native.log" 2>&1
report "torch_ipc native" $? "$work/ipc-native.log"
for url in "$shm_url" "$tcp_url"; do
  t=${url%%://*}
  remoted "$url" python3 "$here/torch_ipc.py" >"$work/ipc-$t.log" 2>&1
  report "torch_ipc remoted over $t (tensor shared by cudaIpc handles)" $? "$work/ipc-$t.log"
done
# The same with expandable segments: the storage is physical memory of cuMemCreate, shared by
# POSIX descriptor (cuMemExportToShareableHandle; the consumer fetches the descriptor from the
# producer with pidfd_getfd and imports it).
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$here/torch_ipc.py" >"$work/ipc-es-native.log" 2>&1
report "torch_ipc native, expandable segments" $? "$work/ipc-es-native.log"
for url in "$shm_url" "$tcp_url"; do
  t=${url%%://*}
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True remoted "$url" python3 "$here/torch_ipc.py" >"$work/ipc-es-$t.log" 2>&1
  report "torch_ipc remoted over $t, expandable segments (tensor shared by shareable handle)" $? "$work/ipc-es-$t.log"
done

# torch_libs.py (conv2d forward and backward, fft2, linalg.solve/cholesky, a CNN's training
# steps): natively, through the driver facade, and with Remora's client libraries, cuDNN, cuFFT
# and cuSOLVER included, preloaded.
libs_dnn="$libs $lib/libcudnn.so.9 $lib/libcufft.so.12 $lib/libcusolver.so.12"
python3 "$here/torch_libs.py" >"$work/libs-native.log" 2>&1
report "torch_libs native" $? "$work/libs-native.log"
for url in "$shm_url" "$tcp_url"; do
  t=${url%%://*}
  if [ "${TORCH_FACADE:-0}" = 1 ]; then
    remoted "$url" python3 "$here/torch_libs.py" >"$work/libs-facade-$t.log" 2>&1
    report "torch_libs remoted over $t (NVIDIA's libraries through the driver facade)" $? "$work/libs-facade-$t.log"
  else
    echo "SKIP torch_libs over $t through the facade with NVIDIA's own libraries (TORCH_FACADE=1 runs it)"
  fi
  LD_PRELOAD_EXTRA=$libs_dnn remoted "$url" python3 "$here/torch_libs.py" >"$work/libs-libs-$t.log" 2>&1
  report "torch_libs remoted over $t (Remora's cuBLAS, cuBLASLt, cuRAND, cuDNN, cuFFT, cuSOLVER)" $? "$work/libs-libs-$t.log"
done

declare -A res
python3 "$here/torch_bench.py" >"$work/bench-native.log" 2>&1 && res[native]=$(tail -1 "$work/bench-native.log")
for url in "$shm_url" "$tcp_url"; do
  t=${url%%://*}
  remoted "$url" python3 "$here/torch_bench.py" >"$work/bench-$t.log" 2>&1 && res[$t]=$(tail -1 "$work/bench-$t.log") ||
    { echo "FAIL torch_bench over $t"; tail -15 "$work/bench-$t.log"; failures=$((failures + 1)); }
done
python3 - "${res[native]:-{\}}" "${res[shm]:-{\}}" "${res[tcp]:-{\}}" <<'PY'
import json, sys
n, s, t = (json.loads(a) for a in sys.argv[1:4])
print("%-18s %10s %10s %10s %8s %8s" % ("PyTorch per op", "native us", "shm us", "tcp us", "shm x", "tcp x"))
for k in ("small_op_us", "compiled_call_us", "item_us"):
    if k not in n: continue
    f = lambda d: "%10.2f" % d[k] if k in d else "%10s" % "-"
    r = lambda d: "%8.2f" % (d[k] / n[k]) if k in d else "%8s" % "-"
    print("%-18s %s %s %s %s %s" % (k[:-3], f(n), f(s), f(t), r(s), r(t)))
PY
echo "torch-gpu: $failures failure(s)"
[ $failures -eq 0 ]

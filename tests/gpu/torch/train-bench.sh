#!/usr/bin/env bash
# train-bench.sh BUNDLE_OR_BUILD_DIR: issue 13's figures in one session on one GPU - a 4096^3
# bf16 GEMM's TFLOP/s and a ResNet-18 training step's time (train_bench.py), natively and
# remoted over shm and tcp with Remora's math libraries preloaded (REMORA_ASSERT_NO_LOCAL_GPU=1:
# the remoted client touches no local GPU). Prints a table with ratios and the targets: GEMM >=
# 0.95x native over shm; step <= 1.15x native over shm and <= 1.5x over tcp. REMORA_CALL_STATS=1
# in the environment adds the remoted runs' per-call counts to their logs (KEEP=1 keeps them).
set -u
build=$(cd "${1:?usage: train-bench.sh BUILD_DIR}" && pwd)
bin=$build/bin
lib=$build/lib
here=$(cd "$(dirname "$0")" && pwd)
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine"; exit 77
fi
python3 -c 'import torch, torchvision' 2>/dev/null || { echo "SKIP: no PyTorch/torchvision"; exit 77; }
if [ -z "${REMORA_LIBRARY_PATH:-}" ]; then  # PyTorch's own cuDNN (torch-gpu.sh says why)
  cudnn_dir=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$cudnn_dir" ] && [ -e "$cudnn_dir/libcudnn.so.9" ] && export REMORA_LIBRARY_PATH=$cudnn_dir
fi
. "$here/../gpu-server.sh"
start_gpu_server train-bench --listen tcp://127.0.0.1:0
token=$(token_of bench --memory 40GiB)
[ -n "$token" ] || { echo "FAIL train-bench: tenant creation"; exit 1; }
libs="$lib/libcublas.so.13 $lib/libcublasLt.so.13 $lib/libcurand.so.10 $lib/libcudnn.so.9 $lib/libcufft.so.12 $lib/libcusolver.so.12"
declare -A res
python3 "$here/train_bench.py" >"$work/native.log" 2>&1 && res[native]=$(tail -1 "$work/native.log") ||
  { echo "FAIL train_bench native"; tail -15 "$work/native.log"; exit 1; }
failures=0
for url in $(grep -E '^(shm|tcp)://' "$ready"); do
  t=${url%%://*}
  LD_PRELOAD="$lib/libremora.so $lib/libcuda.so.1 $lib/libnvidia-ml.so.1 $libs" LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    TRITON_LIBCUDA_PATH=$lib REMORA_SERVER=$url REMORA_TOKEN=$token REMORA_ASSERT_NO_LOCAL_GPU=1 \
    python3 "$here/train_bench.py" >"$work/$t.log" 2>&1 && res[$t]=$(grep '^{' "$work/$t.log" | tail -1) ||
    { echo "FAIL train_bench over $t"; tail -15 "$work/$t.log"; failures=$((failures + 1)); }
  [ -n "${KEEP:-}" ] && echo "log: $work/$t.log"
done
python3 - "${res[native]}" "${res[shm]:-{\}}" "${res[tcp]:-{\}}" <<'PY' || failures=$((failures + 1))
import json, sys
n, s, t = (json.loads(a) for a in sys.argv[1:4])
ok = True
print("%-28s %10s %10s %10s %7s %7s" % ("issue 13 figures", "native", "shm", "tcp", "shm x", "tcp x"))
for k, unit in (("gemm_bf16_tflops", "TFLOP/s"), ("resnet18_step_ms", "ms")):
    f = lambda d: "%10.2f" % d[k] if k in d else "%10s" % "-"
    r = lambda d: "%7.3f" % (d[k] / n[k]) if k in d else "%7s" % "-"
    print("%-28s %s %s %s %s %s" % ("%s (%s)" % (k, unit), f(n), f(s), f(t), r(s), r(t)))
checks = [("GEMM over shm >= 0.95x native", "gemm_bf16_tflops" in s and s["gemm_bf16_tflops"] >= 0.95 * n["gemm_bf16_tflops"]),
          ("ResNet-18 step over shm <= 1.15x native", "resnet18_step_ms" in s and s["resnet18_step_ms"] <= 1.15 * n["resnet18_step_ms"]),
          ("ResNet-18 step over tcp <= 1.5x native", "resnet18_step_ms" in t and t["resnet18_step_ms"] <= 1.5 * n["resnet18_step_ms"])]
for what, good in checks:
    print("%s %s" % ("PASS" if good else "FAIL", what))
    ok = ok and good
sys.exit(0 if ok else 1)
PY
echo "train-bench: $failures failure(s)"
[ $failures -eq 0 ]

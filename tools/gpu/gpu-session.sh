#!/usr/bin/env bash
# gpu-session.sh [--no-bench] [--quick-bench] [--programs "a b"]: the one command for the
# GPU host, run from a bundle made by make-bundle.sh. Reports the machine, runs the GPU suite
# natively and under the shim over shm and tcp, tenancy on the GPU, the import-time measurement,
# and remora-bench, and prints a short table.
# Everything it prints also lands in $OUT (the device tool's output folder) when set.
set -u
b=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/remora-gpu-out}
mkdir -p "$out"
bench=1
bench_args=()
programs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;;
    --quick-bench) bench_args+=(--quick) ;;
    --programs) read -r -a programs <<<"$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
export LD_LIBRARY_PATH=$b/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export REMORA_COMMIT=$(cat "$b/COMMIT")
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  commit: $REMORA_COMMIT"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cpus: $(nproc)  kernel: $(uname -r)"
  "$b/bin/remora-worker" --probe --backend cuda | head -3
} 2>&1 | tee "$out/env.txt"

bash "$b/scripts/run-suite.sh" "$b" --timeout 90 "${programs[@]}" 2>&1 | tee "$out/suite.txt"
suite_rc=${PIPESTATUS[0]}
tar -czf "$out/suite-logs.tgz" -C "$b" gpu-suite-logs 2>/dev/null
# Tenancy on the GPU: a quota over shm and tcp, and a faulting tenant beside a computing one.
bash "$b/scripts/tenancy-gpu.sh" "$b" 2>&1 | tee "$out/tenancy.txt"
tenancy_rc=${PIPESTATUS[0]}
# Start-up cost of a program with 64 fat binaries: native, cold and warm module cache.
bash "$b/scripts/import-time.sh" "$b" 2>&1 | tee "$out/import-time.txt"
import_rc=${PIPESTATUS[0]}
# Hot attach/detach of a second GPU (SKIP on one-GPU machines).
bash "$b/scripts/attach-gpu.sh" "$b" 2>&1 | tee "$out/attach.txt"
attach_rc=${PIPESTATUS[0]}

if [ $bench -eq 1 ]; then
  "$b/bin/remora-bench" --transports shm,tcp --matmul "$b/bin/gpu_matmul_tiled" --json-file "$out/bench.json" \
    "${bench_args[@]}" 2>&1 | tee "$out/bench.txt"
fi
python3 "$b/scripts/tcp-loopback.py" 2>&1 | tee "$out/tcp-loopback.txt"
echo "suite exit status: $suite_rc  tenancy exit status: $tenancy_rc  import-time exit status: $import_rc  attach exit status: $attach_rc (77 = skipped)"

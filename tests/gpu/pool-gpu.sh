#!/usr/bin/env bash
# pool-gpu.sh BUNDLE_OR_BUILD_DIR: a pool of two cuda-backend servers on this machine's one GPU
# (docs/ARCHITECTURE.md "A pool of servers"), PyTorch through the pool's address only.
#   - etcd: one member on loopback (Debian's static etcd binary: $ETCD, or etcd on PATH, or
#     BUNDLE/bin/etcd); the servers need libcurl (libcurl.so.4 or libcurl-gnutls.so.4);
#   - two remora-server --backend cuda --pool processes (p1, p2), both serving GPU 0;
#   - a tenant created once through p1 with 8 GiB per GPU and 12 GiB across the pool, given two
#     GPUs by `remoractl pool attach --gpus 2` (spread: one on each server);
#   - natively, then remoted with REMORA_SERVER=pool://p1,p2 (REMORA_ASSERT_NO_LOCAL_GPU=1,
#     Remora's cuBLAS/cuBLASLt/cuRAND preloaded): matmul_train.py (an MLP trained on cuda:0),
#     pool_devices.py (two devices, matmuls and a cross-server copy checked, the pool-wide limit
#     stopping allocations on both devices at 12 GiB while neither reaches 8 GiB), and
#     remora-run --pool ... --gpus 2 -- python3 pool_devices.py;
#   - `remoractl pool status` and the pool's series on /metrics.
# Prints a PASS/FAIL line per check. Without a GPU, PyTorch, etcd or libcurl: SKIP, exit 77.
# Exit 0 when all passed, 1 otherwise.
set -u
build=$(cd "${1:?usage: pool-gpu.sh BUNDLE_OR_BUILD_DIR}" && pwd)
bin=$build/bin
lib=$build/lib
here=$(cd "$(dirname "$0")" && pwd)
torch_dir=$here/torch
[ -d "$torch_dir" ] || torch_dir=$build/scripts/torch
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"; exit 77
fi
python3 -c 'import torch' 2>/dev/null || { echo "SKIP: no PyTorch"; exit 77; }
etcd=${ETCD:-$(command -v etcd || true)}
[ -n "$etcd" ] || etcd=$bin/etcd
[ -x "$etcd" ] || { echo "SKIP: no etcd binary (set ETCD=, or copy Debian's /usr/bin/etcd to $bin/etcd)"; exit 77; }
ldconfig -p 2>/dev/null | grep -qE 'libcurl(-gnutls)?\.so\.4 ' || [ -e "$build/deps/libcurl.so.4" ] ||
  { echo "SKIP: no libcurl.so.4 on this machine (remora-server --pool loads it)"; exit 77; }
export LD_LIBRARY_PATH=$build/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

work=$(mktemp -d /tmp/remora-pool-gpu.XXXXXX)
pids=()
cleanup() {
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null; wait "${pids[$i]}" 2>/dev/null; done
  [ -z "${KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
eport=$(port) pport=$(port) mport=$(port)
"$etcd" --name e1 --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$eport" \
  --advertise-client-urls "http://127.0.0.1:$eport" --listen-peer-urls "http://127.0.0.1:$pport" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pport" --initial-cluster "e1=http://127.0.0.1:$pport" \
  >"$work/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$eport/health" >/dev/null 2>&1 && break; sleep 0.1; done

failures=0
report() {  # report NAME RC [LOG]
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi
  [ -n "${3:-}" ] && grep -E '^( *\[|PASS|FAIL)' "$3" | sed 's/^/    /'
  [ "$2" -eq 0 ] || [ -z "${3:-}" ] || tail -25 "$3" | sed 's/^/    | /'
}
declare -A url
for s in p1 p2; do
  extra=()
  [ "$s" = p1 ] && extra=(--metrics-listen "tcp://127.0.0.1:$mport")
  "$bin/remora-server" --backend cuda --state-dir "$work/$s" --listen tcp://127.0.0.1:0 --ready-file "$work/$s.ready" \
    --pool "http://127.0.0.1:$eport" --pool-name "$s" --log-level info "${extra[@]}" >"$work/$s.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do [ -s "$work/$s.ready" ] && break; sleep 0.1; done
  [ -s "$work/$s.ready" ] || { echo "FAIL pool-gpu: server $s did not start"; tail -20 "$work/$s.log"; exit 1; }
  url[$s]=$(grep '^tcp://' "$work/$s.ready")
done
ctl() { "$bin/remoractl" --state-dir "$work/p1" "$@"; }
token=$(ctl --json tenant create trainer --memory 8GiB --pool-memory 12GiB | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
[ -n "$token" ] || { echo "FAIL pool-gpu: tenant creation"; tail -20 "$work/p1.log"; exit 1; }
ctl pool attach trainer --gpus 2 >"$work/attach.log" 2>&1
report "tenant placed on both servers (remoractl pool attach --gpus 2)" $? "$work/attach.log"
cat "$work/attach.log" | sed 's/^/    /'
pool="pool://${url[p1]#tcp://},${url[p2]#tcp://}"
libs="$lib/libcublas.so.13 $lib/libcublasLt.so.13 $lib/libcurand.so.10"
remoted() {
  LD_PRELOAD="$lib/libremora.so $lib/libcuda.so.1 $lib/libnvidia-ml.so.1 $libs" LD_LIBRARY_PATH="$lib:$LD_LIBRARY_PATH" \
    TRITON_LIBCUDA_PATH=$lib REMORA_SERVER=$pool REMORA_TOKEN=$token REMORA_ASSERT_NO_LOCAL_GPU=1 env -u CUDA_VISIBLE_DEVICES "$@"
}

python3 "$torch_dir/matmul_train.py" >"$work/mm-native.log" 2>&1
report "matmul_train native" $? "$work/mm-native.log"
remoted python3 "$torch_dir/matmul_train.py" >"$work/mm-pool.log" 2>&1
report "matmul_train through the pool's address" $? "$work/mm-pool.log"
remoted python3 "$torch_dir/pool_devices.py" --devices 2 --pool-limit-mib 12288 --gpu-limit-mib 8192 >"$work/devices.log" 2>&1
report "pool_devices: 2 devices on 2 servers, pool-wide limit of 12 GiB" $? "$work/devices.log"
echo "$token" >"$work/token"
chmod 600 "$work/token"
env -u CUDA_VISIBLE_DEVICES REMORA_ASSERT_NO_LOCAL_GPU=1 "$bin/remora-run" --pool "${pool#pool://}" --gpus 2 --token-file "$work/token" \
  --libraries cublas,cublasLt,curand -- python3 "$torch_dir/pool_devices.py" --devices 2 --pool-limit-mib 12288 \
  --gpu-limit-mib 8192 >"$work/run.log" 2>&1
report "remora-run --pool --gpus 2 -- pool_devices.py" $? "$work/run.log"
for s in p1 p2; do
  grep -q "session [0-9]* started: tenant 'trainer'" "$work/$s.log"
  report "server $s served the tenant's sessions" $?
done
ctl pool status >"$work/status.log" 2>&1
report "remoractl pool status" $? "$work/status.log"
sed 's/^/    /' "$work/status.log"
python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
  "http://127.0.0.1:$mport/metrics" | grep -E '^remora_pool_(servers|gpus|memory_total_bytes|tenant_limit_bytes)' >"$work/metrics.log"
report "the pool on /metrics" $? "$work/metrics.log"
sed 's/^/    /' "$work/metrics.log"
echo "pool-gpu: $failures failure(s)"
[ "$failures" -eq 0 ]

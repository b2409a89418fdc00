#!/usr/bin/env bash
# metrics-gpu.sh BUILD_DIR: /metrics on a real GPU (CTest gpu.metrics, label gpu). Starts
# remora-server --backend cuda --metrics-listen, runs gpu_tenant_compute (kernels for 6 s)
# as a tenant limited to 2 GiB, and scrapes while it computes. Passes when:
#   - remora_build_info says backend="cuda", emulated="false";
#   - NVML readings are there for GPU 0: remora_gpu_utilization_ratio (some scrape > 0 while
#     kernels run) and remora_gpu_device_memory_used_bytes (> the ledger's charge: contexts
#     count there);
#   - the tenant's series agree with remoractl (memory used, limit) and its session counts
#     calls and bytes;
#   - promtool check metrics passes, when promtool is installed.
# Prints the scraped GPU lines. Without an NVIDIA GPU: SKIP line, exit 77.
set -u
build=$(cd "${1:?usage: metrics-gpu.sh BUILD_DIR}" && pwd)
bin=$build/bin
shim=$build/lib/libremora.so
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"
  exit 77
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
. "$(dirname "$0")/gpu-server.sh"
start_gpu_server metrics-gpu --metrics-listen "tcp://127.0.0.1:$port"
url=http://127.0.0.1:$port/metrics
scrape() { python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$url"; }
value() { awk -v m="$1" 'index($0, m) == 1 { print $NF; exit }' "$2"; }
failures=0
check() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi; }

token=$(token_of metrics --memory 2GiB)
LD_PRELOAD=$shim REMORA_SERVER=$(grep '^shm://' "$ready") REMORA_TOKEN=$token "$bin/gpu_tenant_compute" 6 >"$work/app.log" 2>&1 &
app=$!
for _ in $(seq 1 200); do grep -q computing "$work/app.log" && break; sleep 0.05; done
max_util=0
for i in $(seq 1 8); do
  scrape >"$work/m$i.txt" || { echo "FAIL scrape $i"; failures=$((failures + 1)); }
  u=$(value 'remora_gpu_utilization_ratio{gpu="0"}' "$work/m$i.txt")
  max_util=$(python3 -c "print(max($max_util, ${u:-0}))")
  sleep 0.5
done
m=$work/m4.txt
grep '^remora_gpu\|^remora_build_info' "$m"
check 'build info says cuda' 'grep -q "^remora_build_info{.*backend=\"cuda\",emulated=\"false\"} 1" "$m"'
check "GPU utilisation read through NVML while kernels run (max $max_util)" 'python3 -c "import sys; sys.exit(0 if $max_util > 0 else 1)"'
dev=$(value 'remora_gpu_device_memory_used_bytes{gpu="0"}' "$m")
charged=$(value 'remora_gpu_memory_used_bytes{gpu="0"}' "$m")
check "device memory from NVML ($dev) exceeds the ledger's charge ($charged)" '[ "${dev:-0}" -gt "${charged:-0}" ]'
same=0
for _ in $(seq 1 10); do  # remoractl and a scrape, back to back, until they agree
  a=$(ctl --json tenant list | python3 -c 'import json,sys; print([t for t in json.load(sys.stdin) if t["name"]=="metrics"][0]["memory_used"])')
  b=$(scrape | awk '/^remora_tenant_memory_used_bytes\{tenant="metrics",/ { s += $NF } END { print s + 0 }')
  [ "$a" = "$b" ] && { same=1; break; }
  sleep 0.2
done
check "tenant memory in /metrics = remoractl ($a)" '[ $same = 1 ]'
check 'tenant limit 2 GiB' 'grep -q "^remora_tenant_memory_limit_bytes{tenant=\"metrics\",gpu=\"0\"} 2147483648" "$m"'
calls=$(grep '^remora_session_calls_total{' "$m" | awk '{print $NF}')
check "session calls counted ($calls)" '[ "${calls:-0}" -gt 0 ]'
if command -v promtool >/dev/null; then
  check 'promtool check metrics' 'promtool check metrics <"$m"'
fi
wait "$app"
app_rc=$?
check 'gpu_tenant_compute passed' '[ $app_rc -eq 0 ]'
[ "$failures" = 0 ] && echo "metrics-gpu: all passed" || echo "metrics-gpu: $failures failed"
[ "$failures" = 0 ]

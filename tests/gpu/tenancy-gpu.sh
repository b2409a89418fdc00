#!/usr/bin/env bash
# tenancy-gpu.sh BUILD_DIR: tenancy on a real GPU (CTest gpu.tenancy, label gpu; run-suite's
# bundle layout works too: BUILD_DIR/bin, BUILD_DIR/lib/libremora.so).
#  1. quota: a tenant limited to 64 MiB runs app_quota 64 16 through the shim against a
#     remora-server --backend cuda (the host-backend integration test, on the GPU).
#  2. isolation: tenant B runs gpu_tenant_compute (kernels with checked results) while tenant
#     A runs gpu_fault_kernel (a kernel writing through a wild pointer) on the same GPU; A must
#     see its fault, B must finish with every result correct, and B's next run must pass too.
# Without an NVIDIA GPU: SKIP line, exit 77. Exit 0 when everything passed, 1 otherwise.
set -u
build=$(cd "${1:?usage: tenancy-gpu.sh BUILD_DIR}" && pwd)
bin=$build/bin
shim=$build/lib/libremora.so

if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"
  exit 77
fi

. "$(dirname "$0")/gpu-server.sh"
start_gpu_server tenancy-gpu --listen tcp://127.0.0.1:0
shm_url=$(grep '^shm://' "$ready")
tcp_url=$(grep '^tcp://' "$ready")

token_q=$(token_of quota --memory 64MiB)
token_p=$(token_of pools --memory 256MiB)
token_a=$(token_of faulty --memory 2GiB)
token_b=$(token_of steady --memory 2GiB)
[ -n "$token_q" ] && [ -n "$token_a" ] && [ -n "$token_b" ] && [ -n "$token_p" ] || { echo "FAIL tenancy-gpu: tenant creation"; exit 1; }
run_as() {  # run_as TOKEN URL PROGRAM ARGS...
  local token=$1 url=$2
  shift 2
  LD_PRELOAD=$shim REMORA_SERVER=$url REMORA_TOKEN=$token "$@"
}

failures=0
report() {  # report NAME RC LOG
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1 (exit $2)"; sed 's/^/    /' "$3"; failures=$((failures + 1)); fi
}

# 1. The quota test, over both transports.
for url in "$shm_url" "$tcp_url"; do
  run_as "$token_q" "$url" "$bin/app_quota" 64 16 >"$work/quota.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q 'PASS quota' "$work/quota.log"; then rc=1; fi
  report "quota (cuda backend, ${url%%://*}): 64 MiB limit, 5th 16 MiB allocation refused, room after a free" $rc "$work/quota.log"
done

# 2. A faulting kernel in tenant A while tenant B computes on the same GPU.
run_as "$token_b" "$shm_url" "$bin/gpu_tenant_compute" 6 >"$work/b.log" 2>&1 &
b_pid=$!
for _ in $(seq 1 200); do grep -q computing "$work/b.log" && break; sleep 0.05; done
run_as "$token_a" "$tcp_url" "$bin/gpu_fault_kernel" >"$work/a.log" 2>&1
report "tenant A's kernel faults (and sees it, sticky)" $? "$work/a.log"
run_as "$token_a" "$shm_url" "$bin/gpu_fault_kernel" >"$work/a2.log" 2>&1
report "tenant A faults again, over shm" $? "$work/a2.log"
wait "$b_pid"
report "tenant B's concurrent computation: every result correct" $? "$work/b.log"
grep -h '^PASS\|^FAIL' "$work/b.log" | sed 's/^/    /'
run_as "$token_b" "$tcp_url" "$bin/gpu_tenant_compute" 1 >"$work/b2.log" 2>&1
report "tenant B afterwards" $? "$work/b2.log"

# 3. Context overhead (measured with NVML; shown, not charged) beside 256 MiB held.
run_as "$token_b" "$shm_url" "$bin/app_hold_memory" 268435456 5 >"$work/hold.log" 2>&1 &
h_pid=$!
for _ in $(seq 1 100); do grep -q holding "$work/hold.log" && break; sleep 0.05; done
sleep 2.5  # the worker re-measures every 2 s
echo "usage while tenant 'steady' holds 256 MiB:"
ctl usage steady
wait "$h_pid"
report "a session holds 256 MiB and exits cleanly" $? "$work/hold.log"

# 4. Memory a stream-ordered pool keeps after a free stays charged (docs/SECURITY.md, F5).
run_as "$token_p" "$shm_url" "$bin/gpu_pool_retention" 256 >"$work/pool.log" 2>&1
report "pool retention: kept pool memory stays charged until trimmed" $? "$work/pool.log"

# 5. The workers run sandboxed: another user, no capabilities, seccomp (docs/SECURITY.md, F7).
run_as "$token_b" "$shm_url" "$bin/app_hold_memory" 1048576 3 >"$work/hold2.log" 2>&1 &
h_pid=$!
for _ in $(seq 1 100); do grep -q holding "$work/hold2.log" && break; sleep 0.05; done
wpid=$(ctl --json session list | sed -n 's/.*"worker_pid":\([0-9]*\).*/\1/p' | head -1)
if [ -n "$wpid" ]; then
  grep -E '^(Uid|CapEff|NoNewPrivs|Seccomp):' "/proc/$wpid/status" | sed 's/^/    /'
  sandboxed=$(grep -c -E '^(CapEff:\s+0+$|NoNewPrivs:\s+1$|Seccomp:\s+2$)' "/proc/$wpid/status")
  [ "$sandboxed" -eq 3 ]
  report "the cuda worker runs without capabilities, with no_new_privs and its seccomp filter" $? "$work/hold2.log"
fi
wait "$h_pid"
report "a session runs to its end in the sandboxed worker" $? "$work/hold2.log"

ctl usage
ctl session list
if [ $failures -ne 0 ]; then
  echo "--- server log"; tail -50 "$work/server.log"
  echo "FAIL tenancy-gpu: $failures check(s) failed"
  exit 1
fi
echo "PASS tenancy-gpu: quota and isolation on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

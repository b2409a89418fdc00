#!/usr/bin/env bash
# multi-server-gpu.sh BUILD_DIR: GPUs of two servers in one application, on real GPUs (CTest
# gpu.multi_server, label gpu). Two remora-server --backend cuda processes on this machine,
# each serving GPU 0 to its own tenant; GPU programs run with REMORA_SERVER naming both (one
# token per server), so their devices 0 and 1 are the two servers' GPUs and every peer copy
# crosses servers: multi_device_compute (a computation split over both devices, results
# checked, device 0's result squared on device 1 and brought back) and peer_copy, over shm and
# over tcp. Then a live migration over each transport: app_migrate_loop (a kernel in a loop,
# every result checked, 256 MiB written at the start checked every 32 iterations) starts on
# the first server, `remoractl session migrate` moves it to the second mid-loop and back,
# and it goes on computing after each move; once more with stream-ordered memory held and
# allocated and freed every iteration ("async"). The clients touch no local GPU
# (REMORA_ASSERT_NO_LOCAL_GPU=1; CUDA_VISIBLE_DEVICES is unset for them: under Remora it
# chooses among the session's devices, and an empty value would hide them all).
# Needs one NVIDIA GPU: otherwise a SKIP line and exit 77. Exit 0 when all passed, 1 otherwise.
set -u
build=$(cd "${1:?usage: multi-server-gpu.sh BUILD_DIR}" && pwd)
bin=$build/bin
shim=$build/lib/libremora.so

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -lt 1 ]; then
  echo "SKIP: multi-server-gpu needs an NVIDIA GPU"
  exit 77
fi

. "$(dirname "$0")/gpu-server.sh"
second_pid=
on_exit '[ -n "$second_pid" ] && kill "$second_pid" 2>/dev/null && wait "$second_pid" 2>/dev/null'
start_gpu_server multi-server --listen tcp://127.0.0.1:0 --stable-addresses
shm_a=$(grep '^shm://' "$ready")
tcp_a=$(grep '^tcp://' "$ready")
token_a=$(token_of pool --memory 4GiB --gpus 0)

# The second server: its own state directory, sockets and tenant.
second=$work/second
mkdir -p "$second"
"$bin/remora-server" --backend cuda --state-dir "$second/state" --listen "shm://$second/remora.sock" \
  --listen tcp://127.0.0.1:0 --stable-addresses --ready-file "$second/ready" --log-level info >"$second/server.log" 2>&1 &
second_pid=$!
for _ in $(seq 1 300); do [ -s "$second/ready" ] && break; sleep 0.1; done
[ -s "$second/ready" ] || { echo "FAIL multi-server-gpu: the second remora-server did not start"; cat "$second/server.log"; exit 1; }
shm_b=$(grep '^shm://' "$second/ready")
tcp_b=$(grep '^tcp://' "$second/ready")
token_b=$("$bin/remoractl" --state-dir "$second/state" --json tenant create pool --memory 4GiB --gpus 0 |
  sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
[ -n "$token_a" ] && [ -n "$token_b" ] || { echo "FAIL multi-server-gpu: tenant creation"; exit 1; }

failures=0
for transport in shm tcp; do
  if [ "$transport" = shm ]; then servers="$shm_a,$shm_b"; else servers="$tcp_a,$tcp_b"; fi
  for program in multi_device_compute peer_copy; do
    log=$work/$program.$transport.log
    start=$(date +%s%N)
    env -u CUDA_VISIBLE_DEVICES REMORA_ASSERT_NO_LOCAL_GPU=1 LD_PRELOAD=$shim REMORA_SERVER=$servers \
      REMORA_TOKEN="$token_a,$token_b" timeout 120 "$bin/gpu_$program" >"$log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    line=$(grep -E "^(PASS|FAIL|SKIP) $program" "$log" | tail -1)
    # Both servers' devices, or it proves nothing.
    if [ "$program" = multi_device_compute ] && [[ "$line" != *"2 device(s)"* ]]; then line="FAIL (not 2 devices) $line"; fi
    if [ $rc -eq 0 ] && [[ "$line" == "PASS "* ]]; then
      echo "PASS multi-server $transport $program (${ms} ms): ${line#PASS }"
    else
      echo "FAIL multi-server $transport $program (exit $rc): ${line:-no result line}"
      tail -20 "$log"
      failures=$((failures + 1))
    fi
  done
done
# The id of the one session of the server whose state directory is $1 ("" if none).
session_on() { "$bin/remoractl" --state-dir "$1" --json session list | sed -n 's/.*"id":\([0-9]*\).*/\1/p' | head -1; }
# Waits until $1 holds at least $2 "iteration" lines (false after 90 s).
iterations_reach() {
  for _ in $(seq 1 900); do
    [ "$(grep -c '^iteration' "$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
# Moves the session on state directory $1 to URL $2 with token $3: prints the time it took.
move() {
  local id start
  id=$(session_on "$1")
  [ -n "$id" ] || { echo "no session on $1"; return 1; }
  start=$(date +%s%N)
  printf '%s\n' "$3" | "$bin/remoractl" --state-dir "$1" session migrate "$id" --to "$2" --token-file - --wait 60 || return 1
  echo "moved in $((($(date +%s%N) - start) / 1000000)) ms"
}
# "async": the loop also holds stream-ordered memory, reads each result through memory
# allocated and freed in stream order and sets its device pool's release threshold (all moved
# there and back: the new worker's pool hands out the old addresses).
for transport in shm tcp; do
for mode in plain async; do
  if [ "$transport" = shm ]; then url_a=$shm_a url_b=$shm_b; else url_a=$tcp_a url_b=$tcp_b; fi
  log=$work/migrate_loop.$transport.$mode.log
  stop=$work/stop.$transport.$mode
  rm -f "$stop"
  args=("$stop" 256)
  [ "$mode" = async ] && args+=(async)
  env -u CUDA_VISIBLE_DEVICES REMORA_ASSERT_NO_LOCAL_GPU=1 LD_PRELOAD=$shim REMORA_SERVER=$url_a REMORA_TOKEN=$token_a \
    REMORA_LOG_LEVEL=info timeout 300 "$bin/app_migrate_loop" "${args[@]}" >"$log" 2>&1 &
  app=$!
  ok=1 there= back=
  iterations_reach "$log" 3 || ok=0
  if [ $ok -eq 1 ]; then there=$(move "$work/state" "$url_b" "$token_b" 2>&1) || ok=0; fi
  n=$(grep -c '^iteration' "$log")
  if [ $ok -eq 1 ]; then iterations_reach "$log" $((n + 3)) || ok=0; fi
  if [ $ok -eq 1 ]; then back=$(move "$second/state" "$url_a" "$token_a" 2>&1) || ok=0; fi
  n=$(grep -c '^iteration' "$log")
  if [ $ok -eq 1 ]; then iterations_reach "$log" $((n + 3)) || ok=0; fi
  touch "$stop"
  wait "$app"
  rc=$?
  line=$(grep -E '^(PASS|FAIL) migrate_loop' "$log" | tail -1)
  if [ $ok -eq 1 ] && [ $rc -eq 0 ] && [[ "$line" == "PASS "* ]] && [[ "$(head -1 "$log")$(grep '^ready' "$log")" == *"ready gpu"* ]]; then
    echo "PASS multi-server $transport live migration ($mode): there ${there##*$'\n'}, back ${back##*$'\n'}; ${line#PASS }"
  else
    echo "FAIL multi-server $transport live migration ($mode) (exit $rc, moves: '$there' '$back'): ${line:-no result line}"
    grep -v '^iteration' "$log" | tail -20
    failures=$((failures + 1))
  fi
done
done
[ $failures -eq 0 ] && echo "multi-server-gpu: all passed" && exit 0
echo "multi-server-gpu: $failures failure(s)"
exit 1

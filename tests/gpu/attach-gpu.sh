#!/usr/bin/env bash
# attach-gpu.sh BUILD_DIR: hot attach and detach of a real GPU while an application runs
# (CTest gpu.attach, label gpu). A tenant starts with GPU 0 only; mem_shell (tests/apps, app_mem_shell) runs
# as that tenant against remora-server --backend cuda; the administrator attaches GPU 1: the
# running application sees a second device, allocates on it and checks a pattern written and
# read back on that GPU; then GPU 1 is detached: its calls fail with
# cudaErrorDevicesUnavailable while GPU 0 carries on.
# Needs two NVIDIA GPUs: otherwise a SKIP line and exit 77. Exit 0 when all passed, 1 otherwise.
set -u
build=$(cd "${1:?usage: attach-gpu.sh BUILD_DIR}" && pwd)
bin=$build/bin
shim=$build/lib/libremora.so

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -lt 2 ]; then
  echo "SKIP: attach-gpu needs two NVIDIA GPUs (found ${gpus:-0})"
  exit 77
fi

. "$(dirname "$0")/gpu-server.sh"
app_pid=
on_exit '[ -n "$app_pid" ] && kill "$app_pid" 2>/dev/null'
start_gpu_server attach-gpu
url=$(grep '^shm://' "$ready")
token=$(token_of hot --memory 1GiB --gpus 0)
[ -n "$token" ] || { echo "FAIL attach-gpu: tenant creation"; exit 1; }

mkfifo "$work/cmd"
LD_PRELOAD=$shim REMORA_SERVER=$url REMORA_TOKEN=$token "$bin/app_mem_shell" "$work/cmd" >"$work/app.out" 2>"$work/app.err" &
app_pid=$!
exec 3<>"$work/cmd"  # read-write: opening never blocks, even if the application died
seq=0
answer=
# ask VERB ARGS: sends one command and sets $answer to its reply without the sequence number
# (not a function to call in $(...): the sequence number must survive the call).
ask() {
  seq=$((seq + 1))
  [ "$answer" = "the application exited" ] && return
  echo "$seq $*" >&3
  answer=timeout
  for _ in $(seq 1 600); do
    line=$(grep "^$seq " "$work/app.out" | head -1)
    [ -n "$line" ] && { answer=${line#"$seq "}; return; }
    kill -0 "$app_pid" 2>/dev/null || { answer="the application exited"; return; }
    sleep 0.05
  done
}
failures=0
expect() {  # expect WHAT GOT PATTERN
  if [[ "$2" == $3 ]]; then echo "PASS $1 ($2)"; else echo "FAIL $1: got '$2', want '$3'"; failures=$((failures + 1)); fi
}

ask count; expect "before attach the tenant sees one device" "$answer" "count 1"
ctl attach hot 1 >/dev/null || { echo "FAIL attach-gpu: remoractl attach"; failures=$((failures + 1)); }
for _ in $(seq 1 40); do  # likewise an attach
  ask count
  [ "$answer" = "count 2" ] && break
  sleep 0.05
done
expect "after attach the running application sees two" "$answer" "count 2"
ask alloc 1 64; expect "64 MiB on the attached GPU" "$answer" "ok *"
id=$(echo "$answer" | awk '{print $2}')
ask check "$id"; expect "a pattern written and read back on the attached GPU" "$answer" "ok"
expect "the ledger counts it on GPU 1" "$(ctl --json usage hot | tr -d ' \n')" '*"gpu":1,"used":67108864*'
ctl detach hot 1 >/dev/null || { echo "FAIL attach-gpu: remoractl detach"; failures=$((failures + 1)); }
# The worker applies a detach asynchronously (milliseconds after remoractl returns).
for _ in $(seq 1 40); do
  ask alloc 1 1
  [ "$answer" = "err cudaErrorDevicesUnavailable" ] && break
  sleep 0.05
done
expect "after detach GPU 1 fails" "$answer" "err cudaErrorDevicesUnavailable"
ask alloc 0 16; expect "GPU 0 carries on" "$answer" "ok *"
id=$(echo "$answer" | awk '{print $2}')
ask check "$id"; expect "and its memory still works" "$answer" "ok"
ask quit; expect "quit" "$answer" "bye"
exec 3>&-
wait "$app_pid"
app_pid=
if [ $failures -ne 0 ]; then
  echo "--- application stderr"; tail -20 "$work/app.err"; echo "--- server log"; tail -20 "$work/server.log"
  echo "FAIL attach-gpu: $failures check(s) failed"
  exit 1
fi
echo "PASS attach-gpu: hot attach and detach of GPU 1 while an application runs"

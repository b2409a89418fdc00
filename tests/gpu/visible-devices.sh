#!/usr/bin/env bash
# visible-devices.sh BUNDLE_OR_BUILD_DIR: CUDA_VISIBLE_DEVICES natively and through Remora
# (remora-run over shm and tcp, the client touching no local GPU), for PyTorch and for a CUDA
# program that lists what the runtime, the driver API and NVML see (bin/app_visible_devices).
# Cases: unset, an index, the GPU's UUID, a unique UUID prefix, an empty value, an index past
# the last GPU, a GPU named twice, a MIG-style entry. Each remoted run must print exactly what
# the native run printed. Prints a table and exits 0 when every row agrees (77 without a GPU).
set -u
b=$(cd "${1:?usage: visible-devices.sh BUNDLE_OR_BUILD_DIR}" && pwd)
run=$b/bin/remora-run
app=$b/bin/app_visible_devices
out=${OUT:-}
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then echo "SKIP: no NVIDIA GPU"; exit 77; fi
[ -x "$app" ] || { echo "FAIL: $app not built"; exit 1; }
have_torch=0
python3 -c 'import torch' 2>/dev/null && have_torch=1
uuid=$(nvidia-smi -L | sed -n 's/.*(UUID: \(GPU-[^)]*\)).*/\1/p' | head -1)
count=$(nvidia-smi -L | grep -c '^GPU ')
probe='import torch
n = torch.cuda.device_count()
print("torch", n, " ".join(str(torch.cuda.get_device_properties(i).uuid) for i in range(n)))'
work=$(mktemp -d)
cases=("<unset>" "0" "$uuid" "${uuid:0:12}" "" "$count" "0,0" "MIG-${uuid#GPU-}")
names=("unset" "index 0" "UUID" "UUID prefix" "empty" "index $count (past the last)" "0,0 (twice)" "MIG-...")
fails=0
printf '%-26s %-10s %-10s %-10s %s\n' case native shm tcp "what native sees"
for i in "${!cases[@]}"; do
  v=${cases[$i]}
  for mode in native shm tcp; do
    log=$work/$i.$mode
    envs=()
    [ "$v" != "<unset>" ] && envs=(CUDA_VISIBLE_DEVICES="$v")
    if [ "$mode" = native ]; then pre=(); else pre=("$run" --transport "$mode" --backend cuda --); fi
    {
      env -u CUDA_VISIBLE_DEVICES "${envs[@]}" REMORA_ASSERT_NO_LOCAL_GPU=$([ $mode = native ] && echo 0 || echo 1) \
        "${pre[@]}" "$app" 2>/dev/null | grep -E '^(runtime|driver|nvml) '
      [ $have_torch = 1 ] && env -u CUDA_VISIBLE_DEVICES "${envs[@]}" \
        REMORA_ASSERT_NO_LOCAL_GPU=$([ $mode = native ] && echo 0 || echo 1) "${pre[@]}" python3 -c "$probe" 2>/dev/null | grep '^torch '
    } >"$log"
  done
  row=()
  for mode in shm tcp; do
    if cmp -s "$work/$i.native" "$work/$i.$mode" && [ -s "$work/$i.native" ]; then row+=(PASS); else row+=(FAIL); fails=$((fails + 1)); fi
  done
  seen=$(grep -E '^(runtime|torch) ' "$work/$i.native" | awk '{print $1 "=" $2}' | tr '\n' ' ')
  printf '%-26s %-10s %-10s %-10s %s\n' "${names[$i]}" seen "${row[0]}" "${row[1]}" "$seen"
  for mode in shm tcp; do
    cmp -s "$work/$i.native" "$work/$i.$mode" || { echo "  native:"; sed 's/^/    /' "$work/$i.native"; echo "  $mode:"; sed 's/^/    /' "$work/$i.$mode"; }
  done
done
[ $have_torch = 1 ] || echo "(PyTorch not installed: the CUDA program only)"
[ -n "$out" ] && cp -r "$work" "$out/visible-devices-logs" 2>/dev/null
echo "visible-devices: $fails disagreement(s)"
[ $fails -eq 0 ]

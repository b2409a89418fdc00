#!/usr/bin/env bash
# cudnn-gpu.sh BUNDLE_OR_BUILD_DIR: issue 42's cuDNN checks and issue 45's call census on a real
# GPU (CTest gpu.torch_cudnn), natively and remoted over shm and tcp with all of Remora's math
# libraries preloaded and REMORA_ASSERT_NO_LOCAL_GPU=1 (a fall-back to a local GPU cannot pass):
#   sdpa_check.py     scaled_dot_product_attention fp16/bf16, causal and not, with backward,
#                     by default and forced onto cuDNN, against the math backend in fp32
#   gpt_train.py      a GPT-2-style model trained in bf16 with default attention
#   resnet_census.py  a ResNet-50 training step (batch 64, bf16, channels-last)
#   infer_census.py   the `.item()` loop and GPT-2 greedy decoding (issue 45), us/step, ms/token
# CHECKS="gpt_train infer_census" runs a subset (default: all four).
# Remoted runs write the census (REMORA_CALL_STATS=FILE, one line per steady-state interval);
# gpt_train and resnet_census fail if a step makes a round trip besides the application's own
# synchronisations. Ends with a PASS/FAIL table and images/s, tokens/s side by side.
# Without a GPU or PyTorch: SKIP, exit 77. Exit 0 when every check passed.
set -u
build=$(cd "${1:?usage: cudnn-gpu.sh BUILD_DIR}" && pwd)
bin=$build/bin
lib=$build/lib
here=$(cd "$(dirname "$0")" && pwd)
if ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"; exit 77
fi
python3 -c 'import torch' 2>/dev/null || { echo "SKIP: no PyTorch"; exit 77; }
# The worker's cuDNN is PyTorch's own (see torch-gpu.sh).
if [ -z "${REMORA_LIBRARY_PATH:-}" ]; then
  cudnn_dir=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$cudnn_dir" ] && [ -e "$cudnn_dir/libcudnn.so.9" ] && export REMORA_LIBRARY_PATH=$cudnn_dir
fi
. "$here/../gpu-server.sh"
start_gpu_server cudnn-gpu --listen tcp://127.0.0.1:0
shm_url=$(grep '^shm://' "$ready")
tcp_url=$(grep '^tcp://' "$ready")
token=$(token_of cudnn)
[ -n "$token" ] || { echo "FAIL cudnn-gpu: tenant creation"; exit 1; }
libs=""
for l in libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudnn.so.9 libcufft.so.12 libcusolver.so.12 libcusparse.so.12; do
  [ -e "$lib/$l" ] && libs+=" $lib/$l"
done
remoted() {  # remoted URL CENSUS_FILE COMMAND...
  local url=$1 census=$2
  shift 2
  LD_PRELOAD="$lib/libremora.so $lib/libcuda.so.1 $lib/libnvidia-ml.so.1$libs" LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    TRITON_LIBCUDA_PATH=$lib REMORA_SERVER=$url REMORA_TOKEN=$token REMORA_ASSERT_NO_LOCAL_GPU=1 REMORA_CALL_STATS=$census "$@"
}

failures=0
rows=()
run() {  # run NAME SCRIPT MODE
  local name=$1 script=$2 mode=$3 log=$work/$1-$3.log rc
  if [ "$mode" = native ]; then
    python3 "$here/$script" >"$log" 2>&1
  else
    local url=$shm_url
    [ "$mode" = tcp ] && url=$tcp_url
    remoted "$url" "$work/census-$name-$mode.jsonl" python3 "$here/$script" >"$log" 2>&1
  fi
  rc=$?
  local verdict=PASS
  if [ $rc -eq 77 ]; then verdict=SKIP; elif [ $rc -ne 0 ]; then verdict=FAIL; failures=$((failures + 1)); fi
  local figure
  figure=$(grep -Eo '[0-9.]+ (images|tokens)/s|[0-9.]+ (us/step|ms/token)' "$log" | tr '\n' ' ')
  rows+=("$(printf '%-14s %-7s %-5s %s' "$name" "$mode" "$verdict" "$figure")")
  echo "$verdict $name $mode"
  grep -E '^(PASS|FAIL|SKIP|census|item:|decode:|    )' "$log" | sed 's/^/    /'
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || tail -25 "$log" | sed 's/^/    | /'
}
for check in ${CHECKS:-sdpa_check gpt_train resnet_census infer_census}; do
  for mode in native shm tcp; do run $check $check.py $mode; done
done
echo
printf '%-14s %-7s %-5s %s\n' check mode result figure
printf '%s\n' "${rows[@]}"
echo "cudnn-gpu: $failures failure(s)"
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/cudnn-gpu" && cp "$work"/*.log "$work"/census-*.jsonl "$OUT/cudnn-gpu/" 2>/dev/null; fi
[ $failures -eq 0 ]

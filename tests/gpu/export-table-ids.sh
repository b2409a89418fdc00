#!/bin/bash
# export-table-ids.sh BUILD_DIR [cuda|host]
#
# Which private driver tables (cuGetExportTable ids) and which of their slots the CUDA runtime
# linked statically into programs asks Remora's driver facade for, and whether the facade serves
# them all (issue 15). Runs every statically linked test program (BUILD_DIR/bin/gpu_static_*,
# app_static_*) under remora-run with the given backend (default cuda: needs a GPU, else exit
# 77), plus, when NVCC names another toolkit's nvcc (e.g. NVCC=/usr/local/cuda-13.1/bin/nvcc),
# a probe built with that toolkit's default static runtime. Each program runs with
# REMORA_LOG=debug; the facade logs every table asked for and every slot it does not serve.
#
# Prints the ids asked for (served or not) and exits 1 listing the ids and slots Remora does not
# serve when a toolkit asks for more than it serves; 0 otherwise. Logs: BUILD_DIR/export-table-ids/.
set -u
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [cuda|host]" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
backend=${2:-cuda}
here=$(cd "$(dirname "$0")" && pwd)
run=${REMORA_RUN:-$build/bin/remora-run}

if [ "$backend" = cuda ] && ! { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "SKIP: no NVIDIA GPU on this machine"
  exit 77
fi

out=$build/export-table-ids
mkdir -p "$out"
programs=()
for f in "$build"/bin/gpu_static_* "$build"/bin/app_static_*; do [ -x "$f" ] && programs+=("$f"); done
if [ -n "${NVCC:-}" ]; then
  probe=$out/probe_$(basename "$(dirname "$(dirname "$NVCC")")")
  if "$NVCC" -o "$probe" "$here/vector_add.cu" -I"$here" 2>"$out/probe-build.log"; then
    programs+=("$probe")
  else
    echo "FAIL: $NVCC could not build the probe (see $out/probe-build.log)"
    exit 1
  fi
fi
[ ${#programs[@]} -gt 0 ] || { echo "no static programs under $build/bin (REMORA_BUILD_CUDA_PROGRAMS=ON)" >&2; exit 2; }

for p in "${programs[@]}"; do
  name=$(basename "$p")
  args=()
  case "$name" in app_static_device_info) args=(1) ;; app_static_graphs) args=(5) ;; esac
  REMORA_LOG=debug timeout -k 10 300 "$run" --backend "$backend" -- "$p" "${args[@]}" >"$out/$name.log" 2>&1
  echo "$name: exit $?"
done

echo
echo "table ids asked for (all programs):"
grep -ho 'cuGetExportTable([0-9a-f-]*)[^,]*' "$out"/*.log | sed 's/: not served$//' | sort | uniq -c | sort -rn
unserved_ids=$(grep -ho 'cuGetExportTable([0-9a-f-]*)[^(]*not a table Remora serves' "$out"/*.log |
               grep -o '([0-9a-f-]*)' | sort -u)
math_ids=$(grep -h 'a real NVIDIA library is loaded' "$out"/*.log | grep -o 'cuGetExportTable([0-9a-f-]*)' | sort -u)
slots=$(grep -ho 'export table [A-Z_]* slot [0-9]* called' "$out"/*.log | sort -u)
if [ -n "$unserved_ids$math_ids$slots" ]; then
  echo
  echo "FAIL: the static runtime asks for what Remora does not serve:"
  for id in $unserved_ids; do
    echo "  id $id, in: $(grep -l "cuGetExportTable$id" "$out"/*.log | xargs -n1 basename | tr '\n' ' ')"
  done
  [ -n "$math_ids" ] && echo "  NVIDIA math-library tables (a real library was loaded): $math_ids"
  [ -n "$slots" ] && echo "$slots" | sed 's/^/  /'
  exit 1
fi
echo
echo "PASS export_table_ids: every table and slot asked for by ${#programs[@]} static programs is served"

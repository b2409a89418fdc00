#!/usr/bin/env bash
# make-bundle.sh BUILD_DIR OUT_DIR: everything the GPU host needs to run Remora's GPU suite
# and remora-bench from a build made here - stripped binaries, the shim and the math client
# libraries (with their SONAME links), the PyTorch scripts, and the one shared
# library the shim needs that a GPU host may lack (libsodium), and with BUNDLE_ETCD=1 Debian's
# etcd binary (the pool's GPU test). Used with the device tool,
# whose machines have the CUDA driver and toolkit but no package registry.
set -euo pipefail
build=$(cd "$1" && pwd)
out=$2
if grep -q '^REMORA_GPU_SUITE:BOOL=OFF' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "make-bundle.sh: $build was configured with REMORA_GPU_SUITE=OFF (tools/test.sh does that without a GPU):" >&2
  echo "  cmake -B $build -DREMORA_GPU_SUITE=ON && cmake --build $build -j2, then bundle" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/deps" "$out/scripts"
for f in "$build"/bin/*; do
  [ -x "$f" ] && [ -f "$f" ] || continue
  # Not used on the GPU host (and the device tool carries 64 MiB at most): tests, the FUSE and
  # Slurm tools, the soak client, and the static twins of tests/apps (the GPU suite's own static
  # twins, gpu_static_*, stay).
  case "$(basename "$f")" in *_test|protocol_test|base_test|memmgr_test|transport_test|worker_test|rdma_*) continue ;;
    remorafs|remora-slurm|remora-chaos-client|app_static_*) continue ;; esac
  strip --strip-all -o "$out/bin/$(basename "$f")" "$f"
done
for l in "$build"/lib/libremora*.so "$build"/lib/libcuda.so.1 "$build"/lib/libnvidia-ml.so.1 "$build"/lib/libcupti.so.13; do
  strip --strip-debug -o "$out/lib/$(basename "$l")" "$l"
done
# The links named by the SONAMEs of the libraries Remora replaces (libcudart.so.13 -> libremora.so,
# libcublas.so.13 -> libremora-cublas.so, ...): remora-run preloads them by those names.
for s in "$build"/lib/*.so.*; do
  [ -L "$s" ] || continue
  case "$(readlink "$s")" in libremora*.so) ln -s "$(readlink "$s")" "$out/lib/$(basename "$s")" ;; esac
done
ln -s libcuda.so.1 "$out/lib/libcuda.so"
cp -L "$(ldconfig -p | awk '/libsodium.so.23 / {print $NF; exit}')" "$out/deps/"
# The pool's GPU test (scripts/pool-gpu.sh) needs etcd: Debian's is one binary needing only
# libc (21 MB), carried when asked for with BUNDLE_ETCD=1.
if [ "${BUNDLE_ETCD:-0}" = 1 ]; then
  etcd_bin=$(command -v etcd) || { echo "make-bundle.sh: BUNDLE_ETCD=1 but no etcd here (apt install etcd-server)" >&2; exit 1; }
  cp "$etcd_bin" "$out/bin/etcd"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
cp "$root"/tests/gpu/*.sh "$root/tools/gpu/gpu-session.sh" "$root/tools/gpu/tcp-loopback.py" "$root/tools/gpu/compare-bench.sh" \
  "$root/tools/gpu/cuda-samples.sh" "$root/tools/gpu/suite-tests.sh" "$root/tools/gpu/suite_compare.py" "$root"/tests/gpu/*.py "$root"/tests/gpu/python/*.sh "$root"/tests/gpu/python/*.py \
  "$out/scripts/"
mkdir -p "$out/scripts/torch"
cp "$root"/tests/gpu/torch/*.py "$root"/tests/gpu/torch/*.sh "$out/scripts/torch/"
mkdir -p "$out/scripts/cupy"
cp "$root"/tests/gpu/cupy/*.py "$root"/tests/gpu/cupy/*.sh "$out/scripts/cupy/"
# The suite's program list (tenancy-only programs such as pool_retention are not in it).
mkdir -p "$out/tests/gpu"
cp "$build/tests/gpu/gpu-programs.txt" "$out/tests/gpu/"
git -C "$root" rev-parse --short HEAD > "$out/COMMIT" 2>/dev/null || echo unknown > "$out/COMMIT"
du -sh "$out"

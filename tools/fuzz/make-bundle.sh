#!/usr/bin/env bash
# Packs fuzz targets of a -DREMORA_FUZZ=ON build for a machine with more cores (the long run
# of docs/ROBUSTNESS.md): OUT/bin.tar.xz holds the targets and remora-worker (fuzz_admin_rpc
# runs it) without their debug sections, OUT/lib the shared libraries they need that a
# machine without Remora's build dependencies may lack (the sanitizer runtime, libsodium).
# Grown corpora are not packed: put them in OUT/work/corpus/<target> (run.sh -w OUT/work).
#
#   tools/fuzz/make-bundle.sh BUILD OUT TARGET...
#
# There (from the repository's root, the bundle inside it):
#   tar xJf OUT/bin.tar.xz -C OUT && LD_LIBRARY_PATH=$PWD/OUT/lib \
#     tools/fuzz/run.sh -b OUT -n 10000000 -t 500 -p $(nproc) -w OUT/work TARGET...
# A finding's input comes back in OUT/work/artifacts; replay it against the unstripped
# build here (BUILD/bin/fuzz_<target> FILE) for a symbolised report.
set -euo pipefail
build=$(cd "${1:?BUILD}" && pwd)
out=${2:?OUT}
shift 2
[ $# -gt 0 ] || { echo "make-bundle.sh: name the targets" >&2; exit 2; }
rm -rf "$out/bin" "$out/bin.tar.xz" "$out/lib"
mkdir -p "$out/bin" "$out/lib"
files=("$build/bin/remora-worker")
for t in "$@"; do
  [ -x "$build/bin/fuzz_$t" ] || { echo "make-bundle.sh: no fuzz_$t in $build/bin" >&2; exit 2; }
  files+=("$build/bin/fuzz_$t")
done
for f in "${files[@]}"; do strip --strip-debug -o "$out/bin/$(basename "$f")" "$f"; done
# Every shared library outside the C and C++ runtimes that the programs load.
ldd "${files[@]}" | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libgcc_s.so.*|libstdc++.so.*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
tar cJf "$out/bin.tar.xz" -C "$out" bin
rm -rf "$out/bin"
du -sh "$out/bin.tar.xz" "$out/lib"

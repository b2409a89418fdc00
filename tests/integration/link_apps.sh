#!/bin/sh
# link_apps.sh FROM_BIN TO_BIN: links every CUDA test program (app_*, gpu_*) of a normal
# build's bin/ into a sanitizer build's bin/ (which has no nvcc programs of its own).
set -e
mkdir -p "$2"
for f in "$1"/app_* "$1"/gpu_*; do
  [ -f "$f" ] && [ -x "$f" ] && ln -sf "$f" "$2/"
done
exit 0

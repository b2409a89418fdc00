#!/usr/bin/env bash
# The libcuda.so.1 facade exports every function of the CUDA 13 driver ABI: each symbol of
# the toolkit's link stub and of NVIDIA's driver 580 libcuda.so.1 (recorded on the GPU machine
# in libcuda-580.exports), except the debugger interface (cudbg*); only driver symbols; SONAME
# libcuda.so.1; and it needs no CUDA or NVIDIA library at run time.
set -euo pipefail
facade=$1
recorded=$2
stub=${3:-}
fail() { echo "FAIL: $*"; exit 1; }

soname=$(readelf -d "$facade" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libcuda.so.1" ] || fail "SONAME is '$soname', expected libcuda.so.1"
if ldd "$facade" | grep -E 'libcuda\.|libcudart|libnvidia' >/dev/null; then fail "the facade depends on a CUDA library"; fi

ours=$(nm -D --defined-only "$facade" | awk '{print $3}' | sort -u)
echo "libcuda.so.1 facade exports $(echo "$ours" | wc -l) functions"
odd=$(echo "$ours" | grep -vE '^cu[A-Z]' || true)
[ -z "$odd" ] || fail "non-driver symbols exported: $odd"

theirs=$(grep -v '^cudbg' "$recorded" | sort -u)
missing=$(comm -13 <(echo "$ours") <(echo "$theirs"))
extra=$(comm -23 <(echo "$ours") <(echo "$theirs"))
[ -z "$missing" ] || fail "in NVIDIA's driver 580 but not exported: $missing"
[ -z "$extra" ] || fail "exported but not in NVIDIA's driver 580: $extra"
echo "identical to NVIDIA's libcuda.so.1 580 without cudbg* ($(echo "$theirs" | wc -l) functions)"

if [ -n "$stub" ] && [ -f "$stub" ]; then
  stubs=$(nm -D --defined-only "$stub" | awk '{print $3}' | sort -u)
  missing=$(comm -13 <(echo "$ours") <(echo "$stubs"))
  [ -z "$missing" ] || fail "in the toolkit's stub but not exported: $missing"
  echo "covers the toolkit's link stub ($(echo "$stubs" | wc -l) functions)"
fi
echo "PASS driver abi"

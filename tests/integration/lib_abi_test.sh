#!/usr/bin/env bash
# lib_abi_test.sh OURS SONAME DESCRIBED [NVIDIA [NODE]]: one of Remora's math client libraries
# (libremora-cublas.so, ...) has the SONAME of the library it replaces, exports exactly the
# functions its description lists (the generated export list), all under that SONAME's
# version node (NODE "Base": unversioned, as NVIDIA's libnccl.so.2), nothing else, and needs
# no NVIDIA library at run time; and where NVIDIA's library is installed, exports exactly what
# it exports.
set -euo pipefail
ours=$1
want_soname=$2
described=$3
theirs_lib=${4:-}
node=${5:-$want_soname}
fail() { echo "FAIL: $*"; exit 1; }

soname=$(readelf -d "$ours" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "$want_soname" ] || fail "SONAME is '$soname', expected $want_soname"
defined=$(objdump -T "$ours" | grep -E '^[0-9a-f]{16} ' | grep -v '\*UND\*' || true)
others=$(echo "$defined" | grep -v " $node " || true)
[ -z "$others" ] || fail "symbols exported outside the $node version node:
$others"
ours_list=$(echo "$defined" | awk '{print $NF}' | grep -vx "$want_soname" | sort)
echo "$(basename "$ours") exports $(echo "$ours_list" | wc -l) functions under $node"
if ldd "$ours" | grep -E 'libcuda\.|libcudart|libcublas|libcudnn|libcufft|libcurand|libcusolver|libcusparse|libnccl' >/dev/null; then
  fail "$(basename "$ours") depends on an NVIDIA library: $(ldd "$ours" | grep -E 'libcu')"
fi
listed=$(sort "$described")
missing=$(comm -13 <(echo "$ours_list") <(echo "$listed"))
extra=$(comm -23 <(echo "$ours_list") <(echo "$listed"))
[ -z "$missing" ] || fail "described but not exported: $missing"
[ -z "$extra" ] || fail "exported but not described: $extra"
echo "identical to its description ($(echo "$listed" | wc -l) functions)"
if [ -n "$theirs_lib" ] && [ -f "$theirs_lib" ]; then
  theirs=$(objdump -T "$theirs_lib" | grep " DF .text" | grep " $node " | awk '{print $NF}' | grep -v '^_Z' | sort)
  missing=$(comm -13 <(echo "$ours_list") <(echo "$theirs"))
  extra=$(comm -23 <(echo "$ours_list") <(echo "$theirs"))
  [ -z "$missing" ] || fail "missing from $(basename "$ours"): $missing"
  [ -z "$extra" ] || fail "not in NVIDIA's $want_soname: $extra"
  echo "identical to the C functions of $theirs_lib ($(echo "$theirs" | wc -l))"
else
  echo "NVIDIA's $want_soname not found: compared against the description only"
fi
echo "PASS abi $want_soname"

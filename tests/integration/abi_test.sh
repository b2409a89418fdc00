#!/usr/bin/env bash
# libremora.so exports exactly the functions its description lists (protocol/api/cudart.api)
# and exactly those of NVIDIA's libcudart.so.13, all under the libcudart.so.13 version node,
# nothing else, with SONAME libcudart.so.13; and it needs no CUDA library at run time.
set -euo pipefail
shim=$1
described=$2
cudart=${3:-}
fail() { echo "FAIL: $*"; exit 1; }

soname=$(readelf -d "$shim" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libcudart.so.13" ] || fail "SONAME is '$soname', expected libcudart.so.13"

defined=$(objdump -T "$shim" | awk '$2 != "*UND*" && $0 !~ /\*UND\*/' | grep -E '^[0-9a-f]{16} ' || true)
others=$(echo "$defined" | grep -v ' libcudart.so.13 ' || true)
[ -z "$others" ] || fail "symbols exported outside the libcudart.so.13 version node:
$others"
ours=$(echo "$defined" | awk '{print $NF}' | grep -v '^libcudart.so.13$' | sort)
count=$(echo "$ours" | wc -l)
echo "libremora.so exports $count functions under libcudart.so.13"
echo "$ours" | grep -qvE '^(cuda|__cuda)' && fail "non-CUDA symbols exported: $(echo "$ours" | grep -vE '^(cuda|__cuda)')"

if ldd "$shim" | grep -E 'libcuda|libcudart' >/dev/null; then fail "libremora.so depends on a CUDA library"; fi

listed=$(sort "$described")
d_missing=$(comm -13 <(echo "$ours") <(echo "$listed"))
d_extra=$(comm -23 <(echo "$ours") <(echo "$listed"))
[ -z "$d_missing" ] || fail "described but not exported: $d_missing"
[ -z "$d_extra" ] || fail "exported but not described: $d_extra"
echo "identical to protocol/api/cudart.api ($(echo "$listed" | wc -l) functions)"

if [ -n "$cudart" ] && [ -f "$cudart" ]; then
  theirs=$(objdump -T "$cudart" | grep ' libcudart.so.13 ' | awk '$0 !~ /\*UND\*/ {print $NF}' | grep -v '^libcudart.so.13$' | sort)
  missing=$(comm -13 <(echo "$ours") <(echo "$theirs"))
  extra=$(comm -23 <(echo "$ours") <(echo "$theirs"))
  [ -z "$missing" ] || fail "missing from libremora.so: $missing"
  [ -z "$extra" ] || fail "not in NVIDIA's libcudart.so.13: $extra"
  echo "identical to the export list of $cudart ($(echo "$theirs" | wc -l) functions)"
else
  echo "NVIDIA's libcudart.so.13 not found: compared against the description only"
fi
echo "PASS abi"

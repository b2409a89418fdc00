#!/usr/bin/env bash
# exit_calls_test.sh REMORA_RUN APP: CUDA and cuBLAS calls made from a static destructor after
# main() returned (tests/apps/exit_calls.cu) work through the shim against a host-emulated
# server, and - under valgrind's memcheck - touch no freed or unallocated memory of the
# process: glibc destroys the main thread's thread_local objects before such destructors run,
# and the shim once kept its per-thread encoder there (PyTorch's linalg path then corrupted
# its heap at exit). Without valgrind it still checks the results, and says valgrind is missing.
set -euo pipefail
run=$1 app=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if command -v valgrind >/dev/null; then
  # Only the application runs under valgrind (remora-run's private server does not).
  rc=0
  "$run" --backend host -- valgrind -q --error-exitcode=97 --trace-children=no "$app" >"$out" 2>&1 || rc=$?
  cat "$out"
  [ "$rc" = 0 ] || { echo "FAIL exit_calls_test: exit status $rc (97: valgrind found errors)"; exit 1; }
  grep -q "^PASS exit_calls:" "$out" || { echo "FAIL exit_calls_test: no PASS line"; exit 1; }
  if grep -q "Invalid \(read\|write\)\|free'd" "$out"; then echo "FAIL exit_calls_test: valgrind found invalid accesses"; exit 1; fi
  echo "PASS exit_calls_test: calls at exit work and valgrind found no invalid access"
else
  "$run" --backend host -- "$app" | tee "$out"
  grep -q "^PASS exit_calls:" "$out"
  echo "PASS exit_calls_test (valgrind is not installed: memory accesses were not checked)"
fi

#!/bin/sh
# run-gpu-test.sh MODE PROGRAM [ARGS...]
#   MODE native: run PROGRAM directly.
#   MODE shm|tcp: run it under the shim: $REMORA_RUN --transport MODE --backend cuda -- PROGRAM ARGS
# Without an NVIDIA GPU on this machine: print a SKIP line and exit 77 (CTest SKIP_RETURN_CODE).
# The program's own exit status is passed through (0 pass, 1 fail, 77 skip).
set -u

usage() {
  echo "usage: $0 native|shm|tcp PROGRAM [ARGS...]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
mode=$1
shift

have_gpu() {
  [ -e /dev/nvidia0 ] && return 0
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && return 0
  return 1
}

if ! have_gpu; then
  echo "SKIP: no NVIDIA GPU on this machine (gpu tests run on the GPU host)"
  exit 77
fi

case "$mode" in
  native)
    exec "$@"
    ;;
  shm|tcp)
    if [ -z "${REMORA_RUN:-}" ]; then
      echo "FAIL: REMORA_RUN (path of remora-run) is not set for mode $mode" >&2
      exit 1
    fi
    if [ ! -x "$REMORA_RUN" ]; then
      echo "FAIL: remora-run not found or not executable at $REMORA_RUN" >&2
      exit 1
    fi
    # The remoted program must touch no local GPU: the shim checks at exit (98 otherwise).
    REMORA_ASSERT_NO_LOCAL_GPU=1 exec "$REMORA_RUN" --transport "$mode" --backend cuda -- "$@"
    ;;
  *)
    usage
    ;;
esac

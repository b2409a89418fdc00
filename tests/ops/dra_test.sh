#!/usr/bin/env bash
# ops.dra: Remora's Kubernetes DRA kubelet plugin (tools/k8s) against a real pool: an etcd
# member and two host-backend pool servers of one GPU each. No Kubernetes cluster can run here:
# a local HTTP server answers the claim as the API would (tools/k8s/tests/prepare_on_pool.py).
# Usage: dra_test.sh BIN_DIR SHIM PYTHON DRA_GEN_DIR
source "$(dirname "$0")/lib.sh"
BIN=$(realpath "${1:?BIN_DIR}") SHIM=$(realpath "${2:?SHIM}") PY=${3:?PYTHON} GEN=$(realpath "${4:?DRA_GEN_DIR}")
ops_tmpdir
T=$OPS_TMP
ops_etcd_cluster 1
ops_pool_server s1 --host-gpus 1 --host-gpu-memory 1GiB
ops_pool_server s2 --host-gpus 1 --host-gpu-memory 1GiB
POOL="pool://${POOL_URL[s1]#tcp://},${POOL_URL[s2]#tcp://}"
mkdir -p "$T/dra"
REMORA_DRA_GEN=$GEN "$PY" "$(dirname "$0")/../../tools/k8s/tests/prepare_on_pool.py" "$BIN" "$SHIM" "$POOL" \
  "$T/s1/state" "$T/dra" || ops_fail "the DRA plugin on the pool"
ops_pass "DRA kubelet plugin on a real pool"

# Shared helpers of the operations tests (tests/ops/*_test.sh): real daemons started in a
# private temporary directory, torn down in reverse order on any exit. Source it; it sets
# `set -euo pipefail`. Exit status 77 means "skipped" (CTest's SKIP_RETURN_CODE) and is
# always preceded by a line saying why.

set -euo pipefail

OPS_TMP=""
_ops_cleanups=()

ops_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
ops_skip() { echo "SKIPPED: $*"; exit 77; }
ops_fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ops_pass() { ops_log "PASS: $*"; }

# Runs "$@" at exit, most recent first.
ops_on_exit() { _ops_cleanups+=("$*"); }
_ops_run_cleanups() {
  local rc=$?
  set +e
  for ((i = ${#_ops_cleanups[@]} - 1; i >= 0; i--)); do eval "${_ops_cleanups[$i]}" >/dev/null 2>&1; done
  if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ -n "$OPS_TMP" ] && [ -d "$OPS_TMP" ]; then
    echo "---- logs (the test failed) ----"
    for f in "$OPS_TMP"/*.log "$OPS_TMP"/log/*.log; do
      [ -f "$f" ] || continue
      echo "== $f (last 40 lines)"
      tail -n 40 "$f"
    done
  fi
  [ -n "$OPS_TMP" ] && rm -rf "$OPS_TMP"
  exit "$rc"
}
trap _ops_run_cleanups EXIT

ops_need_root() { [ "$(id -u)" = 0 ] || ops_skip "$1 needs root (it starts system daemons)"; }
ops_need_cmd() {
  local c
  for c in "$@"; do command -v "$c" >/dev/null 2>&1 || ops_skip "'$c' is not installed (tools/install-deps.sh installs it)"; done
}

# A private directory every user can traverse (jobs may run as another user).
ops_tmpdir() {
  OPS_TMP=$(mktemp -d /tmp/remora-ops.XXXXXX)
  chmod 755 "$OPS_TMP"
}

# A TCP port on 127.0.0.1 that was free a moment ago.
ops_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# ops_wait SECONDS DESCRIPTION CMD...: polls CMD every 0.2 s until it succeeds.
ops_wait() {
  local secs=$1 what=$2
  shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || ops_fail "timed out after ${secs}s waiting for $what"
    sleep 0.2
  done
}

# ops_kill_pidfile FILE: SIGTERM the process whose pid FILE holds (one this test started),
# then SIGKILL after 5 s.
ops_kill_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

# ops_json_tenant_field JSON NAME FIELD: a field of tenant NAME in `remoractl --json tenant list`.
ops_json_tenant_field() {
  python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
tenants = doc["tenants"] if isinstance(doc, dict) else doc
for t in tenants:
    if t["name"] == sys.argv[2]:
        v = t.get(sys.argv[3])
        print(json.dumps(v) if isinstance(v, (list, dict)) else ("" if v is None else v))
        sys.exit(0)
sys.exit(1)' "$1" "$2" "$3"
}

# ---- a pool's store: etcd on loopback (tests/ops/pool_test.sh, slurm_test.sh pool) -----------
# ops_etcd_cluster N: starts an N-member etcd cluster on 127.0.0.1 under $OPS_TMP/etcd (fast
# elections: 50 ms heartbeats, 500 ms election timeout) and waits until every member is
# healthy. Sets ETCD_ENDPOINTS (their client URLs, comma-separated, member 1 first) and
# ETCD_URL[i], and stops the members at exit. Skips (77) without Debian's etcd-server.
ops_etcd_cluster() {
  local n=$1 i cluster="" peer
  ops_need_cmd etcd etcdctl
  mkdir -p "$OPS_TMP/etcd"
  ETCD_URL=()
  local -a peers=()
  for i in $(seq 1 "$n"); do
    ETCD_URL[i]="http://127.0.0.1:$(ops_free_port)"
    peers[i]="http://127.0.0.1:$(ops_free_port)"
    cluster+="${cluster:+,}e$i=${peers[i]}"
  done
  for i in $(seq 1 "$n"); do
    etcd --name "e$i" --data-dir "$OPS_TMP/etcd/e$i" --listen-client-urls "${ETCD_URL[i]}" \
      --advertise-client-urls "${ETCD_URL[i]}" --listen-peer-urls "${peers[i]}" \
      --initial-advertise-peer-urls "${peers[i]}" --initial-cluster "$cluster" --initial-cluster-state new \
      --initial-cluster-token remora-ops --heartbeat-interval 50 --election-timeout 500 \
      >"$OPS_TMP/etcd-e$i.log" 2>&1 &
    echo $! >"$OPS_TMP/etcd-e$i.pid"
    ops_on_exit ops_kill_pidfile "$OPS_TMP/etcd-e$i.pid"
  done
  ETCD_ENDPOINTS=$(IFS=,; echo "${ETCD_URL[*]:1}")
  ops_wait 30 "the etcd cluster to be healthy" etcdctl --endpoints="$ETCD_ENDPOINTS" endpoint health
}

# ops_pool_server NAME [ARGS...]: a host-backend remora-server of the pool (--pool
# $ETCD_ENDPOINTS, --pool-name NAME) in $OPS_TMP/NAME (state dir, ready file, log
# $OPS_TMP/NAME.log, pid file $OPS_TMP/NAME.pid), listening on tcp://127.0.0.1:0; waits until
# ready and sets POOL_URL[NAME] to its tcp:// URL. ARGS are extra server options.
declare -A POOL_URL
ops_pool_server() {
  local name=$1
  shift
  mkdir -p "$OPS_TMP/$name"
  rm -f "$OPS_TMP/$name/ready"
  "$BIN/remora-server" --backend host --state-dir "$OPS_TMP/$name/state" --listen tcp://127.0.0.1:0 \
    --ready-file "$OPS_TMP/$name/ready" --pool "$ETCD_ENDPOINTS" --pool-name "$name" "$@" \
    >>"$OPS_TMP/$name.log" 2>&1 &
  echo $! >"$OPS_TMP/$name.pid"
  ops_on_exit ops_kill_pidfile "$OPS_TMP/$name.pid"
  ops_wait 30 "remora-server $name to be ready" test -s "$OPS_TMP/$name/ready"
  POOL_URL[$name]=$(grep '^tcp://' "$OPS_TMP/$name/ready")
}

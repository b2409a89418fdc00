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

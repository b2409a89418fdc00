#!/usr/bin/env bash
# ops.prometheus: Debian's real Prometheus server scrapes a running remora-server's /metrics
# while two tenants' clients work, and PromQL answers with what remoractl shows.
#
# Starts, in a private directory: remora-server (host backend, 2 GPUs, token auth,
# --metrics-listen on a free 127.0.0.1 port with --metrics-token-file), clients through the
# shim (app_hold_memory for alice over shm and for bob over tcp; app_copy_loop for bob), and
# `prometheus` scraping every second with the bearer token from `credentials_file`. Asserts:
#   0. a scrape without the token shows the server's series and no tenant or session series
#      (docs/SECURITY.md, N9); one with a wrong token is refused (401);
#   1. `promtool check metrics` accepts the endpoint's text (no errors, no lint findings);
#   2. Prometheus reports the target up;
#   3. the session counters move: bob's copy loop has calls and bytes in both directions;
#   4. sum(remora_tenant_memory_used_bytes{tenant="alice"}) and {tenant="bob"} equal
#      memory_used of `remoractl --json tenant list`, the limit series equals alice's limit,
#      and sessions, attachments and GPU use agree;
#   5. every query of docs/grafana-remora.json is valid PromQL against the scraped data;
#   6. after the clients end, remora_sessions goes back to 0 and tenants' memory to 0.
# Usage: prometheus_test.sh BIN_DIR SHIM
source "$(dirname "$0")/lib.sh"
BIN=$(realpath "${1:?BIN_DIR}") SHIM=$(realpath "${2:?SHIM}")
ops_need_cmd prometheus promtool curl python3

ops_tmpdir
T=$OPS_TMP
MPORT=$(ops_free_port)
PPORT=$(ops_free_port)

ops_log "starting remora-server (host backend, metrics on 127.0.0.1:$MPORT)"
"$BIN/remora-server" --backend host --host-gpus 2 --host-gpu-memory 2GiB --state-dir "$T/state" \
  --listen "shm://$T/remora.sock" --listen tcp://127.0.0.1:0 --ready-file "$T/ready" \
  --metrics-listen "tcp://127.0.0.1:$MPORT" --metrics-token-file "$T/metrics.token" >"$T/server.log" 2>&1 &
echo $! >"$T/server.pid"
ops_on_exit ops_kill_pidfile "$T/server.pid"
ops_wait 30 "remora-server to be ready" test -s "$T/ready"
TCP_URL=$(grep '^tcp://' "$T/ready")
CTL=("$BIN/remoractl" --state-dir "$T/state")

token() { "${CTL[@]}" --json tenant create "$@" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'; }
ALICE=$(token alice --memory 512MiB --gpus 0)
BOB=$(token bob --gpus 0,1)

ops_log "starting clients"
client() {  # NAME TOKEN URL PROGRAM ARGS...
  local name=$1 tok=$2 url=$3
  shift 3
  REMORA_SERVER=$url REMORA_TOKEN=$tok LD_PRELOAD=$SHIM "$@" >"$T/$name.log" 2>&1 &
  echo $! >"$T/$name.pid"
  ops_on_exit ops_kill_pidfile "$T/$name.pid"
}
client alice "$ALICE" "shm://$T/remora.sock" "$BIN/app_hold_memory" $((96 << 20)) 600
client bob-hold "$BOB" "$TCP_URL" "$BIN/app_hold_memory" $((32 << 20)) 600
client bob-copy "$BOB" "$TCP_URL" "$BIN/app_copy_loop"
ops_wait 30 "the clients to allocate" grep -q holding "$T/alice.log"
ops_wait 30 "the clients to allocate" grep -q holding "$T/bob-hold.log"
ops_wait 30 "the copy loop to run" grep -q copying "$T/bob-copy.log"

ops_log "scrapes without the token"
curl -fsS "http://127.0.0.1:$MPORT/metrics" >"$T/anonymous.txt"
grep -q '^remora_build_info' "$T/anonymous.txt" || ops_fail "an unauthenticated scrape lacks the server's series"
if grep -q 'remora_tenant_\|remora_session_info\|alice' "$T/anonymous.txt"; then
  ops_fail "an unauthenticated scrape shows tenants or sessions: $(grep -m3 'tenant\|session_info' "$T/anonymous.txt")"
fi
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong-token-wrong-token' "http://127.0.0.1:$MPORT/metrics")
[ "$code" = 401 ] || ops_fail "a wrong bearer token got HTTP $code"
ops_pass "without the token: server and GPU series only; a wrong token: 401"

ops_log "promtool check metrics"
curl -fsS -H "Authorization: Bearer $(cat "$T/metrics.token")" "http://127.0.0.1:$MPORT/metrics" >"$T/metrics.txt"
promtool check metrics <"$T/metrics.txt" >"$T/promtool.out" 2>&1 || { cat "$T/promtool.out"; ops_fail "promtool check metrics failed"; }
[ ! -s "$T/promtool.out" ] || { cat "$T/promtool.out"; ops_fail "promtool check metrics reported findings"; }
ops_pass "promtool check metrics: no findings ($(grep -vc '^#' "$T/metrics.txt") samples)"

ops_log "starting prometheus (127.0.0.1:$PPORT, scraping every second)"
cat >"$T/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: remora
    authorization:
      credentials_file: $T/metrics.token
    static_configs:
      - targets: ["127.0.0.1:$MPORT"]
EOF
promtool check config "$T/prometheus.yml" >/dev/null
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
  --web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$T/prometheus.log" 2>&1 &
echo $! >"$T/prometheus.pid"
ops_on_exit ops_kill_pidfile "$T/prometheus.pid"
ops_wait 60 "prometheus to be ready" curl -fsS "http://127.0.0.1:$PPORT/-/ready"

# query EXPR: the single value of an instant query ("" when there is none).
query() {
  promtool query instant -o json "http://127.0.0.1:$PPORT" "$1" 2>/dev/null |
    python3 -c 'import json,sys
r = json.load(sys.stdin)
print(r[0]["value"][1] if r else "")'
}
# expect_query EXPR VALUE: waits (scrapes are asynchronous) until EXPR evaluates to VALUE.
expect_query() {
  local expr=$1 want=$2 got="" end=$((SECONDS + 30))
  while [ $SECONDS -lt $end ]; do
    got=$(query "$expr" || true)
    [ "$got" = "$want" ] && { ops_pass "$expr = $want"; return 0; }
    sleep 0.5
  done
  ops_fail "$expr is '$got', expected '$want'"
}
expect_query 'up{job="remora"}' 1

# The copy loop's session counters move (then it is stopped: it keeps a core busy).
expect_query 'sum(remora_session_calls_total{tenant="bob"}) > bool 10' 1
expect_query 'sum(remora_session_transferred_bytes_total{tenant="bob",direction="host_to_device"}) > bool 0' 1
expect_query 'sum(remora_session_transferred_bytes_total{tenant="bob",direction="device_to_host"}) > bool 0' 1
ops_kill_pidfile "$T/bob-copy.pid"
expect_query 'remora_tenant_sessions{tenant="bob"}' 1

tenants=$("${CTL[@]}" --json tenant list)
alice_used=$(ops_json_tenant_field "$tenants" alice memory_used)
bob_used=$(ops_json_tenant_field "$tenants" bob memory_used)
alice_limit=$(ops_json_tenant_field "$tenants" alice memory_limit)
ops_log "remoractl: alice uses $alice_used of $alice_limit, bob uses $bob_used"
[ "$alice_used" = $((96 << 20)) ] || ops_fail "remoractl shows alice using '$alice_used'"
[ "$bob_used" = $((32 << 20)) ] || ops_fail "remoractl shows bob using '$bob_used'"
expect_query 'sum(remora_tenant_memory_used_bytes{tenant="alice"})' "$alice_used"
expect_query 'sum(remora_tenant_memory_used_bytes{tenant="bob"})' "$bob_used"
expect_query 'remora_tenant_memory_limit_bytes{tenant="alice",gpu="0"}' "$alice_limit"
expect_query 'count(remora_tenant_gpu_attached{tenant="bob"})' 2
expect_query 'sum(remora_tenant_sessions)' 2
expect_query 'count(remora_session_info{tenant="alice",transport="shm",data_path="shared-memory",program="app_hold_memory"})' 1
expect_query 'sum(remora_gpu_memory_used_bytes)' $((alice_used + bob_used))

# Every query of the Grafana dashboard is valid PromQL against the real data, and the main
# ones have data.
DASHBOARD=$(dirname "$0")/../../docs/grafana-remora.json
python3 -c 'import json,sys
for p in json.load(open(sys.argv[1]))["panels"]:
    for t in p.get("targets", []): print(t["expr"].replace("$instance", ".*").replace("$__rate_interval", "10s"))' \
  "$DASHBOARD" >"$T/dashboard.queries"
nq=0
while IFS= read -r q; do
  promtool query instant "http://127.0.0.1:$PPORT" "$q" >"$T/q.out" 2>&1 || { cat "$T/q.out"; ops_fail "dashboard query fails: $q"; }
  nq=$((nq + 1))
done <"$T/dashboard.queries"
expect_query 'count(sum by (tenant) (remora_tenant_memory_used_bytes{instance=~".*"}))' 2
ops_pass "the Grafana dashboard's $nq queries run against Prometheus"

ops_log "ending the clients"
for c in alice bob-hold bob-copy; do ops_kill_pidfile "$T/$c.pid"; done
expect_query 'remora_sessions' 0
expect_query 'sum(remora_tenant_memory_used_bytes)' 0
expect_query 'sum(remora_gpu_memory_used_bytes)' 0
ops_pass "Prometheus scraped remora-server; PromQL agrees with remoractl"

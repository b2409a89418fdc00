#!/usr/bin/env bash
# ops.pool: a pool of servers whose state lives in etcd (docs/ARCHITECTURE.md "A pool of
# servers"), for real: a three-member etcd cluster on loopback (Debian's etcd-server) and three
# host-backend remora-server processes started with --pool (1 emulated GPU each, leases of 3 s).
#
# Asserts:
#   1. a tenant created once (through s1) is served by all three: each lists it, and a client
#      of each server (its own URL, the tenant's token) runs on its GPU there;
#   2. a client given only the pool's address (REMORA_SERVER=pool://..., and remora-run --pool
#      --gpus 2) gets the tenant's two GPUs, which placement put on two different servers;
#   3. the pool-wide quota holds while the tenant allocates on all three at once: random
#      allocation storms, then three clients filling it; the sum of the three ledgers, sampled
#      all along, and the store's shares never pass the limit, and the fill reaches most of it;
#   4. a server killed (SIGKILL) gives its shares back within its lease (another server's client
#      then gets them) and its GPU is shown as gone;
#   5. an etcd member killed changes nothing: tenants are created, placed and served, quotas
#      borrowed, no server loses its lease.
# Usage: pool_test.sh BIN_DIR SHIM
source "$(dirname "$0")/lib.sh"
BIN=$(realpath "${1:?BIN_DIR}") SHIM=$(realpath "${2:?SHIM}")
ops_need_cmd python3
ops_tmpdir
T=$OPS_TMP
MiB=$((1 << 20))
LIMIT=$((96 * MiB))

ops_etcd_cluster 3
ops_log "etcd: $ETCD_ENDPOINTS"
for s in s1 s2 s3; do ops_pool_server "$s" --host-gpus 1 --host-gpu-memory 1GiB --pool-ttl 3; done
POOL="pool://${POOL_URL[s1]#tcp://},${POOL_URL[s2]#tcp://},${POOL_URL[s3]#tcp://}"
ctl() {
  local s=$1
  shift
  "$BIN/remoractl" -D "$T/$s/state" "$@"
}
# A field of `remoractl --json pool status|tenants` through python: pyq SERVER EXPR ARGS...
pyq() {
  local s=$1 what=$2 expr=$3
  shift 3
  ctl "$s" --json pool "$what" | python3 -c "import json,sys; d=json.load(sys.stdin); a=sys.argv[1:]; print($expr)" "$@"
}
live_servers() { [ "$(pyq "$1" status 'len(d["servers"])')" = "$2" ]; }
ops_wait 20 "three live servers in the pool" live_servers s1 3
token_of() { python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'; }
# run SERVER_ADDRESS TOKEN PROGRAM ARGS...: a client through the shim.
run() {
  local addr=$1 tok=$2
  shift 2
  REMORA_SERVER=$addr REMORA_TOKEN=$tok LD_PRELOAD=$SHIM timeout 60 "$@"
}

# ---- 1. one tenant, served by every server ---------------------------------------------------
ALICE=$(ctl s1 --json tenant create alice --pool-memory 96MiB | token_of)
ctl s1 pool attach alice --gpus 3 | tee "$T/attach-alice.txt"
for s in s1 s2 s3; do
  [ "$(ctl "$s" --json tenant list | python3 -c 'import json,sys; print(",".join(t["name"] for t in json.load(sys.stdin)))')" = alice ] ||
    ops_fail "server $s does not list tenant alice"
  out=$(run "${POOL_URL[$s]}" "$ALICE" "$BIN/app_device_info" 1) || ops_fail "alice's client of $s failed: $out"
  grep -qx "PASS device_info" <<<"$out" || ops_fail "alice's client of $s: $out"
done
ops_pass "tenant alice, created once through s1, is served by s1, s2 and s3"

# ---- 2. a client of the pool gets GPUs on two servers ----------------------------------------
BOB=$(ctl s2 --json tenant create bob --memory 128MiB | token_of)
placed=$(ctl s2 --json pool attach bob --gpus 2)
servers=$(python3 -c 'import json,sys; print(" ".join(sorted({a["server"] for a in json.loads(sys.argv[1])})))' "$placed")
[ "$(wc -w <<<"$servers")" = 2 ] || ops_fail "bob's 2 GPUs should be on 2 servers: $placed"
out=$(run "$POOL" "$BOB" "$BIN/app_device_info" 2) || ops_fail "bob's pool client failed: $out"
grep -qx "PASS device_info" <<<"$out" || ops_fail "bob's pool client: $out"
grep -q "^device 1: .*128 MiB" <<<"$out" || ops_fail "bob's second device does not show his 128 MiB limit: $out"
for s in $servers; do
  grep -q "session [0-9]* started: tenant 'bob'" "$T/$s.log" || ops_fail "no session of bob on $s"
done
echo "$BOB" >"$T/bob.token"
chmod 600 "$T/bob.token"
out=$("$BIN/remora-run" --pool "${POOL#pool://}" --gpus 2 --token-file "$T/bob.token" -- "$BIN/app_device_info" 2 2>&1) ||
  ops_fail "remora-run --pool --gpus 2 failed: $out"
grep -qx "PASS device_info" <<<"$out" || ops_fail "remora-run --pool: $out"
if out=$("$BIN/remora-run" --pool "${POOL#pool://}" --gpus 3 --token-file "$T/bob.token" -- "$BIN/app_device_info" 2 2>&1); then
  ops_fail "remora-run --pool --gpus 3 ran although bob has 2 GPUs: $out"
fi
ops_pass "a client given the pool's address gets bob's GPUs on $servers (REMORA_SERVER=pool://, remora-run --pool --gpus 2)"

# ---- 3. the pool-wide quota, allocating on all three at once ---------------------------------
# The sum of alice's memory in the three ledgers, and the store's shares of her limit.
ledgers() {
  local sum=0 s u
  for s in s1 s2 s3; do
    u=$(ctl "$s" --json tenant list 2>/dev/null | python3 -c 'import json,sys
for t in json.load(sys.stdin):
    if t["name"] == "alice": print(t["memory_used"])' 2>/dev/null) || u=0
    sum=$((sum + ${u:-0}))
  done
  echo "$sum"
}
# sample FILE: until FILE.stop exists, one line "LEDGERS SHARES" per round (a few a second).
sample() {
  python3 - "$1" "$BIN/remoractl" "$T" <<'PY'
import json, os, subprocess, sys
out, ctl, t = sys.argv[1:4]
def q(server, *args):
    return json.loads(subprocess.run([ctl, "-D", f"{t}/{server}/state", "--json", *args], capture_output=True,
                                     text=True, check=True).stdout)
with open(out, "a") as f:
    while not os.path.exists(out + ".stop"):
        used = sum(x["memory_used"] for s in ("s1", "s2", "s3") for x in q(s, "tenant", "list") if x["name"] == "alice")
        shares = sum(x["shares"] for x in q("s1", "pool", "tenants") if x["name"] == "alice")
        f.write(f"{used} {shares}\n")
        f.flush()
PY
}
# check_samples FILE WHAT ledgers|shares: every sample within the limit. The store's shares are
# read at one revision; the three ledgers one after the other, which sums a true state only
# while no server frees: while storms free and the shares move between servers, a sum read
# across servers may count memory twice, so only the shares are checked then (each server's
# ledger enforces its share: docs/ARCHITECTURE.md "Pool-wide quotas").
check_samples() {
  local f=$1 what=$2 which=$3
  python3 - "$f" "$LIMIT" "$what" "$which" <<'PY' || ops_fail "the pool-wide limit was passed ($2)"
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if len(l.split()) == 2]
limit = int(sys.argv[2])
over = [r for r in rows if r[1] > limit or (sys.argv[4] == "ledgers" and r[0] > limit)]
print(f"{sys.argv[3]}: {len(rows)} samples, ledgers at most {max(r[0] for r in rows) >> 20} MiB, shares at most "
      f"{max(r[1] for r in rows) >> 20} MiB, limit {limit >> 20} MiB")
sys.exit(1 if over or not rows else 0)
PY
}
sample "$T/storm.samples" &
SAMPLER=$!
for s in s1 s2 s3; do
  run "${POOL_URL[$s]}" "$ALICE" "$BIN/app_alloc_storm" "$RANDOM" 3000 $((12 * MiB)) >"$T/storm-$s.out" 2>&1 &
  eval "STORM_$s=$!"
done
for s in s1 s2 s3; do
  pid_var="STORM_$s"
  wait "${!pid_var}" || ops_fail "alloc_storm on $s failed: $(tail -3 "$T/storm-$s.out")"
  grep -q "^PASS alloc_storm" "$T/storm-$s.out" || ops_fail "alloc_storm on $s: $(tail -3 "$T/storm-$s.out")"
done
touch "$T/storm.samples.stop"
wait "$SAMPLER"
check_samples "$T/storm.samples" "storms on s1, s2 and s3" shares
grep -h "^PASS alloc_storm" "$T"/storm-*.out
grep -q "refused [1-9]" "$T"/storm-*.out || ops_fail "no storm was ever refused: the limit was not reached"
[ "$(wc -l <"$T/storm.samples")" -ge 5 ] || ops_fail "too few samples during the storms to say anything"

# Three clients fill her limit at once, 4 MiB at a time, and hold what they got. Nothing is
# freed meanwhile, so the ledgers' sum once all hold is the most it ever was.
for s in s1 s2 s3; do
  mkfifo "$T/fill-$s.in"
  run "${POOL_URL[$s]}" "$ALICE" "$BIN/app_fill_hold" $((4 * MiB)) <"$T/fill-$s.in" >"$T/fill-$s.out" 2>&1 &
  eval "FILL_$s=$!"
  eval "exec {FD_$s}>\"$T/fill-$s.in\""
done
for s in s1 s2 s3; do ops_wait 60 "the fill on $s" grep -q '^held' "$T/fill-$s.out"; done
held=0
for s in s1 s2 s3; do held=$((held + $(awk '/^held/{print $2}' "$T/fill-$s.out"))); done
total=$(ledgers)
ops_log "the three clients hold $((held / MiB)) MiB; the ledgers say $((total / MiB)) MiB; limit $((LIMIT / MiB)) MiB"
[ "$total" = "$held" ] || ops_fail "the ledgers ($total) disagree with what the clients hold ($held)"
[ "$total" -le "$LIMIT" ] || ops_fail "alice holds $total bytes across the pool, above her limit $LIMIT"
[ "$total" -ge $((LIMIT - 3 * (4 + 6) * MiB)) ] || ops_fail "the fill reached only $total of $LIMIT bytes"
ops_pass "pool-wide quota: never above $((LIMIT / MiB)) MiB in the ledgers or the store; the fill reached $((total / MiB)) MiB"

# ---- 4. a server killed: its shares return after its lease, its GPU is gone -------------------
for v in FD_s1 FD_s2 FD_s3; do eval "exec {$v}>&-"; done
wait "$FILL_s1" "$FILL_s2" "$FILL_s3" || ops_fail "a fill client failed after releasing"
# With no session of alice left, every server returns what it held of her limit (the agent's
# return round, every second): wait for that, or s3's hold below could find the limit still
# lent to the fills' servers.
alice_shares() { pyq s1 tenants 'sum(t["shares"] for t in d if t["name"] == "alice")'; }
shares_returned() { [ "$(alice_shares)" = 0 ]; }
ops_wait 15 "the fills' shares to return to the pool" shares_returned
# s3 holds 40 MiB of alice's limit, a client of s1 fills the rest.
S3_HELD=$((40 * MiB))
run "${POOL_URL[s3]}" "$ALICE" "$BIN/app_hold_memory" "$S3_HELD" >"$T/hold-s3.out" 2>&1 &
HOLD=$!
ops_wait 60 "the hold on s3" grep -q '^holding' "$T/hold-s3.out"
mkfifo "$T/rest.in"
run "${POOL_URL[s1]}" "$ALICE" "$BIN/app_fill_hold" $((4 * MiB)) <"$T/rest.in" >"$T/rest.out" 2>&1 &
REST=$!
exec {FD_rest}>"$T/rest.in"
ops_wait 60 "the fill on s1" grep -q '^held' "$T/rest.out"
s3_share() { pyq s1 tenants 'sum(h["share"] for t in d if t["name"] == "alice" for h in t["servers"] if h["server"] == "s3")'; }
[ "$(s3_share)" -ge "$S3_HELD" ] || ops_fail "s3's share ($(s3_share)) is below what it holds ($S3_HELD)"
kill -9 "$(cat "$T/s3.pid")"
killed_at=$SECONDS
s3_gone() { [ "$(s3_share)" = 0 ] && [ "$(pyq s1 status 'len(d["servers"])')" = 2 ]; }
ops_wait 15 "s3's shares to return to the pool" s3_gone
ops_log "s3's lease ended and its share returned (seen $((SECONDS - killed_at)) s after it was killed)"
gone=$(pyq s1 status '" ".join(g["server"] for g in d["gpus"] if g["gone"])')
[ "$gone" = s3 ] || ops_fail "s3's GPU is not shown as gone: '$gone'"
ctl s1 pool status >"$T/status-after-kill.txt"
cat "$T/status-after-kill.txt"
grep -q "gone (server left the pool)" "$T/status-after-kill.txt" || ops_fail "pool status shows no gone GPU"
# What s3 held is the pool's again: another client of s1 gets it.
mkfifo "$T/more.in"
run "${POOL_URL[s1]}" "$ALICE" "$BIN/app_fill_hold" $((4 * MiB)) <"$T/more.in" >"$T/more.out" 2>&1 &
MORE=$!
exec {FD_more}>"$T/more.in"
ops_wait 60 "the second fill on s1" grep -q '^held' "$T/more.out"
more=$(awk '/^held/{print $2}' "$T/more.out")
# Less at most s2's headroom and one allocation.
[ "$more" -ge $((S3_HELD - 12 * MiB)) ] || ops_fail "after s3's loss a client of s1 got only $more bytes (s3 held $S3_HELD)"
[ "$(ledgers)" -le "$LIMIT" ] || ops_fail "the ledgers pass the limit after s3's loss"
ops_pass "s3 killed: its GPU is gone, its $((S3_HELD / MiB)) MiB share returned; a client of s1 got $((more / MiB)) MiB of it"
for v in FD_rest FD_more; do eval "exec {$v}>&-"; done
wait "$REST" "$MORE" || ops_fail "a fill client failed after releasing"
wait "$HOLD" 2>/dev/null || true  # its server was killed under it

# ---- 5. an etcd member killed changes nothing -------------------------------------------------
kill -9 "$(cat "$T/etcd-e1.pid")"
ops_log "etcd member e1 (every server's first endpoint) killed"
CAROL=$(ctl s2 --json tenant create carol --pool-memory 32MiB | token_of) || ops_fail "no tenant created after e1's loss"
ctl s1 pool attach carol --gpus 2 >/dev/null || ops_fail "no placement after e1's loss"
out=$(run "$POOL" "$CAROL" "$BIN/app_fill_hold" $((4 * MiB)) </dev/null) || ops_fail "carol's pool client after e1's loss: $out"
grep -qx "held $((32 * MiB))" <<<"$out" || ops_fail "carol's pool client should fill her 32 MiB after e1's loss: $out"
sleep 3  # more than a lease: had a server lost its lease, it would show now
live_servers s2 2 || ops_fail "a server left the pool after e1's loss"
[ "$(pyq s1 status 'd["registered"]')" = True ] || ops_fail "s1 is not registered after e1's loss"
! grep -q "lease is lost" "$T/s1.log" "$T/s2.log" || ops_fail "a server lost its lease when e1 died"
ops_pass "etcd member e1 killed: tenants created, placed, served and limited as before; no lease lost"
ops_pass "pool: one tenant on three servers, pool clients, the pool-wide quota, a lost server, a lost etcd member"

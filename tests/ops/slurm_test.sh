#!/usr/bin/env bash
# ops.slurm: a real single-node Slurm cluster (Debian's munged, slurmctld and slurmd, started
# here as root in a private directory) runs jobs that ask for Remora GPUs through the SPANK
# plugin (tools/slurm/spank_remora.c), against a real remora-server (host backend, 2 GPUs,
# admin API over TCP with the admin token, as a remote GPU server would be reached).
#
# Jobs run as user nobody. Asserts:
#   1. sbatch --wait --remora-gpus=2 --remora-mem=256MiB: the job sees REMORA_SERVER, its
#      token file (mode 0400, owned by nobody) and the shim first in LD_PRELOAD; its CUDA
#      programs run through the shim and see 2 devices whose cudaMemGetInfo total is the
#      256 MiB quota (app_device_info 2, app_quota 256 64); afterwards the tenant slurm-<id> is
#      gone, every GPU's ledger is back to 0 and the token file is removed;
#   2. a job holding 96 MiB (app_hold_memory): while it runs, remoractl shows its tenant with
#      limit 256 MiB, 1 GPU, 1 session and 96 MiB used, and another user cannot read the
#      token; after `scancel` the tenant, its session and the token file are gone and the
#      ledger is back to 0;
#   caps: with max_memory = 512MiB and max_gpus = 2 in the Remora side's config, sbatch
#      refuses --remora-mem=1GiB, --remora-mem=unlimited and --remora-gpus=3 with the reason,
#      and no tenant is created (docs/SECURITY.md, N11);
#   3. node failure: a running job's slurmd is killed (SIGKILL) and the node is set DOWN, so
#      no node epilog can run; slurmctld's EpilogSlurmctld (remora-slurm) removes the tenant,
#      ends its session and the ledger is back to 0.
#
# With "pool" (CTest ops.slurm_pool) the GPUs come from a pool instead of one server: an etcd
# member and two pool servers of one GPU each (remora-server --pool); the jobs' REMORA_SERVER
# is pool://..., the prolog creates the tenant in the pool and places its GPUs across the
# servers, so job 1's two GPUs are on both servers; the same checks, through the pool's view.
# Usage: slurm_test.sh BIN_DIR SHIM SPANK_PLUGIN REMORA_SLURM [pool]
source "$(dirname "$0")/lib.sh"
BIN=$(realpath "${1:?BIN_DIR}") SHIM=$(realpath "${2:?SHIM}")
PLUGIN=$(realpath -m "${3:?SPANK_PLUGIN}") HELPER=$(realpath "${4:?REMORA_SLURM}")
POOL_MODE=${5:-}
ops_need_root "the Slurm test"
ops_need_cmd munged munge slurmctld slurmd sbatch scancel scontrol squeue sinfo setpriv python3
[ -f "$PLUGIN" ] || ops_skip "the SPANK plugin $PLUGIN was not built (Debian's libslurm-dev provides slurm/spank.h)"
id nobody >/dev/null 2>&1 || ops_skip "there is no user 'nobody' to run jobs as"

ops_tmpdir
T=$OPS_TMP
mkdir -p "$T/bin" "$T/lib" "$T/log" "$T/state" "$T/spool" "$T/munge" "$T/munge-key" "$T/out"
chmod 700 "$T/munge-key"
chmod 1777 "$T/out"
# The jobs run as nobody: give them copies they can read wherever the build tree is.
cp "$BIN/app_device_info" "$BIN/app_quota" "$BIN/app_hold_memory" "$T/bin/"
cp "$SHIM" "$T/lib/libremora.so"
# The shim's other libraries (libremora-core.so), found beside it through its RUNPATH $ORIGIN.
find "$(dirname "$SHIM")" -maxdepth 1 -name "libremora-*.so*" -exec cp -P {} "$T/lib/" \;
chmod -R a+rX "$T/bin" "$T/lib"

# ---- remora-server ----------------------------------------------------------------------
APORT=$(ops_free_port)
if [ "$POOL_MODE" = pool ]; then
  ops_etcd_cluster 1
  ops_pool_server s1 --host-gpus 1 --host-gpu-memory 4GiB --admin-listen "tcp://127.0.0.1:$APORT" \
    --admin-token-file "$T/admin.token"
  ops_pool_server s2 --host-gpus 1 --host-gpu-memory 4GiB
  SERVER="pool://${POOL_URL[s1]#tcp://},${POOL_URL[s2]#tcp://}"
  SERVER_LOGS=("$T/s1.log" "$T/s2.log")
else
  "$BIN/remora-server" --backend host --host-gpus 2 --host-gpu-memory 4GiB --state-dir "$T/state" \
    --listen tcp://127.0.0.1:0 --ready-file "$T/ready" \
    --admin-listen "tcp://127.0.0.1:$APORT" --admin-token-file "$T/admin.token" >"$T/log/remora-server.log" 2>&1 &
  echo $! >"$T/remora-server.pid"
  ops_on_exit ops_kill_pidfile "$T/remora-server.pid"
  ops_wait 30 "remora-server to be ready" test -s "$T/ready"
  SERVER=$(grep '^tcp://' "$T/ready")
  SERVER_LOGS=("$T/log/remora-server.log")
fi
CTL=("$BIN/remoractl" --admin "tcp://127.0.0.1:$APORT" --admin-token-file "$T/admin.token")

cat >"$T/remora-slurm.conf" <<EOF
# The Remora side of this test cluster (format: docs/SLURM.md).
server = $SERVER
admin = tcp://127.0.0.1:$APORT
admin_token_file = $T/admin.token
token_dir = $T/tokens
shim = $T/lib/libremora.so
# The administrator's caps (docs/SLURM.md, "Caps").
max_memory = 512MiB
max_gpus = 2
EOF

# ---- munge and Slurm ----------------------------------------------------------------------
dd if=/dev/urandom of="$T/munge-key/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge-key/munge.key"
munged -f --socket="$T/munge/munge.sock" --key-file="$T/munge-key/munge.key" --pid-file="$T/munged.pid" \
  --log-file="$T/log/munged.log" --seed-file="$T/munge-key/seed" ||
  ops_skip "munged cannot start here: $(tail -n 3 "$T/log/munged.log" 2>/dev/null)"
ops_on_exit ops_kill_pidfile "$T/munged.pid"
munge -S "$T/munge/munge.sock" -n </dev/null >/dev/null || ops_skip "munge does not work here"

cat >"$T/epilog-slurmctld.sh" <<EOF
#!/bin/sh
# slurm.conf would name remora-slurm itself (it reads /etc/remora/slurm.conf); the test's
# configuration lives in its own directory.
exec "$HELPER" --config "$T/remora-slurm.conf" >>"$T/log/epilog-slurmctld.log" 2>&1
EOF
chmod 755 "$T/epilog-slurmctld.sh"
echo "required $PLUGIN config=$T/remora-slurm.conf helper=$HELPER" >"$T/plugstack.conf"
CPORT=$(ops_free_port)
DPORT=$(ops_free_port)
cat >"$T/slurm.conf" <<EOF
ClusterName=remoratest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CPORT
SlurmdPort=$DPORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$T/state-slurmctld
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups needed: a plain process tracker and no task plugin.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
PlugStackConfig=$T/plugstack.conf
EpilogSlurmctld=$T/epilog-slurmctld.sh
NodeName=remoratest NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=remoratest Default=YES MaxTime=INFINITE State=UP
EOF
mkdir -p "$T/state-slurmctld"
export SLURM_CONF=$T/slurm.conf
slurmctld -c -f "$SLURM_CONF" || ops_skip "slurmctld cannot start here: $(tail -n 3 "$T/log/slurmctld.log")"
ops_on_exit ops_kill_pidfile "$T/slurmctld.pid"
slurmd -N remoratest -f "$SLURM_CONF" || ops_skip "slurmd cannot start here: $(tail -n 3 "$T/log/slurmd.log")"
ops_on_exit ops_kill_pidfile "$T/slurmd.pid"
node_idle() { [ "$(sinfo -h -n remoratest -o %T 2>/dev/null)" = idle ]; }
end=$((SECONDS + 40))
until node_idle; do
  [ $SECONDS -lt $end ] || ops_skip "the Slurm node did not become idle here: $(tail -n 3 "$T/log/slurmd.log")"
  sleep 0.3
done
ops_log "Slurm is up: $(sinfo -h -o '%P %a %D %T %N')"

# ---- helpers ------------------------------------------------------------------------------
# Every Slurm command of the jobs has a deadline (a held job would make sbatch --wait hang).
as_nobody() { timeout 180 setpriv --reuid=nobody --regid=nogroup --clear-groups env SLURM_CONF="$SLURM_CONF" "$@"; }
if [ "$POOL_MODE" = pool ]; then
  # The pool's view, in the fields of `tenant list`: memory used and sessions across the pool
  # (the servers' reports), gpus the tenant's GPUs on any server.
  tenants() {
    "${CTL[@]}" --json pool tenants | python3 -c 'import json,sys
print(json.dumps([{"name": t["name"], "memory_limit": t["memory_limit"], "memory_used": t["used"],
                   "sessions": t["sessions"], "gpus": [a["server"] + ":" + str(a["gpu"]) for a in t["assignments"]]}
                  for t in json.load(sys.stdin)]))'
  }
  ledger_zero() {
    "${CTL[@]}" --json pool status | python3 -c 'import json,sys; sys.exit(0 if all(g["used"] == 0 for g in json.load(sys.stdin)["gpus"]) else 1)'
  }
else
  tenants() { "${CTL[@]}" --json tenant list; }
  ledger_zero() {
    "${CTL[@]}" --json gpu list | python3 -c 'import json,sys; sys.exit(0 if all(g["used"] == 0 for g in json.load(sys.stdin)) else 1)'
  }
fi
tenant_absent() { ! ops_json_tenant_field "$(tenants)" "$1" name >/dev/null; }
# After a job: the tenant is removed, the ledger is at 0 and the token file is gone.
expect_cleaned_up() {
  local job=$1 what=$2
  ops_wait 30 "tenant slurm-$job to be removed ($what)" tenant_absent "slurm-$job"
  ops_wait 10 "the ledger to be back to 0 ($what)" ledger_zero
  [ ! -e "$T/tokens/job-$job.token" ] || [ "$what" = "node failure" ] || ops_fail "the token file of job $job remains"
  ops_pass "$what: tenant slurm-$job removed, ledger at 0"
}
job_gone() { [ -z "$(squeue -h -j "$1" 2>/dev/null)" ]; }
submit() { as_nobody sbatch --parsable --chdir="$T/out" -o "$T/out/%j.out" "$@"; }

# ---- 1. a job runs CUDA programs through the shim with its quota ----------------------------
cat >"$T/job-quota.sh" <<EOF
#!/bin/sh
echo "REMORA_SERVER=\$REMORA_SERVER"
echo "REMORA_TOKEN_FILE=\$REMORA_TOKEN_FILE"
echo "LD_PRELOAD=\$LD_PRELOAD"
stat -c 'token mode %a owner %U' "\$REMORA_TOKEN_FILE"
"$T/bin/app_device_info" 2 || exit 1
exec "$T/bin/app_quota" 256 64
EOF
chmod 755 "$T/job-quota.sh"
ops_log "job 1: sbatch --wait --remora-gpus=2 --remora-mem=256MiB"
set +e
out=$(submit --wait --remora-gpus=2 --remora-mem=256MiB "$T/job-quota.sh" 2>&1)
rc=$?
set -e
JOB1=$(echo "$out" | grep -Eo '^[0-9]+' | head -1)
[ -n "$JOB1" ] || ops_fail "sbatch did not submit: $out"
cat "$T/out/$JOB1.out"
[ "$rc" = 0 ] || ops_fail "job $JOB1 failed (sbatch --wait exit $rc)"
o=$(cat "$T/out/$JOB1.out")
grep -qx "REMORA_SERVER=$SERVER" <<<"$o" || ops_fail "the job did not get REMORA_SERVER"
grep -qx "REMORA_TOKEN_FILE=$T/tokens/job-$JOB1.token" <<<"$o" || ops_fail "the job did not get REMORA_TOKEN_FILE"
grep -q "^LD_PRELOAD=$T/lib/libremora.so" <<<"$o" || ops_fail "the shim is not preloaded first"
grep -qx "token mode 400 owner nobody" <<<"$o" || ops_fail "the token file is not the job user's alone"
grep -q "^device 1: .*, 256 MiB (256 MiB free)" <<<"$o" || ops_fail "cudaMemGetInfo does not show the 256 MiB quota on 2 devices"
grep -qx "PASS device_info" <<<"$o" && grep -qx "PASS quota" <<<"$o" || ops_fail "the CUDA programs did not pass"
for log in "${SERVER_LOGS[@]}"; do
  grep -q "session [0-9]* started: tenant 'slurm-$JOB1'" "$log" || ops_fail "no session of tenant slurm-$JOB1 in $log"
done
ops_pass "job $JOB1 ran through the shim with its quota (2 GPUs, 256 MiB each in cudaMemGetInfo)"
expect_cleaned_up "$JOB1" "job end"

# ---- 2. scancel mid-run ---------------------------------------------------------------------
cat >"$T/job-hold.sh" <<EOF
#!/bin/sh
echo "pid \$\$"
exec "$T/bin/app_hold_memory" $((96 << 20))
EOF
chmod 755 "$T/job-hold.sh"
ops_log "job 2: holds 96 MiB until cancelled"
JOB2=$(submit --remora-mem=256MiB "$T/job-hold.sh")
ops_wait 60 "job $JOB2 to allocate" grep -q holding "$T/out/$JOB2.out"
# (A pool's servers report their use every 2 s.)
holds_96() { [ "$(ops_json_tenant_field "$(tenants)" "slurm-$JOB2" memory_used)" = $((96 << 20)) ]; }
ops_wait 10 "tenant slurm-$JOB2 to show 96 MiB" holds_96
t=$(tenants)
[ "$(ops_json_tenant_field "$t" "slurm-$JOB2" memory_limit)" = $((256 << 20)) ] || ops_fail "tenant slurm-$JOB2 has not the requested limit: $t"
[ "$(ops_json_tenant_field "$t" "slurm-$JOB2" memory_used)" = $((96 << 20)) ] || ops_fail "tenant slurm-$JOB2 does not hold 96 MiB: $t"
[ "$(ops_json_tenant_field "$t" "slurm-$JOB2" sessions)" = 1 ] || ops_fail "tenant slurm-$JOB2 has no session: $t"
[ "$(ops_json_tenant_field "$t" "slurm-$JOB2" gpus | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] ||
  ops_fail "tenant slurm-$JOB2 should have 1 GPU (the default): $t"
[ "$(stat -c '%a %U' "$T/tokens/job-$JOB2.token")" = "400 nobody" ] || ops_fail "token file mode/owner"
if setpriv --reuid=daemon --regid=daemon --clear-groups cat "$T/tokens/job-$JOB2.token" >/dev/null 2>&1; then
  ops_fail "another user can read the job's token"
fi
ops_pass "job $JOB2 runs as tenant slurm-$JOB2 (limit 256 MiB, 1 GPU, 96 MiB used); other users cannot read its token"
scancel "$JOB2"
ops_wait 30 "job $JOB2 to leave the queue" job_gone "$JOB2"
expect_cleaned_up "$JOB2" "scancel"

# ---- caps: a job cannot choose more than the administrator allows ---------------------------
ops_log "jobs over the caps (max_memory 512MiB, max_gpus 2): refused at submission"
for opts in "--remora-mem=1GiB" "--remora-mem=unlimited" "--remora-gpus=3 --remora-mem=64MiB"; do
  set +e
  # shellcheck disable=SC2086
  out=$(submit $opts "$T/job-hold.sh" 2>&1)
  rc=$?
  set -e
  [ "$rc" != 0 ] || ops_fail "sbatch $opts was accepted: $out"
  grep -q "max_memory\|max_gpus\|without a memory limit" <<<"$out" || ops_fail "sbatch $opts: no reason given: $out"
  ops_log "  sbatch $opts: $(grep -m1 'error' <<<"$out")"
done
[ "$(tenants | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 0 ] || ops_fail "a refused job got a tenant: $(tenants)"
ops_pass "over-cap jobs (1 GiB > 512 MiB, unlimited, 3 GPUs > 2) are refused with the reason; no tenant made"

# ---- 3. node failure ------------------------------------------------------------------------
ops_log "job 3: its node fails (slurmd SIGKILLed, node set DOWN)"
JOB3=$(submit --no-requeue --remora-mem=256MiB "$T/job-hold.sh")
ops_wait 60 "job $JOB3 to allocate" grep -q holding "$T/out/$JOB3.out"
APP=$(awk '/^pid /{print $2}' "$T/out/$JOB3.out")
STEPD=$(ps -o ppid= -p "$APP" | tr -d ' ')
ops_on_exit "kill -9 $APP $STEPD"  # what a dead node would have taken with it
# (With a pool, servers report their sessions once a second: wait for it, 15 s at most.)
for _ in $(seq 1 75); do [ "$(ops_json_tenant_field "$(tenants)" "slurm-$JOB3" sessions)" = 1 ] && break; sleep 0.2; done
[ "$(ops_json_tenant_field "$(tenants)" "slurm-$JOB3" sessions)" = 1 ] || ops_fail "job $JOB3 has no session"
kill -9 "$(cat "$T/slurmd.pid")"
scontrol update NodeName=remoratest State=DOWN Reason="remora test: node failure"
ops_wait 30 "job $JOB3 to end with NODE_FAIL" sh -c "scontrol show job $JOB3 | grep -q 'JobState=NODE_FAIL'"
expect_cleaned_up "$JOB3" "node failure"
grep -q "tenant 'slurm-$JOB3' removed" "$T/log/epilog-slurmctld.log" || ops_fail "EpilogSlurmctld did not remove the tenant"
ops_pass "node failure: slurmctld's epilog removed tenant slurm-$JOB3 and ended its session"
ops_pass "Slurm${POOL_MODE:+ (GPUs from a pool)}: tenants follow jobs (end, scancel, node failure) and the ledger returns to 0"

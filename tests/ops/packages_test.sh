#!/usr/bin/env bash
# ops.packages: Remora's Debian packages build (tools/packaging/build-debs.sh), install on
# this machine with dpkg, the packaged remora-server serves clients through the packaged
# shim, systemd-analyze accepts the unit, and purging removes everything.
#
# There is no running systemd here, so the test does what the unit says by hand: it reads
# the installed unit's ExecStart, User and RuntimeDirectory, sets /etc/default/remora-server
# as an operator would (host backend, a free TCP port), creates /run/remora for user remora
# and runs the ExecStart line as that user, with the unit's supplementary group and bounding
# set and no capabilities. Asserts:
#   1. the three packages build and install; the remora user exists and owns /var/lib/remora;
#      remora-worker-exec is root:remora 0750 with the file capabilities cap_setgid,cap_setuid=ep
#      (or setuid root, 4750, where the filesystem keeps none);
#   2. `systemd-analyze verify` accepts the installed unit, which has the hardening options
#      and grants the server no capability (docs/SECURITY.md, N10);
#   3. the packaged server (as user remora) serves the packaged shim: over TCP through
#      remora-run, over shm with LD_PRELOAD, and as the drop-in libcudart.so.13 on
#      LD_LIBRARY_PATH, each seeing the tenant's 512 MiB quota;
#   4. SIGTERM drains it (exit 0); `dpkg --purge` removes its files and /var/lib/remora.
# Usage: packages_test.sh SOURCE_DIR BUILD_DIR
source "$(dirname "$0")/lib.sh"
SRC=$(realpath "${1:?SOURCE_DIR}") BUILD=$(realpath "${2:?BUILD_DIR}")
ops_need_root "the packages test (it installs with dpkg)"
ops_need_cmd dpkg dpkg-deb dpkg-shlibdeps systemd-analyze setpriv python3 getcap
for p in remora-server remora-client remora-slurm; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    ops_skip "$p is installed on this machine: the test will not replace an operator's installation"
  fi
done
[ ! -e /run/remora ] || ops_skip "/run/remora exists: a Remora server may be running here"

ops_tmpdir
T=$OPS_TMP
ops_log "building the packages"
bash "$SRC/tools/packaging/build-debs.sh" --build-dir "$BUILD" --out "$T/debs" --no-build | tee "$T/build-debs.log"
debs=("$T"/debs/remora-server_*.deb "$T"/debs/remora-client_*.deb)
ls "$T"/debs/remora-slurm_*.deb >/dev/null 2>&1 && debs+=("$T"/debs/remora-slurm_*.deb)
for d in "${debs[@]}"; do
  [ -f "$d" ] || ops_fail "build-debs.sh did not produce $d"
  dpkg-deb --info "$d" | sed -n 's/^ \(Package\|Version\|Depends\): /  /p'
done

ops_on_exit "dpkg --purge remora-slurm remora-client remora-server"
ops_log "installing ${debs[*]##*/}"
dpkg -i "${debs[@]}" >"$T/dpkg-install.log" 2>&1 || { cat "$T/dpkg-install.log"; ops_fail "dpkg -i failed"; }
getent passwd remora >/dev/null || ops_fail "postinst did not create the remora user"
[ "$(stat -c '%U %a' /var/lib/remora)" = "remora 700" ] || ops_fail "/var/lib/remora: $(stat -c '%U %a' /var/lib/remora)"
UNIT=/lib/systemd/system/remora-server.service
SHIMDIR=$(dirname "$(dpkg -L remora-client | grep '/libremora.so$')")
for f in /usr/bin/remora-server /usr/libexec/remora/remora-worker /usr/bin/remoractl /usr/bin/remora-run \
         "$SHIMDIR/libremora.so" "$SHIMDIR/libcudart.so.13" "$UNIT" /etc/default/remora-server; do
  [ -e "$f" ] || ops_fail "$f is not installed"
done
ops_pass "installed: remora user, /var/lib/remora (0700), binaries, shim in $SHIMDIR, $UNIT"
HELPER=/usr/libexec/remora/remora-worker-exec
mode=$(stat -c '%U %G %a' "$HELPER")
caps=$(getcap "$HELPER" 2>/dev/null || true)
case "$mode" in
  "root remora 750") echo "$caps" | grep -q 'cap_setgid,cap_setuid=ep' || ops_fail "$HELPER has no file capabilities: $caps" ;;
  "root remora 4750") ops_log "no file capabilities on this filesystem: $HELPER is setuid root" ;;
  *) ops_fail "$HELPER is $mode (expected root remora 750 with capabilities)" ;;
esac
ops_pass "$HELPER: $mode $caps"

ops_log "systemd-analyze verify $UNIT"
systemd-analyze verify "$UNIT" >"$T/verify.log" 2>&1 || { cat "$T/verify.log"; ops_fail "systemd-analyze verify failed"; }
if grep -q "remora-server.service" "$T/verify.log"; then cat "$T/verify.log"; ops_fail "systemd-analyze verify complained"; fi
for opt in User=remora ProtectSystem=strict PrivateTmp=yes "ReadWritePaths=/var/lib/remora /run/remora" \
           StateDirectory=remora RuntimeDirectory=remora KillSignal=SIGTERM SupplementaryGroups=remora-worker \
           "CapabilityBoundingSet=CAP_SETUID CAP_SETGID" AmbientCapabilities=; do
  grep -qx "$opt" "$UNIT" || ops_fail "the unit lacks $opt"
done
ops_pass "systemd-analyze verify accepts the unit (User=remora, no capabilities, ProtectSystem=strict, PrivateTmp, ...)"

# ---- the packaged server, started the way the unit says ---------------------------------------
PORT=$(ops_free_port)
cat >/etc/default/remora-server <<EOF
# Set by tests/ops/packages_test.sh: no GPU on this machine, a free port.
REMORA_SERVER_ARGS="--backend host --host-gpu-memory 2GiB --listen tcp://127.0.0.1:$PORT"
EOF
unit_value() { sed -n "s/^$1=//p" "$UNIT" | tail -1; }
USER_=$(unit_value User)
RUNDIR=/run/$(unit_value RuntimeDirectory)
EXEC=$(unit_value ExecStart)
ops_on_exit "rm -rf $RUNDIR"
install -d -o "$USER_" -g "$USER_" -m "$(unit_value RuntimeDirectoryMode)" "$RUNDIR"
(
  set -a
  . /etc/default/remora-server
  set +a
  eval "set -- $EXEC"
  exec setpriv --reuid="$USER_" --regid="$USER_" --groups="$(unit_value SupplementaryGroups)" \
    --bounding-set=-all,+setuid,+setgid --inh-caps=-all -- "$@"
) >"$T/server.log" 2>&1 &
echo $! >"$T/server.pid"
ops_on_exit ops_kill_pidfile "$T/server.pid"
ops_log "started: $EXEC (as $USER_, REMORA_SERVER_ARGS from /etc/default/remora-server)"
ops_wait 30 "the packaged server to answer remoractl" /usr/bin/remoractl -D /var/lib/remora info
[ "$(ps -o user= -p "$(cat "$T/server.pid")")" = remora ] || ops_fail "the server does not run as user remora"
/usr/bin/remoractl -D /var/lib/remora --json tenant create pkgtest --memory 512MiB |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' >"$T/token"
chmod 600 "$T/token"

expect_app() {  # DESCRIPTION OUTPUT-FILE
  grep -q "^device 0: .*, 512 MiB (512 MiB free)" "$2" && grep -qx "PASS device_info" "$2" ||
    { cat "$2"; ops_fail "$1: the application did not run with its quota"; }
  ops_pass "$1"
}
/usr/bin/remora-run --server "tcp://127.0.0.1:$PORT" --token-file "$T/token" -- "$BUILD/bin/app_device_info" 1 >"$T/app1.log" 2>&1 ||
  { cat "$T/app1.log"; ops_fail "remora-run failed"; }
expect_app "remora-run (packaged) -> tcp -> packaged server" "$T/app1.log"
REMORA_SERVER=shm://$RUNDIR/remora.sock REMORA_TOKEN_FILE=$T/token LD_PRELOAD=$SHIMDIR/libremora.so \
  "$BUILD/bin/app_device_info" 1 >"$T/app2.log" 2>&1 || { cat "$T/app2.log"; ops_fail "LD_PRELOAD over shm failed"; }
expect_app "LD_PRELOAD=$SHIMDIR/libremora.so -> shm://$RUNDIR/remora.sock" "$T/app2.log"
REMORA_SERVER=tcp://127.0.0.1:$PORT REMORA_TOKEN_FILE=$T/token LD_LIBRARY_PATH=$SHIMDIR \
  "$BUILD/bin/app_device_info" 1 >"$T/app3.log" 2>&1 || { cat "$T/app3.log"; ops_fail "the drop-in libcudart.so.13 failed"; }
expect_app "LD_LIBRARY_PATH=$SHIMDIR (libcudart.so.13 -> libremora.so)" "$T/app3.log"
n=$(grep -c "session [0-9]* started: tenant 'pkgtest'" "$T/server.log" || true)
[ "$n" = 3 ] || ops_fail "the server's log shows $n sessions of tenant pkgtest, expected 3"
grep -q "worker pid" "$T/server.log" || ops_fail "no worker was spawned"
# The server names the helper as it found it beside itself (/usr/bin/../libexec/...).
helper_used=$(grep -o "workers run as user 'remora-worker' .*started through [^ ]*" "$T/server.log" | sed 's/.*started through //')
[ -n "$helper_used" ] && [ "$(realpath "$helper_used")" = "$HELPER" ] ||
  ops_fail "the server did not start its workers as remora-worker through $HELPER (it said: ${helper_used:-nothing})"
[ "$(awk '/^CapEff:/ {print $2}' "/proc/$(cat "$T/server.pid")/status")" = 0000000000000000 ] ||
  ops_fail "the server holds capabilities"
ops_pass "the server holds no capability; its workers run as remora-worker through $HELPER"

ops_log "SIGTERM (the unit's KillSignal)"
kill -TERM "$(cat "$T/server.pid")"
set +e
wait "$(cat "$T/server.pid")"
rc=$?
set -e
[ "$rc" = 0 ] || ops_fail "the server exited $rc after SIGTERM"
grep -q "server stopped" "$T/server.log" || ops_fail "the server did not drain"
ops_pass "SIGTERM: drained, exit 0"

ops_log "dpkg --purge"
dpkg --purge remora-slurm remora-client remora-server >"$T/dpkg-purge.log" 2>&1 || { cat "$T/dpkg-purge.log"; ops_fail "purge failed"; }
for f in /usr/bin/remora-server /usr/libexec/remora /usr/bin/remora-run "$SHIMDIR" "$UNIT" /etc/default/remora-server /var/lib/remora; do
  [ ! -e "$f" ] || ops_fail "$f is still there after purge"
done
ops_pass "the packages build, install, serve clients and purge cleanly"

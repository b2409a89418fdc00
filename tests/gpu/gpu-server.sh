# gpu-server.sh: sourced by the GPU scripts (tenancy-gpu.sh, import-time.sh, attach-gpu.sh) to
# run one remora-server --backend cuda for the script's duration.
#   start_gpu_server NAME [--listen URL...]  makes $work (a temporary directory, removed at exit
#       unless KEEP is set), starts the server with an shm listener plus the given ones, waits
#       for its ready file and sets $ready (the file listing its URLs). On failure prints
#       "FAIL NAME: ..." with the server's log and exits 1.
#   ctl ARGS...        remoractl against that server
#   token_of ARGS...   remoractl tenant create ARGS, printing only the new token
#   on_exit CMD        adds CMD to what runs at exit, before the server is stopped
# Needs $bin (the directory of remora-server and remoractl).
work= server_pid= ready= exit_hooks=
_gpu_server_cleanup() {
  eval "$exit_hooks"
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [ -n "$work" ] && [ -z "${KEEP:-}" ] && rm -rf "$work"
}
on_exit() { exit_hooks+="$*;"; }
start_gpu_server() {
  local name=$1
  shift
  work=$(mktemp -d "/tmp/remora-$name.XXXXXX")
  trap _gpu_server_cleanup EXIT
  "$bin/remora-server" --backend cuda --state-dir "$work/state" --listen "shm://$work/remora.sock" "$@" \
    --ready-file "$work/ready" --log-level info >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 300); do [ -s "$work/ready" ] && break; sleep 0.1; done
  if [ ! -s "$work/ready" ]; then
    echo "FAIL $name: remora-server did not start"; cat "$work/server.log"; exit 1
  fi
  ready=$work/ready
}
ctl() { "$bin/remoractl" --state-dir "$work/state" "$@"; }
token_of() { ctl --json tenant create "$@" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p'; }

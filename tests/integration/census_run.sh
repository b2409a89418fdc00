# census_run.sh (sourced): census_run REMORA_RUN PROGRAM TRANSPORT NAME runs PROGRAM through
# remora-run (host backend) over TRANSPORT with REMORA_CALL_STATS=$census and fails the test
# unless it printed "PASS NAME:"; sets $work (removed at exit) and $census, the census file the
# caller then checks.
census_run() {
  local run=$1 program=$2 transport=$3 name=$4
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  census=$work/census.jsonl
  REMORA_TEST_HOST_BACKEND=1 REMORA_CALL_STATS=$census "$run" --backend host --transport "$transport" -- "$program" \
    >"$work/out.log" 2>&1 || { cat "$work/out.log"; echo "FAIL: the program failed over $transport"; exit 1; }
  grep -q "^PASS $name:" "$work/out.log" || { cat "$work/out.log"; echo "FAIL: no PASS line"; exit 1; }
}

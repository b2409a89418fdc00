#!/usr/bin/env bash
# occupancy_census_test.sh REMORA_RUN PROGRAM TRANSPORT: runs tests/gpu/occupancy_memo through
# remora-run (host backend) over TRANSPORT with REMORA_CALL_STATS=FILE and checks the census of
# its interval: 200 repeated occupancy questions answered in the client, one round trip after
# the kernel's carveout changed and one after the context's cache configuration did (2), and the
# carveout set a second time to the same value answered in the client (cudaFuncSetAttribute
# twice with one value: 1; issue 45).
set -euo pipefail
. "$(dirname "$0")/census_run.sh"
census_run "$1" "$2" "$3" occupancy_memo
python3 "$(dirname "$0")/census_expect.py" "$census" "occupancy census over $3" cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags=2 cuFuncSetAttribute=1

#!/usr/bin/env bash
# stream_idle_census_test.sh REMORA_RUN PROGRAM TRANSPORT: runs tests/gpu/stream_idle through
# remora-run (host backend) over TRANSPORT with REMORA_CALL_STATS=FILE and checks the census of
# its interval: a stream drained by a copy into pageable memory is synchronised and queried
# without a round trip (51 + 51 times: cuStreamQuery 0); work queued after the copy by this
# thread or by another, and a stream never drained, are waited for (cuStreamSynchronize 3;
# issue 45).
set -euo pipefail
. "$(dirname "$0")/census_run.sh"
census_run "$1" "$2" "$3" stream_idle
python3 "$(dirname "$0")/census_expect.py" "$census" "stream idle census over $3" cuStreamSynchronize=3 cuStreamQuery=0

#!/usr/bin/env bash
# stream_idle_census_test.sh REMORA_RUN PROGRAM TRANSPORT: runs tests/gpu/stream_idle through
# remora-run (host backend) over TRANSPORT with REMORA_CALL_STATS=FILE and checks the census of
# its interval: a stream drained by a copy into pageable memory is synchronised and queried
# without a round trip (51 + 51 times: cuStreamQuery 0), and so is one drained by an
# asynchronous copy into pinned memory over tcp, whose reply it waits for (20 times); work
# queued after the copy by this thread or by another, and a stream never drained, are waited
# for (cuStreamSynchronize 3, 23 over shm; issue 45).
set -euo pipefail
. "$(dirname "$0")/census_run.sh"
census_run "$1" "$2" "$3" stream_idle
# Over shm, copies into pinned memory go into memory the worker shares, posted without a reply:
# their 20 synchronisations are sent. Over tcp the copy's reply drains the stream.
syncs=3
[ "$3" = shm ] && syncs=23
python3 "$(dirname "$0")/census_expect.py" "$census" "stream idle census over $3" cuStreamSynchronize=$syncs cuStreamQuery=0

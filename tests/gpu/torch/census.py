"""Reading Remora's call census from a training script (shim/src/link/census.h).

With REMORA_CALL_STATS=PATH the client appends one JSON line to PATH per interval between
cudaProfilerStart and cudaProfilerStop (torch.cuda.profiler.start()/stop()). A script marks its
steady-state steps with `Interval()` and, after them, `report(steps)` prints per step: the
messages sent, the round trips, those the application asked for (a synchronisation, a copy
into host memory it reads) and the others - what Remora made it wait for besides - with the
calls that caused them. Natively (no census) it prints nothing and checks nothing."""
import json
import os

import torch


class Interval:
    """`with Interval():` - the steps inside are one census interval (a no-op natively)."""

    def __enter__(self):
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return False


def last_interval():
    path = os.environ.get("REMORA_CALL_STATS", "")
    if path in ("", "0", "1") or not os.path.exists(path):
        return None
    last = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rec = json.loads(line)
                if rec.get("interval") != "session":
                    last = rec
    return last


def report(name, steps, allowed_other=0.0):
    """Prints the last interval's census per step; returns False (and prints FAIL) if the
    round trips per step besides the application's own are more than `allowed_other`."""
    rec = last_interval()
    if rec is None:
        print("census %s: none (native, or REMORA_CALL_STATS is not a file)" % name)
        return True
    per = lambda k: rec[k] / steps
    print("census %s per step (%d steps): messages %.1f, round trips %.1f (the application's synchronisations %.1f, "
          "others %.1f), posted %.1f" % (name, steps, per("messages"), per("round_trips"), per("synchronising"),
                                        per("other_round_trips"), per("posted")))
    waited = sorted((c for c in rec["calls"] if c["round_trips"]), key=lambda c: -c["round_trips"])
    for c in waited[:12]:
        print("    %-44s %8.2f round trips/step%s" % (c["call"], c["round_trips"] / steps,
                                                      " (the application's)" if c["synchronising"] else ""))
    other = per("other_round_trips")
    if other > allowed_other:
        print("FAIL %s census: %.2f round trips per step besides the application's synchronisations" % (name, other))
        return False
    print("PASS %s census: %.2f round trips per step besides the application's synchronisations" % (name, other))
    return True

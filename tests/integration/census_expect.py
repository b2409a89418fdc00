#!/usr/bin/env python3
"""census_expect.py CENSUS WHAT CALL=N...: the census file (REMORA_CALL_STATS) holds exactly one
interval (cudaProfilerStart..Stop), in which each CALL made exactly N round trips (a call absent
from the census made none). Prints "PASS WHAT: ..." or the failures and the interval's calls and
exits 1. The census tests (*_census_test.sh) say why each figure is expected."""
import json
import sys


def main(path, what, expectations):
    lines = [json.loads(l) for l in open(path) if l.strip()]
    steady = [l for l in lines if l["interval"] != "session"]
    if len(steady) != 1:
        print("FAIL %s: one interval expected, found %d" % (what, len(steady)))
        return 1
    calls = {c["call"]: c for c in steady[0]["calls"]}
    failures, figures = [], []
    for e in expectations:
        name, _, want = e.partition("=")
        got = calls.get(name, {"round_trips": 0})["round_trips"]
        figures.append("%s %d" % (name, got))
        if got != int(want):
            failures.append("%s made %d round trips, %s expected" % (name, got, want))
    if failures:
        print("FAIL %s: %s; the interval's calls: %s" % (what, "; ".join(failures), steady[0]["calls"]))
        return 1
    print("PASS %s: round trips %s" % (what, ", ".join(figures)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: census_expect.py CENSUS WHAT CALL=N...")
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))

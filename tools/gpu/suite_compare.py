"""suite_compare.py MODE=JUNIT.xml ...: the outcomes of one pytest suite run in several modes
(the first is the reference, natively), compared test by test on the tests every mode ran:
each mode's pass/fail/skip counts, then every test whose outcome differs from the reference's.
Exit 0 whether or not they differ (the table is the result). Standard library only."""
import sys
import xml.etree.ElementTree as ET
from collections import Counter


def outcomes(path):
    got = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        key = "%s::%s" % (tc.get("classname") or "", tc.get("name") or "")
        state = "pass"
        for child in tc:
            if child.tag in ("failure", "error"):
                state = "fail"
            elif child.tag == "skipped" and state == "pass":
                state = "skip"
        got[key] = state
    return got


def main(argv):
    modes = [a.split("=", 1) for a in argv]
    if len(modes) < 1 or any(len(m) != 2 for m in modes):
        sys.exit(__doc__)
    runs = [(name, outcomes(path)) for name, path in modes]
    common = set.intersection(*(set(r) for _, r in runs))
    print("| mode | run | pass | fail | skip | same outcome as %s, of %d run by every mode |" % (runs[0][0], len(common)))
    print("|---|--:|--:|--:|--:|--:|")
    ref = runs[0][1]
    for name, r in runs:
        c = Counter(r.values())
        same = sum(1 for k in common if r[k] == ref[k])
        print("| %s | %d | %d | %d | %d | %d |" % (name, len(r), c["pass"], c["fail"], c["skip"], same))
    for name, r in runs[1:]:
        diff = sorted(k for k in common if r[k] != ref[k])
        for k in diff:
            print("%s differs: %s -> %s  %s" % (name, ref[k], r[k], k))


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env python3
"""libs_served_test.py API_DIR COMPATIBILITY.md LIB...: every exported function of each named
math library is served - remoted, answered in the client, or refused for one of the written
reasons - none is merely "not supported yet"; every reason a description gives is one
docs/COMPATIBILITY.md lists (its "Refusal reasons" table), and that table lists exactly the
reasons the descriptions know (tools/gen/apigen/model.py REFUSAL_REASONS); the library's
section of COMPATIBILITY.md says "served N of N". (That the description lists exactly the
library's exports is integration.abi.<soname>; that the section is the description's,
docs_compat_test.)"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "gen", "apigen"))
import model  # noqa: E402


def main():
    api_dir, doc, libs = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = open(doc).read()
    failures = []
    m = re.search(r"<!-- BEGIN REFUSAL REASONS -->(.*?)<!-- END REFUSAL REASONS -->", text, re.S)
    if not m:
        failures.append("%s has no refusal reasons table (<!-- BEGIN REFUSAL REASONS -->)" % doc)
        documented = set()
    else:
        documented = set(re.findall(r"^\|\s*`([\w-]+)`\s*\|", m.group(1), re.M))
    if documented != set(model.REFUSAL_REASONS):
        failures.append("the reasons COMPATIBILITY.md lists (%s) are not model.REFUSAL_REASONS (%s)"
                        % (", ".join(sorted(documented)), ", ".join(sorted(model.REFUSAL_REASONS))))
    for name in libs:
        lib = model.parse(os.path.join(api_dir, name + ".api"))
        exported = [(n, e) for e in lib.entries for n in e.exported_names]
        unsupported = [n for n, e in exported if e.cls == "unsupported"]
        refused = [(n, e.attrs.get("reason")) for n, e in exported if e.cls == "refused"]
        served = len(exported) - len(unsupported)
        print("%s: served %d of %d (%d refused)" % (lib.props["soname"], served, len(exported), len(refused)))
        if unsupported:
            failures.append("%s: %d functions are not served: %s" % (name, len(unsupported), " ".join(sorted(unsupported)[:20])))
        for n, reason in refused:
            if reason not in documented:
                failures.append("%s: %s is refused for '%s', which COMPATIBILITY.md does not list" % (name, n, reason))
        want = "%s: **served %d of %d**" % (lib.props["soname"], len(exported), len(exported))
        if want not in text:
            failures.append("%s's section of COMPATIBILITY.md does not say '%s'" % (name, want))
    for f in failures:
        print("FAIL: %s" % f)
    if failures:
        return 1
    print("PASS served %s" % " ".join(libs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

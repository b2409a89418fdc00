#!/usr/bin/env python3
"""lib_served_test.py API RECORDED DOC SECTION: a math library's whole ABI is served (issue 42).

API       the library's description (protocol/api/<lib>.api)
RECORDED  the exports of NVIDIA's library, one name a line (tests/integration/lib*.exports,
          recorded from the library so the test needs no NVIDIA library installed)
DOC       docs/COMPATIBILITY.md
SECTION   the heading of the library's section there ("### cuDNN")

Checks that the description exports exactly the recorded ABI; that every export is remoted,
answered in the client or refused, and says how many of each; and that the refused ones are
exactly those the document's section names, each in its hand-written part (where the reason is
written) as well as in its generated table. Prints `PASS served ...` or `FAIL ...`, exit 1."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "gen", "apigen"))
from model import parse  # noqa: E402


def main():
    api, recorded, doc, heading = sys.argv[1:5]
    lib = parse(api)
    exported = {n: e for e in lib.entries for n in e.exported_names}
    want = {l.strip() for l in open(recorded) if l.strip() and not l.startswith("#")}
    failures = []
    missing, extra = sorted(want - set(exported)), sorted(set(exported) - want)
    if missing:
        failures.append("not described: %s" % " ".join(missing))
    if extra:
        failures.append("described but not in the recorded ABI: %s" % " ".join(extra))
    local = sorted(n for n, e in exported.items() if e.cls == "local")
    refused = sorted(n for n, e in exported.items() if e.cls == "unsupported")
    remoted = sorted(n for n, e in exported.items() if e.remoted and e.cls != "local")
    assert len(local) + len(refused) + len(remoted) == len(exported)
    text = open(doc).read()
    start = text.find(heading + "\n")
    if start < 0:
        failures.append("%s has no section %r" % (doc, heading))
    else:
        stop = text.find("\n### ", start + len(heading))
        section = text[start:stop if stop > 0 else len(text)]
        marker = section.find("<!-- BEGIN %s TABLE" % lib.name.upper())
        prose, table = section[:marker], section[marker:]
        block = re.search(r"<summary>Not supported yet \((\d+)\)</summary>(.*?)</details>", table, re.S)
        listed = sorted(re.findall(r"`(\w+)`", block.group(2))) if block else []
        if listed != refused:
            failures.append("the document's table refuses %s, the description %s" % (listed, refused))
        unexplained = [n for n in refused if "`%s`" % n not in prose]
        if unexplained:
            failures.append("refused without a written reason in %s's %s: %s" % (doc, heading, " ".join(unexplained)))
    print("%s: %d exports (the recorded ABI: %d): %d remoted, %d answered in the client, %d refused%s" %
          (lib.props["soname"], len(exported), len(want), len(remoted), len(local), len(refused),
           (" (" + ", ".join(refused) + ")") if refused else ""))
    if failures:
        for f in failures:
            print("FAIL %s" % f)
        return 1
    print("PASS served %s: remoted + local + listed refusals = every export of the recorded ABI" % lib.props["soname"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

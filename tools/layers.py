#!/usr/bin/env python3
"""The direction of the layers, checked from the include lines (issue 41).

server/worker: every `#include "worker/<folder>/<file>"` of a file under server/worker must
name its own folder or one that server/worker/LAYERS lets that folder see (the table is
stated there, once). The generated dispatch of an API description includes the headers its
`worker_include` names: it is compiled in hooks/ for the driver API (cuda.api) and in libs/
for the others (server/CMakeLists.txt), and is checked as a file of that folder.

shim/src: the link (src/link) never includes the runtime above it (anything else of
shim/src), and the core (shim/src outside link/ and libs/) never includes the math
libraries' client side (src/libs). The shim includes by bare name through its targets'
include directories (shim/CMakeLists.txt), so an include is resolved as the compiler would:
the including file's folder first, then its target's folders.

Prints one line per wrong include (file:line: what it includes, and the direction) and exits
1 if there is any; `--stamp FILE` touches FILE on success (the build's check). Standard
library only.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".h", ".cc", ".inc")


def read_layers(path):
    """LAYERS: `folder: folder folder ...`; returns {folder: set of folders it may include}."""
    allowed = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if ":" not in line:
                raise SystemExit("%s:%d: expected 'folder: folders it may include'" % (path, n))
            folder, sees = line.split(":", 1)
            allowed[folder.strip()] = set(sees.split())
    order = list(allowed)
    for folder, sees in allowed.items():
        for s in sees:
            if s not in allowed:
                raise SystemExit("%s: %s may include %s, which is no layer" % (path, folder, s))
            if order.index(s) >= order.index(folder):
                raise SystemExit("%s: %s may include %s, listed after it: the layers would not run one way"
                                 % (path, folder, s))
    return allowed


def sources(top):
    for d, dirs, files in os.walk(top):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.join(d, f)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1)


def check_worker(root):
    worker = os.path.join(root, "server", "worker")
    allowed = read_layers(os.path.join(worker, "LAYERS"))
    errors = []
    for path in sources(worker):
        rel = os.path.relpath(path, worker)
        folder = os.path.dirname(rel) or "."
        where = os.path.relpath(path, root)
        if folder not in allowed:
            errors.append("%s: folder server/worker/%s is not in server/worker/LAYERS" % (where, folder))
            continue
        for n, inc in includes(path):
            if not inc.startswith("worker/"):
                continue
            target = os.path.dirname(inc[len("worker/"):]) or "."
            if not os.path.exists(os.path.join(root, "server", inc)):
                errors.append("%s:%d: includes %s, which does not exist" % (where, n, inc))
            elif target != folder and target not in allowed[folder]:
                errors.append("%s:%d: includes %s: %s may not see %s (server/worker/LAYERS)"
                              % (where, n, inc, folder, target))
    api = os.path.join(root, "protocol", "api")
    for name in sorted(os.listdir(api)) if os.path.isdir(api) else []:
        if not name.endswith(".api"):
            continue
        folder = "hooks" if name == "cuda.api" else "libs"
        path = os.path.join(api, name)
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                words = line.split("#", 1)[0].split()
                if not words or words[0] != "worker_include":
                    continue
                for inc in words[1:]:
                    target = os.path.dirname(inc[len("worker/"):]) or "."
                    if not os.path.exists(os.path.join(root, "server", inc)):
                        errors.append("%s:%d: worker_include %s, which does not exist"
                                      % (os.path.relpath(path, root), n, inc))
                    elif target != folder and target not in allowed[folder]:
                        errors.append("%s:%d: worker_include %s: the generated dispatch is in %s, which may "
                                      "not see %s (server/worker/LAYERS)"
                                      % (os.path.relpath(path, root), n, inc, folder, target))
    return errors


def check_shim(root):
    src = os.path.join(root, "shim", "src")
    link, libs = os.path.join(src, "link"), os.path.join(src, "libs")
    errors = []
    for path in sources(src):
        here = os.path.dirname(path)
        if path.startswith(link + os.sep):
            layer, search, forbidden = "the link (shim/src/link)", [link], [src]
        elif path.startswith(libs + os.sep):
            continue  # the top: it sees everything
        else:
            layer, search, forbidden = "the core", [src, link], [libs]
        for n, inc in includes(path):
            # As the compiler finds it; else a header of a folder this target does not search
            # (which would compile once someone adds the folder to the target).
            for d in [here] + search + [src, link, libs]:
                found = os.path.normpath(os.path.join(d, inc))
                if os.path.isfile(found):
                    break
            else:
                continue  # not the shim's (protocol, generated, system)
            inside = lambda top: found.startswith(top + os.sep)
            bad = [f for f in forbidden if inside(f)]
            if path.startswith(link + os.sep) and inside(link):
                bad = []
            if bad:
                errors.append("%s:%d: includes %s: %s may not see %s" % (
                    os.path.relpath(path, root), n, inc, layer, os.path.relpath(found, root)))
    return errors


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    p.add_argument("--stamp", help="touched when every include goes the allowed way")
    args = p.parse_args()
    root = os.path.abspath(args.root)
    errors = check_worker(root) + check_shim(root)
    for e in errors:
        print(e)
    if errors:
        print("%d include(s) against the layers' direction" % len(errors), file=sys.stderr)
        return 1
    if args.stamp:
        with open(args.stamp, "w", encoding="utf-8"):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

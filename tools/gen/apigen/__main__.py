"""apigen: generates every per-call artifact of Remora's remoted libraries from the API
descriptions in protocol/api/ (one declaration per function). Python 3 standard library
only; run by CMake at build time, its output is never committed.

  python3 tools/gen/apigen --api-dir protocol/api --lib NAME --emit KIND --out DIR [-I include-dir]
  python3 tools/gen/apigen --api-dir protocol/api --doc docs/COMPATIBILITY.md [--check]
  python3 tools/gen/apigen --api-dir protocol/api --index DIR/libraries.h

KIND: shim-exports (version script, table, forwarders, core stubs), client (stubs of calls
that travel), worker (interface, real-library table, dispatch), exports-list (one name per
line, for tests), fuzz-calls (the call table of the fuzz target api_reply), module-NAME (a sub-library's version script, forwarders and export list).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import emit_docs  # noqa: E402
import emit_fuzz  # noqa: E402
import emit_index  # noqa: E402
import emit_shim  # noqa: E402
import emit_tests  # noqa: E402
import emit_worker  # noqa: E402
from model import ApiError, parse  # noqa: E402


def load_all(api_dir):
    libs = []
    for f in sorted(os.listdir(api_dir)):
        if f.endswith(".api"):
            libs.append(parse(os.path.join(api_dir, f)))
    return libs


def write(path, text):
    # Rewrite only on change, so the build does not recompile what did not change.
    try:
        if open(path).read() == text:
            return
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


def write_shards(out_dir, stem, texts):
    """STEM.cc, then STEM_2.cc ... STEM_N.cc (tools/gen/apigen.cmake names the same files)."""
    for i, text in enumerate(texts, 1):
        write(os.path.join(out_dir, stem + (".cc" if i == 1 else "_%d.cc" % i)), text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api-dir", required=True)
    ap.add_argument("--lib")
    ap.add_argument("--emit", action="append", default=[])
    ap.add_argument("--out")
    ap.add_argument("-I", dest="include_dirs", action="append", default=[])
    ap.add_argument("--doc")
    ap.add_argument("--index", help="writes the index of served libraries (emit_index.py) to this file")
    ap.add_argument("--check", action="store_true")
    # Translation units for the client stubs and the worker's dispatch (emits client, worker).
    ap.add_argument("--shards", type=int, default=1)
    a = ap.parse_args()
    try:
        # Only shim-exports (a `via` entry names another description's entry) and the
        # documentation read every description; the other outputs read <lib>.api alone, which
        # is all their build step depends on (tools/gen/apigen.cmake).
        own = os.path.join(a.api_dir, "%s.api" % a.lib) if a.lib else None
        if own and os.path.exists(own) and not a.doc and "shim-exports" not in a.emit:
            libs = [parse(own)]
        else:
            libs = load_all(a.api_dir)
    except ApiError as e:
        print("apigen: %s" % e, file=sys.stderr)
        return 1
    by_name = {l.name: l for l in libs}

    if a.index:
        write(a.index, emit_index.emit_libraries_h(libs, "protocol/api"))
        return 0

    if a.doc:
        text = open(a.doc).read()
        new = text
        for l in libs:
            if l.props.get("document", "yes") != "no":
                new = emit_docs.update(new, l)
        if a.check:
            if new != text:
                print("%s is out of date with protocol/api/*.api: run `python3 tools/gen/apigen --api-dir protocol/api --doc %s`"
                      % (a.doc, a.doc))
                return 1
            for l in libs:
                if l.props.get("document", "yes") == "no":
                    continue
                exp = [n for e in l.entries for n in e.exported_names]
                rem = sum(1 for e in l.entries for n in e.exported_names if e.remoted)
                print("%s: %d exported, %d implemented: documented" % (l.props.get("soname", l.name), len(exp), rem))
            return 0
        write(a.doc, new)
        return 0

    lib = by_name.get(a.lib)
    if lib is None:
        print("apigen: no description of library '%s' in %s" % (a.lib, a.api_dir), file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    try:
        for kind in a.emit:
            n = lib.name
            if kind == "shim-exports":
                write(os.path.join(a.out, n + ".map"), emit_shim.emit_version_script(lib))
                write(os.path.join(a.out, n + "_table.h"), emit_shim.emit_table_h(lib))
                write(os.path.join(a.out, n + "_forward.cc"), emit_shim.emit_forwarders(lib))
                write(os.path.join(a.out, n + "_core.cc"), emit_shim.emit_core(lib, libs))
                if lib.props.get("procs") == "yes":
                    emit_shim._INCLUDE_DIRS[:] = a.include_dirs
                    write(os.path.join(a.out, n + "_procs.inc"), emit_shim.emit_procs(lib))
                    names = emit_worker.status_names(lib, a.include_dirs)
                    write(os.path.join(a.out, n + "_status_names.inc"),
                          emit_shim.BANNER % lib.path + "".join('{%d, "%s"},\n' % (v, k) for k, v in names))
            elif kind == "client":
                write(os.path.join(a.out, n + "_client.h"), emit_shim.emit_client_h(lib))
                write_shards(a.out, n + "_client", emit_shim.emit_client_cc(lib, a.shards))
            elif kind == "worker":
                write(os.path.join(a.out, n + "_api.h"), emit_worker.emit_api_h(lib))
                write(os.path.join(a.out, n + "_api.cc"), emit_worker.emit_api_cc(lib, a.include_dirs))
                write_shards(a.out, n + "_dispatch", emit_worker.emit_dispatch(lib, a.shards))
            elif kind == "wire":
                write(os.path.join(a.out, n + "_wire.h"), emit_shim.emit_wire_h(lib))
            elif kind == "roundtrip-test":
                write(os.path.join(a.out, n + "_roundtrip_test.cc"), emit_tests.emit_roundtrip(lib, a.include_dirs))
            elif kind == "fuzz-calls":
                write(os.path.join(a.out, n + "_fuzz_calls.cc"), emit_fuzz.emit_fuzz_calls(lib))
            elif kind == "exports-list":
                write(os.path.join(a.out, n + ".exports"), "".join(x + "\n" for x in lib.exported))
            elif kind.startswith("module-"):
                # A sub-library (cuDNN's): its version script, forwarders and export list.
                m = kind[len("module-"):]
                if m not in [x["name"] for x in lib.sublibraries]:
                    print("apigen: %s has no sublibrary %s" % (n, m), file=sys.stderr)
                    return 1
                write(os.path.join(a.out, "%s_%s.map" % (n, m)), emit_shim.emit_version_script(lib, m))
                write(os.path.join(a.out, "%s_%s_forward.cc" % (n, m)), emit_shim.emit_forwarders(lib, m))
                write(os.path.join(a.out, "%s_%s.exports" % (n, m)), "".join(x + "\n" for x in emit_shim.module_exports(lib, m)))
            else:
                print("apigen: unknown --emit %s" % kind, file=sys.stderr)
                return 1
    except ApiError as e:
        print("apigen: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

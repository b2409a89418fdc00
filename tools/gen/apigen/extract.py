"""apigen extract: the first draft of a library's API description, from the library itself.

    python3 tools/gen/apigen/extract.py --lib libcublas.so.13 --header cublas_api.h \
        [--header cublas.h] [-I /usr/local/cuda/include] [--libdir /usr/local/cuda/lib64]

prints one `unsupported` entry per function the shared library exports (objdump -T, its
version node), in export order sorted by name, with its C signature taken from the headers
(preprocessed with `cpp`, so export macros and comments are gone). A function the headers
do not declare is listed without a signature (its stub then takes no arguments and answers
the library's "not supported" status as an int). The draft is then annotated by hand: an
entry that is remoted gets its wire number, class and parameter roles (docs/ARCHITECTURE.md,
"How to add an API function").

Also `--check FILE.api`: lists the exported functions the description lacks or has too many
of (the ABI test does the same at build time against the built library).
"""
import argparse
import os
import re
import subprocess
import sys


def exported(path):
    """(version node, sorted function names) of a shared library's dynamic symbol table."""
    out = subprocess.run(["objdump", "-T", path], check=True, capture_output=True, text=True).stdout
    names, nodes = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 7 or " DF .text" not in line:
            continue
        nodes.add(parts[-2])
        names.add(parts[-1])
    node = sorted(nodes)[0] if len(nodes) == 1 else None
    return node, sorted(n for n in names if not n.startswith("_Z"))


def declarations(headers, include_dirs):
    """name -> (return type, [(type, name)]) for every function the headers declare."""
    src = "".join('#include "%s"\n' % h for h in headers)
    args = ["cpp", "-P", "-x", "c++"] + ["-I%s" % d for d in include_dirs] + ["-"]
    text = subprocess.run(args, input=src, check=True, capture_output=True, text=True).stdout
    text = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", " ", text)
    text = re.sub(r"\[\[(?:[^\]]|\](?!\]))*\]\]", " ", text)
    text = re.sub(r'extern\s+"C"\s*\{?', " ", text)
    text = " ".join(text.split())
    decls = {}
    # A statement ends at ; { or }: a declaration is the last such fragment before `name (`.
    for m in re.finditer(r"([^;{}()]*?)\b(\w+)\s*\(([^;{}]*?)\)\s*;", text):
        ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
        ret = re.sub(r"^(?:extern|static|inline|__inline__|__host__|__device__|\s)+", "", ret).strip()
        if not ret or ret.startswith("typedef") or "(" in params and "(*" in params:
            continue
        decls.setdefault(name, (ret, _params(params)))
    return decls


def _params(text):
    if text in ("", "void"):
        return []
    out = []
    for i, p in enumerate(_split(text)):
        p = p.strip()
        arrays = len(re.findall(r"\[[^\]]*\]", p))
        p = re.sub(r"\s*\[[^\]]*\]", "", p)
        m = re.match(r"^(.*?[\s\*&])(\w+)$", p)
        if m and m.group(1).strip() and m.group(2) not in ("int", "float", "double", "char", "long", "short", "unsigned", "signed", "size_t"):
            ctype, name = m.group(1).strip(), m.group(2)
        else:
            ctype, name = p, "p%d" % i
        ctype = ctype + "*" * arrays
        ctype = re.sub(r"\s*\*\s*", "* ", ctype).strip()
        ctype = re.sub(r"\*\s+\*", "**", ctype).replace("* *", "**").rstrip()
        ctype = re.sub(r"\*\s+const", "* const", ctype)
        ctype = re.sub(r"(\*+)\s*$", r"\1", ctype).replace(" *", "*")
        out.append((ctype, name))
    return out


def _split(text):
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def signature(decl):
    ret, params = decl
    return "%s (%s)" % (ret, ", ".join("%s %s" % (t, n) for t, n in params))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("-I", dest="include", action="append", default=[])
    ap.add_argument("--libdir", default="/usr/local/cuda/lib64")
    ap.add_argument("--check")
    a = ap.parse_args()
    include = a.include or ["/usr/local/cuda/include"]
    path = a.lib if os.path.isabs(a.lib) else os.path.join(a.libdir, a.lib)
    node, names = exported(path)
    if a.check:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from model import parse  # noqa: E402
        lib = parse(a.check)
        described = set(lib.exported)
        missing, extra = sorted(set(names) - described), sorted(described - set(names))
        for n in missing:
            print("not described: %s" % n)
        for n in extra:
            print("not exported by %s: %s" % (a.lib, n))
        return 1 if missing or extra else 0
    decls = declarations(a.header, include)
    print("# Drafted by tools/gen/apigen/extract.py from %s (version node %s, %d functions)." % (a.lib, node, len(names)))
    for n in names:
        print("%s  unsupported" % n)
        if n in decls:
            print("    %s" % signature(decls[n]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""cuBLAS's legacy API (cublas.h without a handle: cublasSgemm(char transa, ..., float alpha, ...))
answered in the client on top of the handle API: an entry `local legacy=TARGET` gets a generated
body that calls TARGET (its _v2 twin) with the process's implicit handle (cublasInit makes it;
shim/src/libs/lib_cublas_legacy.cc), its characters made enums, its scalars passed by address in host
pointer mode, a returned value read from TARGET's last (result) argument, and its status kept
for cublasGetError, as the legacy library does."""
from model import ApiError

# Character arguments of the legacy API and the enum each becomes (lib_cublas_legacy.h).
_CHAR = {"cublasOperation_t": "LegacyOp", "cublasFillMode_t": "LegacyFill", "cublasDiagType_t": "LegacyDiag",
         "cublasSideMode_t": "LegacySide"}


def _bare(t):
    return t.replace("const ", "").strip()


def arguments(e, target):
    """The argument expressions of the call of `target` (its handle first), and whether the
    legacy function returns the value of target's last argument."""
    tp = target.params[1:]
    lp = list(e.params)
    returns = e.ret != "void"
    if returns:
        tp = tp[:-1]
    names = {p.name: p for p in lp}
    args = []
    li = 0
    for t in tp:
        if li >= len(lp):
            # The legacy in-place trmm writes B: the handle API's out-of-place C is B.
            alias = {"C": "B", "ldc": "ldb"}.get(t.name.rstrip("_"))
            if alias is None or alias not in names and alias + "_" not in names:
                raise ApiError("%s: legacy=%s has an argument %s the legacy call lacks" % (e.name, target.name, t.name))
            args.append(names[alias].name if alias in names else alias + "_")
            continue
        a = lp[li]
        li += 1
        if a.ctype == t.ctype or (a.ctype.endswith("*") and t.ctype.endswith("*") and _bare(a.ctype) == _bare(t.ctype)):
            args.append(a.name)
        elif a.ctype == "char" and t.ctype in _CHAR:
            args.append("remora::gen::cublas::%s(%s)" % (_CHAR[t.ctype], a.name))
        elif t.ctype.endswith("*") and _bare(t.ctype[:-1]) == a.ctype:
            args.append("&%s" % a.name)
        else:
            raise ApiError("%s: legacy=%s: %s %s cannot become %s" % (e.name, target.name, a.ctype, a.name, t.ctype))
    if li != len(lp):
        raise ApiError("%s: legacy=%s takes fewer arguments than the legacy call" % (e.name, target.name))
    return args, returns


def emit(e, lib):
    target = lib.entry(e.attrs["legacy"])
    if target is None or not target.signed:
        raise ApiError("%s: legacy=%s names no entry with a signature" % (e.name, e.attrs["legacy"]))
    args, returns = arguments(e, target)
    out = ['extern "C" %s {\n' % e.decl()]
    out.append("  cublasHandle_t h = remora::gen::cublas::LegacyHandle();\n")
    if returns:
        out.append("  %s result{};\n" % e.ret)
        args = args + ["&result"]
    out.append("  remora::gen::cublas::LegacyStatus(h == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : ::%s(%s));\n"
               % (target.name, ", ".join(["h"] + args)))
    if returns:
        out.append("  return result;\n")
    out.append("}\n")
    return "".join(out)

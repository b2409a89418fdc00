"""Shim-side outputs: the exported library (version script, core table, forwarders, the
generated stubs inside the core) and the client stubs of libraries whose calls travel."""
import re

from model import ApiError, shards
import emit_legacy
import roles

BANNER = "// Generated from %s by tools/gen/apigen - do not edit.\n"


def includes(lib):
    """NVIDIA's headers, then the description's own (`include`: types a header cannot bring
    in beside the others, cublas.api's cuBLASXt types)."""
    return "".join("#include <%s>\n" % h for h in lib.props.get("header", "").split()) + \
        "".join('#include "%s"\n' % h for h in lib.props.get("include", "").split())


def using_hooks(lib):
    ns = lib.props.get("hooks_ns")
    return "using namespace %s;  // the description's size expressions\n" % ns if ns else ""


def table_name(lib):
    return "remora_%s_table" % lib.name


def getter(lib):
    return "remora_core_%s_table_v1" % lib.name


def undef(name):
    # Some driver names are macros in cuda.h (cuMemAlloc -> cuMemAlloc_v2): define the real one.
    return "#ifdef %s\n#undef %s\n#endif\n" % (name, name)


def modules(lib):
    """(module, soname, version node) of each shared library the description makes: the
    front library, and the sub-libraries (cuDNN's) that export part of it."""
    out = [("front", lib.props["soname"], lib.props.get("version"))]
    for sub in lib.sublibraries:
        out.append((sub["name"], sub["soname"], sub.get("version")))
    return out


def module_exports(lib, module):
    return [n for e in lib.entries if e.in_module(module) for n in e.exported_names]


def emit_version_script(lib, module="front"):
    m = [x for x in modules(lib) if x[0] == module][0]
    node = m[2]
    syms = "".join("    %s;\n" % n for n in module_exports(lib, module))
    if node:
        return "%s {\n  global:\n%s  local: *;\n};\n" % (node, syms)
    return "{\n  global:\n%s  local: *;\n};\n" % syms


def emit_table_h(lib):
    out = [BANNER % lib.path, "// The functions of %s, as the Remora core implements them.\n" % lib.props["soname"],
           "#pragma once\n", "#include <cstdint>\n", includes(lib), lib.props.get("prelude", "").replace("\\n", "\n"), "\n",
           'extern "C" {\n', "struct %s {\n" % table_name(lib), "  uint32_t size;  // sizeof(struct): a core and its forwarders must agree\n",
           "  int (*unsupported)(const char* name);  // for entries without a signature\n"]
    for e in lib.entries:
        if not e.signed:
            continue
        for n in e.exported_names:
            out.append("  %s (*f_%s)(%s);\n" % (e.ret, n, ", ".join(p.ctype for p in e.params)))
    out.append("};\n")
    out.append("const struct %s* %s(void);\n" % (table_name(lib), getter(lib)))
    out.append("}\n")
    return "".join(out)


def emit_forwarders(lib, module="front"):
    """The exported library: each function forwards to the core through its table."""
    t = table_name(lib)
    soname = [x for x in modules(lib) if x[0] == module][0][1]
    out = [BANNER % lib.path,
           "// %s: every exported function forwards to libremora-core.so, which holds the one\n" % soname,
           "// process-wide session, so all of Remora's libraries in a process share it.\n",
           '#pragma GCC diagnostic ignored "-Wdeprecated-declarations"\n',
           '#include "%s_table.h"\n\n' % lib.name,
           "namespace {\n", "const %s* g_table;\n" % t,
           "inline const %s* T() {\n" % t,
           "  const %s* t = __atomic_load_n(&g_table, __ATOMIC_ACQUIRE);\n" % t,
           "  if (__builtin_expect(t == nullptr, 0)) {\n",
           "    t = %s();\n" % getter(lib),
           "    __atomic_store_n(&g_table, t, __ATOMIC_RELEASE);\n  }\n  return t;\n}\n",
           "__attribute__((constructor)) void Init() { (void)T(); }\n",
           "}  // namespace\n\n",
           "#define REMORA_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n\n"]
    for e in lib.entries:
        if not e.in_module(module):
            continue
        for n in e.exported_names:
            out.append(undef(n))
            if not e.signed:
                out.append('REMORA_EXPORT int %s() { return T()->unsupported("%s"); }\n' % (n, n))
                continue
            args = ", ".join(p.name for p in e.params)
            params = ", ".join("%s %s" % (p.ctype, p.name) for p in e.params)
            ret = "" if e.ret == "void" else "return "
            out.append("REMORA_EXPORT %s %s(%s) { %sT()->f_%s(%s); }\n" % (e.ret, n, params, ret, n, args))
    return "".join(out)


def emit_core(lib, libs):
    """Inside libremora-core.so: the generated stubs (unsupported, via) and the table."""
    st = lib.status
    out = [BANNER % lib.path, "// The ABI includes deprecated functions, which must still be defined.\n",
           '#pragma GCC diagnostic ignored "-Wdeprecated-declarations"\n',
           "#include <cstring>\n\n", '#include "%s_table.h"\n' % lib.name, '#include "remote_call.h"\n']
    targets = sorted({_via_lib(e, libs).name for e in lib.entries if e.cls == "via" and _via_entry(e, libs).travels})
    if any(e.travels and not e.internal for e in lib.entries):
        targets = sorted(set(targets) | {lib.name})
    for tl in targets:
        out.append('#include "%s_client.h"\n' % tl)
    out.append("\nusing remora::Status;\n\n")
    if "nomem" in st:
        out.append("namespace {\n// %s's statuses for what Remora reports in the runtime's vocabulary.\n" % lib.name)
        out.append("constexpr remora::shim::LibCodes kCodes{%s, %s, %s, %s, %s, %s};\n}  // namespace\n\n"
                   % (st["ok"], st["invalid"], st["lost"], st["unsupported"], st["nomem"], st.get("internal", st["lost"])))
    for e in lib.entries:
        names = e.exported_names
        if e.internal:
            continue
        if e.cls == "local" and "legacy" in e.attrs:
            out.append("// %s: the legacy API on top of %s (emit_legacy.py)\n" % (e.name, e.attrs["legacy"]))
            out.append(emit_legacy.emit(e, lib))
            continue
        if e.cls in ("custom", "local") or (e.travels and e.attrs.get("export") == "hand"):
            out.append("// %s: %s\n" % (e.name, "hand-written (custom)" if e.cls == "custom" else
                                         "hand-written around its generated stub" if e.travels else "answered locally"))
            for n in names:
                out.append('extern "C" %s;\n' % e.decl(n))
            continue
        if e.travels:
            # Exported straight from its generated client stub.
            for n in names:
                per_thread = "true" if n.endswith("_ptsz") or n.endswith("_ptds") else "false"
                args = "".join(", %s" % p.name for p in e.params)
                out.append('extern "C" %s {\n' % e.decl(n))
                out.append('  Status st = remora::gen::%s::%s(remora::shim::CallCtx{%s, "%s"}%s);\n' % (lib.name, e.name, per_thread, n, args))
                if "nomem" in st:
                    # `finish F`: the library's own FinishLib (NCCL keeps the message for ncclGetLastError).
                    fin = lib.props.get("finish", "remora::shim::FinishLib")
                    out.append('  return static_cast<%s>(%s(remora::Domain::k%s, kCodes, st, "%s"));\n}\n' % (st["type"], fin, _dom(lib), n))
                else:
                    out.append('  return static_cast<%s>(remora::shim::FinishApi(remora::Domain::k%s, st, "%s"));\n}\n' % (st["type"], _dom(lib), n))
            continue
        if e.cls in ("unsupported", "refused"):
            for n in names:
                if e.signed and e.ret != st["type"] and "nomem" in st:
                    # Not a status (a legacy BLAS routine, a name query): logged once, and
                    # the type's zero value.
                    out.append('extern "C" %s {\n' % e.decl(n))
                    for p in e.params:
                        out.append("  (void)%s;\n" % p.name)
                    out.append('  (void)%s;\n' % _not_served(e, lib, n))
                    if e.ret != "void":
                        out.append("  return {};\n")
                    out.append("}\n")
                    continue
                if e.signed:
                    if e.ret != st["type"]:
                        raise ApiError("%s: an unsupported entry must return %s" % (e.name, st["type"]))
                    out.append('extern "C" %s {\n' % e.decl(n))
                    for p in e.params:
                        out.append("  (void)%s;\n" % p.name)
                    out.append('  return static_cast<%s>(%s);\n}\n' % (st["type"], _not_served(e, lib, n)))
            continue
        if e.cls == "via":
            target = _via_entry(e, libs)
            tlib = target.lib
            if len(target.params) != len(e.params):
                raise ApiError("%s: via=%s has %d parameters, %s has %d" % (e.name, target.name, len(target.params), e.name, len(e.params)))
            if not target.travels:
                # Another exported entry of this process (same arguments): call it. Another
                # library's status is converted here, as the caller's error (its last error).
                for n in names:
                    args = ", ".join("remora::shim::ViaCast<%s>(%s)" % (tp.ctype, p.name) for tp, p in zip(target.params, e.params))
                    if tlib is lib or tlib.status["type"] == st["type"]:
                        out.append('extern "C" %s { return ::%s(%s); }\n' % (e.decl(n), target.name, args))
                        continue
                    out.append('extern "C" %s {\n' % e.decl(n))
                    out.append("  auto r = ::%s(%s);\n" % (target.name, args))
                    out.append("  if (r == %s) return %s;\n" % (tlib.status["ok"], st["ok"]))
                    out.append('  return static_cast<%s>(remora::shim::FinishApi(remora::Domain::k%s, '
                               'remora::Status(remora::Domain::k%s, static_cast<uint32_t>(r), "%s failed"), "%s"));\n}\n'
                               % (st["type"], _dom(lib), _dom(tlib), target.name, n))
                continue
            for n in names:
                per_thread = "true" if n.endswith("_ptsz") or n.endswith("_ptds") else "false"
                args = ", ".join("remora::shim::ViaCast<%s>(%s)" % (tp.ctype, p.name) for tp, p in zip(target.params, e.params))
                sep = ", " if args else ""
                out.append('extern "C" %s {\n' % e.decl(n))
                out.append('  Status st = remora::gen::%s::%s(remora::shim::CallCtx{%s, "%s"}%s%s);\n'
                           % (tlib.name, target.name, per_thread, n, sep, args))
                out.append("  return static_cast<%s>(remora::shim::FinishApi(remora::Domain::k%s, st, \"%s\"));\n}\n" % (st["type"], _dom(lib), n))
            continue
        raise ApiError("%s: class %s cannot be exported from %s" % (e.name, e.cls, lib.name))
    # The table.
    out.append("\nnamespace {\n")
    refused = [(n, e.attrs["reason"]) for e in lib.entries if e.cls == "refused" and not e.signed for n in e.exported_names]
    out.append("// The exports without a signature that are refused, and why (model.py REFUSAL_REASONS).\n")
    out.append("const char* const kRefused[][2] = {\n")
    for n, reason in refused:
        out.append('    {"%s", "%s"},\n' % (n, reason))
    out.append('    {nullptr, nullptr}};\n')
    out.append("int UnsupportedUntyped(const char* name) {\n")
    out.append("  for (auto* r = kRefused; r[0][0] != nullptr; r++)\n")
    out.append("    if (std::strcmp(r[0][0], name) == 0)\n")
    out.append("      return static_cast<int>(remora::shim::Refused(remora::Domain::k%s, %s, name, r[0][1]));\n" % (_dom(lib), st["unsupported"]))
    out.append("  return static_cast<int>(remora::shim::NotSupported(remora::Domain::k%s, %s, name));\n}\n" % (_dom(lib), st["unsupported"]))
    out.append("const %s kTable = {\n" % table_name(lib))
    out.append("    sizeof(%s),\n    &UnsupportedUntyped,\n" % table_name(lib))
    for e in lib.entries:
        if not e.signed:
            continue
        for n in e.exported_names:
            out.append("    &::%s,\n" % n)
    out.append("};\n}  // namespace\n\n")
    out.append('extern "C" __attribute__((visibility("default"))) const %s* %s(void) { return &kTable; }\n' % (table_name(lib), getter(lib)))
    return "".join(out)


def _not_served(e, lib, n):
    """The call that answers an unsupported or refused entry (logged once)."""
    st = lib.status
    if e.cls == "refused":
        return 'remora::shim::Refused(remora::Domain::k%s, %s, "%s", "%s")' % (_dom(lib), st["unsupported"], n, e.attrs["reason"])
    return 'remora::shim::NotSupported(remora::Domain::k%s, %s, "%s")' % (_dom(lib), st["unsupported"], n)


def _dom(lib):
    d = lib.props.get("domain", lib.name)
    return d[0].upper() + d[1:]


def _via_entry(e, libs):
    target = e.attrs["via"]
    for l in libs:
        t = l.entry(target)
        if t is not None:
            return t
    raise ApiError("%s: via=%s names no entry of any description" % (e.name, target))


def _via_lib(e, libs):
    return _via_entry(e, libs).lib


def emit_client_h(lib):
    out = [BANNER % lib.path,
           "// Client stubs of %s's remoted calls: validate, encode, send, decode. They return a\n" % lib.name,
           "// Status (domain %s); the exported entry points convert it to the caller's type.\n" % lib.props.get("domain", lib.name),
           "#pragma once\n",
           "// (The ABI includes deprecated types and functions.)\n",
           '#pragma GCC diagnostic push\n#pragma GCC diagnostic ignored "-Wdeprecated-declarations"\n',
           includes(lib), lib.props.get("prelude", "").replace("\\n", "\n"), "\n",
           "".join('#include "%s"\n' % h for h in lib.props.get("hooks", "").split()),
           '#include "remote_call.h"\n', '#include "%s_wire.h"\n' % lib.name,
           "".join('#include "%s"\n' % h for h in lib.props.get("client_include", "").split()),
           "\nnamespace remora::gen::%s {\n\n" % lib.name]
    for e in lib.entries:
        if not e.travels:
            continue
        params = "".join(", %s %s" % (p.ctype, p.name) for p in e.params)
        out.append("Status %s(const shim::CallCtx& cc%s);\n" % (e.name, params))
    out.append("\n}  // namespace remora::gen::%s\n" % lib.name)
    out.append("#pragma GCC diagnostic pop\n")
    return "".join(out)


def emit_client_cc(lib, nshards=1):
    """The client stubs, in `nshards` translation units (<lib>_client.cc, then
    <lib>_client_<i>.cc for i = 2..nshards), so that a parallel build compiles a large
    library's side by side. Returns the files' texts."""
    stubs = [e for e in lib.entries if e.travels and not e.hand]  # a `hand` entry's stub is hand-written
    parts = shards(stubs, nshards)
    return [_client_cc_part(lib, part, i, len(parts)) for i, part in enumerate(parts, 1)]


def _client_cc_part(lib, entries, i, n):
    out = [BANNER % lib.path, '#pragma GCC diagnostic ignored "-Wdeprecated-declarations"\n', '#include "%s_client.h"\n\n' % lib.name, "namespace remora::gen::%s {\n\n" % lib.name,
           "using shim::CallClass;\n", using_hooks(lib), "\n"]
    if n > 1:
        out.append("// Part %d of %d of the generated client stubs.\n\n" % (i, n))
    for e in entries:
        params = "".join(", %s %s" % (p.ctype, p.name) for p in e.params)
        out.append("Status %s(const shim::CallCtx& cc%s) {\n" % (e.name, params))
        out.append("  shim::RemoteCall c(cc, kLibrary, %d, CallClass::k%s, Domain::k%s);\n" % (e.number, e.cls.capitalize(), _dom(lib)))
        if "memo" in e.attrs:
            out.append("  c.Memoize();\n")
        if "answer_if" in e.attrs:
            # An ordered call the client waits for when the description's hook says its status
            # decides what the application does next (cuDNN's finalize of a plan, say).
            out.append("  if (%s(%s)) c.Answer();\n" % (e.attrs["answer_if"], ", ".join(p.name for p in e.params)))
        if "check" in e.attrs:
            # A hand-written check of the arguments in the library's vocabulary, before any is sent.
            out.append("  RETURN_IF_ERROR(%s(c%s));\n" % (e.attrs["check"], "".join(", " + p.name for p in e.params)))
        if "idle" in e.attrs:
            out.append("  c.AnswerIfIdle();\n")
        for p in e.params:
            for s in roles.client_encode(e, p):
                out.append("  %s\n" % s.replace("reinterpret_cast<uint64_t>((uintptr_t)", "static_cast<uint64_t>((uintptr_t)"))
        decodes = [s for p in e.params for s in roles.client_decode(e, p)]
        after = _client_after(e)
        ret = "Status st = " if after else "return "
        if decodes:
            out.append("  %sc.Invoke([&](api::ArgReader& r) -> Status {\n" % ret)
            for s in decodes:
                out.append("    %s\n" % s)
            out.append("    return r.Finish();\n  });\n")
        else:
            out.append("  %sc.Invoke();\n" % ret)
        if after:
            out.append("  if (!st.ok()) return st;\n")
            for s in after:
                out.append("  %s\n" % s)
            out.append("  return st;\n")
        out.append("}\n\n")
    out.append("}  // namespace remora::gen::%s\n" % lib.name)
    return "".join(out)


def emit_wire_h(lib):
    """The wire numbers of a library's travelling entries, for both ends and for tests."""
    out = [BANNER % lib.path, "#pragma once\n#include <cstdint>\n\n", "namespace remora::gen::%s {\n\n" % lib.name,
           "inline constexpr uint16_t kLibrary = %s;\n\n" % lib.props["wire"], "enum Fn : uint32_t {\n"]
    for e in sorted((e for e in lib.entries if e.travels), key=lambda e: e.number):
        out.append("  k_%s = %d,\n" % (e.name, e.number))
    out.append("};\n\n")
    # The names and classes of the numbers, for the client's call census (shim/src/link/census.cc).
    out.append("// The function a wire number stands for and its class ('s'ync, 'o'rdered, 'w'ait), or nullptr.\n")
    out.append("inline const char* FnName(uint32_t n, char* cls = nullptr) {\n  switch (n) {\n")
    for e in sorted((e for e in lib.entries if e.travels), key=lambda e: e.number):
        out.append('    case %d: if (cls) *cls = \'%s\'; return "%s";\n' % (e.number, e.cls[0], e.name))
    out.append("    default: return nullptr;\n  }\n}\n\n")
    out.append("}  // namespace remora::gen::%s\n" % lib.name)
    return "".join(out)


def _client_after(e):
    """What the client does once a call went out (posted) or succeeded (answered): objects
    the call created or ended, objects it changed, and the description's mirror hook."""
    out = []
    for p in e.params:
        if p.role == "newhandle":
            k = roles.lib_kind(e, p)
            out.append("c.AdoptObject(%s_id, HandleKind::k%s);" % (p.name, k))
            out.append("*%s = shim::HandleFromBits<%s>(HandleKind::k%s, %s_id);" % (p.name, p.pointee, k, p.name))
    for p in e.params:
        if p.role == "handle" and roles.is_lib_handle(p) and "sets" in p.flags:
            out.append("c.TouchObject(shim::HandleBits(HandleKind::k%s, %s));" % (roles.lib_kind(e, p), p.name))
    if "mirror" in e.attrs:
        out.append("%s(%s);" % (e.attrs["mirror"], ", ".join(p.name for p in e.params)))
    for p in e.params:
        if p.role == "handle" and roles.is_lib_handle(p) and "destroys" in p.flags:
            out.append("c.ForgetObject(shim::HandleBits(HandleKind::k%s, %s));" % (roles.lib_kind(e, p), p.name))
    return out


def emit_procs(lib):
    """The name -> function table of cuGetProcAddress: every exported function, under its base
    name (cuMemAlloc resolves to cuMemAlloc_v2 as cuda.h's macros say) and its per-thread
    variant. Included by the hand-written proc-address code of the core."""
    exported = {n for e in lib.entries for n in e.exported_names}
    macros = {}
    for h in lib.props.get("header", "").split():
        for d in _INCLUDE_DIRS:
            try:
                text = open("%s/%s" % (d, h)).read()
            except OSError:
                continue
            for m in re.finditer(r"^#define\s+(cu\w+)\s+(?:__CUDA_API_(PTSZ|PTDS)\((\w+)\)|(\w+))\s*$", text, re.M):
                macros[m.group(1)] = (m.group(3) or m.group(4), m.group(2))
            break
    rows = {}
    for n in sorted(exported):
        base = re.sub(r"_(ptsz|ptds)$", "", n)
        if base != n and base in exported:
            continue
        rows.setdefault(base, [base, None])
    for name, (target, kind) in macros.items():
        if target not in exported:
            continue
        pt = None
        for suffix in ("_ptsz", "_ptds"):
            if target + suffix in exported:
                pt = target + suffix
        rows[name] = [target, pt]
    for base, row in rows.items():
        if row[1] is None:
            for suffix in ("_ptsz", "_ptds"):
                if row[0] + suffix in exported:
                    row[1] = row[0] + suffix
    signed = {n for e in lib.entries if e.signed for n in e.exported_names}
    out = [BANNER % lib.path, "// {name as asked, default function, per-thread-default-stream function or nullptr}\n"]
    for name in sorted(rows):
        target, pt = rows[name]
        f = lambda n: ("reinterpret_cast<void*>(&::%s)" % n) if n in signed else "nullptr"
        out.append('{"%s", %s, %s},\n' % (name, f(target), f(pt) if pt else "nullptr"))
    return "".join(out)


_INCLUDE_DIRS = []

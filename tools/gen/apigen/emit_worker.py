"""Worker-side outputs: the library's function table as an interface (one virtual per
remoted function; the default answers the library's "not supported"), its implementation
over the real library resolved by name, and the dispatch of each remoted call."""
import re

from model import ApiError, shards
import roles

BANNER = "// Generated from %s by tools/gen/apigen - do not edit.\n"


def includes(lib):
    return "".join("#include <%s>\n" % h for h in lib.props.get("header", "").split()) + \
        "".join('#include "%s"\n' % h for h in lib.props.get("include", "").split())


def _dom(lib):
    d = lib.props.get("domain", lib.name)
    return d[0].upper() + d[1:]


def travelling(lib):
    return sorted((e for e in lib.entries if e.travels), key=lambda e: e.number)


def called(lib):
    """The library's functions the worker calls: travelling entries (a wait entry only waits
    for its stream or event; an internal one is Remora's own), and those a hand-written
    worker hook calls (`wapi`)."""
    out = [e for e in travelling(lib) if e.cls != "wait" and not e.internal]
    out += sorted((e for e in lib.entries if "wapi" in e.attrs and not e.travels and e.signed), key=lambda e: e.name)
    return out


def _is_obj(p):
    return roles.is_lib_handle(p)


def _hook_args(e, created):
    """Arguments of a worker hook: the OpContext, then each parameter - a library object as
    its LibObject* (for a created one, `created`'s value), the rest as the library gets it."""
    args = ["x"]
    for p in e.params:
        if p.role == "newhandle":
            args.append(created(p))
        elif _is_obj(p):
            args.append("%s_obj" % p.name)
        else:
            args.append(roles.worker_arg(e, p))
    return ", ".join(args)


def status_names(lib, include_dirs):
    """Enumerator names of the library's status type, parsed from its header."""
    st = lib.status["type"]
    for h in lib.props.get("header", "").split() + lib.props.get("status_header", "").split():
        for d in include_dirs:
            try:
                text = open("%s/%s" % (d, h)).read()
            except OSError:
                continue
            text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
            text = re.sub(r"//[^\n]*", "", text)
            for m in re.finditer(r"typedef\s+enum\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
                if m.group(2) == st:
                    return _enumerators(m.group(1))
    return []


def _enumerators(body):
    out, value = [], -1
    for part in body.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"(\w+)\s*(?:=\s*(.+))?$", part, re.S)
        if not m:
            continue
        if m.group(2) is not None:
            try:
                value = int(m.group(2).strip().rstrip("uUlL"), 0)
            except ValueError:
                continue
        else:
            value += 1
        out.append((m.group(1), value))
    return out


def emit_api_h(lib):
    ns = lib.name
    out = [BANNER % lib.path,
           "// The %s functions the worker runs for clients, as an interface: the real library\n" % lib.props["soname"],
           "// (DlApi) or an emulation (the host backend) implements it. Every virtual defaults to\n",
           "// the library's \"not supported\" status. Used by the executor's single thread.\n",
           "#pragma once\n", '#pragma GCC diagnostic push\n#pragma GCC diagnostic ignored "-Wdeprecated-declarations"\n',
           "#include <functional>\n#include <string>\n#include <vector>\n", includes(lib),
           lib.props.get("prelude", "").replace("\\n", "\n"), "\n",
           "namespace remora::worker::gen::%s {\n\n" % ns, "class Api {\n public:\n  virtual ~Api() = default;\n"]
    for e in called(lib):
        out.append("  virtual %s;\n" % e.decl())
    out.append("  // The symbolic name of a status value (\"%s\"), or nullptr.\n" % lib.status["ok"])
    out.append("  static const char* StatusName(int code);\n")
    out.append("  // Whether the library lacks the function `name` (the real one does not export it; an\n")
    out.append("  // emulation lacks none: what it does not override answers \"not supported\").\n")
    out.append("  virtual bool Lacks(const char* name) const { (void)name; return false; }\n\n protected:\n")
    out.append("  virtual %s NotSupported(const char* name);\n};\n\n" % lib.status["type"])
    out.append("// The real library, each function resolved by name.\nclass DlApi : public Api {\n public:\n")
    out.append("  // Resolves every function; returns the names `resolve` did not find (they answer\n")
    out.append("  // \"not supported\").\n")
    out.append("  std::vector<std::string> Load(const std::function<void*(const char* name)>& resolve);\n")
    out.append("  bool Lacks(const char* name) const override;\n")
    for e in called(lib):
        out.append("  %s override;\n" % e.decl())
    out.append("\n private:\n  std::vector<std::string> missing_;\n")
    for e in called(lib):
        out.append("  %s (*p_%s)(%s) = nullptr;\n" % (e.ret, e.name, ", ".join(p.ctype for p in e.params)))
    out.append("};\n\n}  // namespace remora::worker::gen::%s\n" % ns)
    out.append("#pragma GCC diagnostic pop\n")
    return "".join(out)


def emit_api_cc(lib, include_dirs):
    ns = lib.name
    st = lib.status
    out = [BANNER % lib.path, '#pragma GCC diagnostic ignored "-Wdeprecated-declarations"\n', "#include <functional>\n#include <memory>\n#include <string>\n#include <type_traits>\n#include <vector>\n\n",
           '#include "%s_api.h"\n\n' % lib.name,
           "namespace remora::worker::gen::%s {\n\n" % ns]
    # The compiler checks each description against NVIDIA's header.
    # (static_cast picks the overload of that type where a C++ header adds inline overloads,
    # as cublas_api.h does for cublasGemmEx; it fails to compile if none has the type.)
    for e in called(lib):
        out.append("static_assert(std::is_same_v<decltype(static_cast<%s>(&::%s)), %s>,\n              \"%s: %s does not match %s\");\n"
                   % (e.fnptr_type(), e.name, e.fnptr_type(), lib.path.split("/")[-1], e.name, lib.props.get("header")))
    out.append("\n%s Api::NotSupported(const char*) { return %s; }\n\n" % (st["type"], st["unsupported"]))
    for e in called(lib):
        params = ", ".join(p.ctype for p in e.params)
        if e.ret == "void":  # (wapi) nothing to answer
            out.append('void Api::%s(%s) {}\n' % (e.name, params))
            continue
        if e.ret != st["type"]:  # a version query (wapi): the type's zero
            out.append('%s Api::%s(%s) { return %s{}; }\n' % (e.ret, e.name, params, e.ret))
            continue
        out.append('%s Api::%s(%s) { return NotSupported("%s"); }\n' % (e.ret, e.name, params, e.name))
    names = status_names(lib, include_dirs)
    out.append("\nconst char* Api::StatusName(int code) {\n  switch (code) {\n")
    seen = set()
    for n, v in names:
        if v in seen:
            continue
        seen.add(v)
        out.append('    case %d: return "%s";\n' % (v, n))
    out.append("    default: return nullptr;\n  }\n}\n\n")
    out.append("std::vector<std::string> DlApi::Load(const std::function<void*(const char* name)>& resolve) {\n")
    out.append("  std::vector<std::string> missing;\n")
    for e in called(lib):
        out.append('  p_%s = reinterpret_cast<decltype(p_%s)>(resolve("%s"));\n' % (e.name, e.name, e.name))
        out.append('  if (p_%s == nullptr) missing.push_back("%s");\n' % (e.name, e.name))
    out.append("  missing_ = missing;\n  return missing;\n}\n\n")
    out.append("bool DlApi::Lacks(const char* name) const {\n")
    out.append("  for (const std::string& m : missing_)\n    if (m == name) return true;\n  return false;\n}\n\n")
    for e in called(lib):
        params = ", ".join("%s %s" % (p.ctype, p.name) for p in e.params)
        args = ", ".join(p.name for p in e.params)
        if e.ret == "void":
            out.append('void DlApi::%s(%s) { if (p_%s) p_%s(%s); }\n' % (e.name, params, e.name, e.name, args))
            continue
        fallback = '%s{}' % e.ret if e.ret != st["type"] else 'NotSupported("%s")' % e.name
        out.append('%s DlApi::%s(%s) { return p_%s ? p_%s(%s) : %s; }\n'
                   % (e.ret, e.name, params, e.name, e.name, args, fallback))
    if lib.props.get("role") == "library":
        # What the worker's library_tables.cc calls by the index (emit_index.py), without this
        # header: the real library bound through `resolve`, handed out as its Api.
        out.append("\nstd::shared_ptr<void> LoadDlApi(const std::function<void*(const char*)>& resolve, "
                   "std::vector<std::string>* missing) {\n"
                   "  auto api = std::make_shared<DlApi>();\n  *missing = api->Load(resolve);\n"
                   "  return std::shared_ptr<void>(api, static_cast<Api*>(api.get()));\n}\n")
    out.append("\n}  // namespace remora::worker::gen::%s\n" % ns)
    return "".join(out)


def _dispatch_prelude(lib):
    extra = "".join('#include "%s"\n' % h for h in (lib.props.get("hooks", "") + " " + lib.props.get("worker_include", "")).split())
    return [BANNER % lib.path, '#pragma GCC diagnostic ignored "-Wdeprecated-declarations"\n',
            "#include <string>\n#include <vector>\n\n", '#include "worker/calls/generated_call.h"\n', extra,
            '#include "%s_api.h"\n\n' % lib.name]


def _using_hooks(lib):
    if lib.props.get("hooks_ns"):
        return ["using namespace %s;  // the description's size expressions\n\n" % lib.props["hooks_ns"]]
    return []


def emit_dispatch(lib, nshards=1):
    """The dispatch of the library's travelling calls: `nshards` translation units, so that a
    parallel build compiles a large library's side by side. The first holds the operations of
    the first part, the table and the session's object release; each other one (returned after
    it, for <lib>_dispatch_<i>.cc, i = 2..nshards) the operations of its part."""
    parts = shards([e for e in travelling(lib) if not e.hand], nshards)
    files = [emit_dispatch_main(lib, parts[0], [e for part in parts[1:] for e in part])]
    for i, part in enumerate(parts[1:], 2):
        out = _dispatch_prelude(lib) + ["namespace remora::worker::gen::%s {\n\n" % lib.name] + _using_hooks(lib)
        out.append("// Part %d of %d of the generated operations (%s_dispatch.cc holds the table).\n\n" % (i, len(parts), lib.name))
        for e in part:
            _emit_op(lib, e, out)
        out.append("}  // namespace remora::worker::gen::%s\n" % lib.name)
        files.append("".join(out))
    return files


def emit_dispatch_main(lib, mine, elsewhere):
    ns = lib.name
    out = _dispatch_prelude(lib) + ["namespace remora::worker::gen::%s {\nnamespace {\n\n" % ns]
    hand = [e for e in travelling(lib) if e.hand]
    if hand or elsewhere:
        out.append("}  // namespace\n\n")
        if hand:
            out.append("// Hand-written operations (`hand` entries), defined in server/worker/.\n")
            for e in hand:
                out.append("Status Op_%s(OpContext& x);\n" % e.name)
        if elsewhere:
            out.append("// Generated operations of the other parts (%s_dispatch_<i>.cc).\n" % ns)
            for e in elsewhere:
                out.append("Status Op_%s(OpContext& x);\n" % e.name)
        out.append("\nnamespace {\n\n")
    out += _using_hooks(lib)
    for e in mine:
        _emit_op(lib, e, out)
    _emit_dispatch_table(lib, out)
    return "".join(out)


def _emit_op(lib, e, out):
    """One generated operation: decode, check, call (or the hooks), encode."""
    st = lib.status
    out.append("// @%d %s (%s)\n" % (e.number, e.name, e.cls))
    out.append("Status Op_%s(OpContext& x) {\n" % e.name)
    for p in e.params:
        for s in roles.worker_decode(e, p):
            out.append("  %s\n" % s)
    out.append("  RETURN_IF_ERROR(x.EndArgs());\n")
    # (Arrays are checked first: other extents may read them; an extent the library's size
    # query answers is computed last: the query may take any other argument, checked first.)
    for p in sorted(e.params, key=lambda p: 0 if p.role == "array" else 2 if p.role in ("devptr", "hostwork") and "query" in p.args else 1):
        for s in roles.worker_check(e, p):
            out.append("  %s\n" % s)
    out.append("  RETURN_IF_ERROR(x.Ready());\n")
    if e.cls == "wait":
        # Answered when the stream or event gets here (calls/generated_call.cc); nothing to call.
        for p in e.params:
            out.append("  (void)%s;\n" % (p.name if p.role in ("stream", "handle", "device", "devptr", "value") else p.name + "_v"))
        out.append("  return Status::Ok();\n}\n\n")
        return
    args = ", ".join(roles.worker_arg(e, p) for p in e.params)
    if "measure" in e.attrs:
        out.append("  const uint64_t measure0 = x.MeasureBegin();\n")
    if "wcall" in e.attrs:
        out.append("  RETURN_IF_ERROR(%s(%s));\n" % (e.attrs["wcall"], _hook_args(e, lambda p: "%s_id" % p.name)))
    else:
        if "worker" in e.attrs:
            # Hand-written: bookkeeping around the real call (declared in the worker_include header).
            out.append("  %s r = %s(x%s);\n" % (e.ret, e.attrs["worker"], "".join(", " + a for a in args.split(", ") if a)))
        else:
            out.append("  %s r = x.Library<Api>().%s(%s);\n" % (e.ret, e.name, args))
        out.append("  if (r != %s) return x.LibraryError(Domain::k%s, static_cast<uint32_t>(r), Api::StatusName(static_cast<int>(r)), \"%s\");\n"
                   % (st["ok"], _dom(lib), e.name))
    created = [p for p in e.params if p.role == "newhandle"]
    for p in created:
        if "wcall" in e.attrs:  # the hook adopted it
            out.append("  [[maybe_unused]] LibObject* %s_obj = x.FindObject(%s_id);\n" % (p.name, p.name))
        else:
            out.append("  [[maybe_unused]] LibObject* %s_obj = x.AdoptObject(HandleKind::k%s, %s_id, %s_v);\n" % (p.name, roles.lib_kind(e, p), p.name, p.name))
    if "measure" in e.attrs:
        objs = [p for p in created] or [p for p in e.params if _is_obj(p)]
        obj = "%s_obj" % objs[0].name if objs else "nullptr"
        out.append("  RETURN_IF_ERROR(x.MeasureEnd(measure0, %s, Domain::k%s, %s, %s));\n"
                   % (obj, _dom(lib), "true" if created else "false", st.get("nomem", st["lost"])))
    if "wafter" in e.attrs:
        out.append("  RETURN_IF_ERROR(%s(%s));\n" % (e.attrs["wafter"], _hook_args(e, lambda p: "%s_obj" % p.name)))
    for p, obj in roles.keeps(e):
        for s in roles.worker_keep(e, p, obj):
            out.append("  %s\n" % s)
    for p in e.params:
        if _is_obj(p) and p.role == "handle" and "destroys" in p.flags:
            out.append("  x.ForgetObject(%s_obj);\n" % p.name)
    for p in e.params:
        for s in roles.worker_encode(e, p):
            out.append("  %s\n" % s)
    out.append("  return Status::Ok();\n}\n\n")


def _emit_dispatch_table(lib, out):
    ns = lib.name
    st = lib.status
    # How the session's end releases an object of each kind this library creates: the entry
    # whose only parameter the object is, and which ends it.
    out.append("Status DestroyObject(void* api, HandleKind kind, uint64_t bits) {\n")
    out.append("  [[maybe_unused]] Api& a = *static_cast<Api*>(api);\n  (void)bits;\n  switch (kind) {\n")
    seen = set()
    for e in called(lib):
        if len(e.params) != 1 or not e.travels:
            continue
        p = e.params[0]
        if p.role == "handle" and _is_obj(p) and "destroys" in p.flags:
            k = roles.lib_kind(e, p)
            if k in seen:
                continue
            seen.add(k)
            out.append("    case HandleKind::k%s: {\n" % k)
            out.append("      %s r = a.%s(LibObject::FromBits<%s>(bits));\n" % (e.ret, e.name, p.ctype))
            out.append("      if (r != %s) return Status(Domain::k%s, static_cast<uint32_t>(r), \"%s\");\n" % (st["ok"], _dom(lib), e.name))
            out.append("      return Status::Ok();\n    }\n")
    if lib.props.get("wdestroy"):
        # A hand-written end for the kinds no single-argument call ends (NCCL's registrations).
        out.append("    default:\n      return %s(api, kind, bits);\n  }\n}\n\n" % lib.props["wdestroy"])
    else:
        out.append("    default:\n      return Error(Err::kNotSupported, \"%s has no destroy call for this kind\");\n  }\n}\n\n" % lib.name)
    out.append("constexpr OpEntry kOps[] = {\n")
    for e in travelling(lib):
        out.append('    {%d, "%s", CallClass::k%s, &Op_%s, %s},\n' % (e.number, e.name, e.cls.capitalize(), e.name,
                                                               "true" if "launches" in e.attrs else "false"))
    if not travelling(lib):
        out.append("    {0, nullptr, CallClass::kSync, nullptr, false},\n")
    out.append("};\n\n}  // namespace\n\n")
    out.append("const OpTable& Ops() {\n")
    out.append('  static_assert(static_cast<uint16_t>(Domain::k%s) == %s, "%s.api: its wire number is not its status domain");\n'
               % (_dom(lib), lib.props["wire"], lib.name))
    out.append('  static const OpTable table{%s, "%s", Domain::k%s, kOps, %d, &DestroyObject};\n' % (lib.props["wire"], lib.name, _dom(lib), len(travelling(lib))))
    out.append("  return table;\n}\n\n}  // namespace remora::worker::gen::%s\n" % ns)
    return "".join(out)

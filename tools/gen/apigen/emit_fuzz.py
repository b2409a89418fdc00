"""The call table of the fuzz target `api_reply` (tools/fuzz/fuzz_api_reply.cc): for every
entry of a library that travels, a function that calls its client stub with arguments drawn
from the fuzz input, so the target reaches every generated encoder, the generated worker
dispatch, and - the point of it - every generated result decoder facing a server that lies.

Arguments come from tools/fuzz/api_fuzz_args.h (ApiFuzzArgs): scalars and by-value structs
are input bytes; streams, handles, devices and device pointers are the fixture's live ones
(or, when the input says so, garbage the client must refuse); sizes and counts that size a
buffer are kept within the buffers here. A role without a rule here stops the generator, so
a new role cannot leave its entries unfuzzed without a word."""

import re

from emit_tests import _first, _small

BANNER = "// Generated from %s by tools/gen/apigen - do not edit.\n"

# Names and types of hand-written hooks' arguments the application owns (see _arg).
_HOOK_COUNT = re.compile(r"^num[A-Z]|^count$|Count$")
_HOOK_FN = re.compile(r"(Fn|Callback)(_t)?$")


def _arg(e, p, small):
    """(declarations, argument expression) for parameter `p`."""
    n, r = p.name, p.role
    if r in ("value", "fixup"):
        # Arguments of an entry whose hook is hand-written, so they carry no role: what the
        # application owns must be what a correct application passes (anything else is its own
        # undefined behaviour, not the shim's); what the shim checks stays arbitrary.
        if p.ctype.rstrip().endswith("*"):
            # Host memory the hook reads or writes: a zeroed buffer larger than any structure
            # of the API, never a wild address.
            return ["auto* %s_buf = a.HookBuffer();" % n], "a.Null() ? nullptr : static_cast<%s>(%s_buf)" % (p.ctype, n)
        if _HOOK_FN.search(p.ctype):
            # A function the application gives (a user object's destructor): none.
            return ["%s %s = nullptr;" % (p.ctype, n)], n
        if _HOOK_COUNT.match(n):
            # The length of an array argument beside it (numDependencies): within the buffers.
            return ["%s %s = static_cast<%s>(a.Count());" % (p.ctype, n, p.ctype)], n
        if n in small:
            return ["%s %s = static_cast<%s>(a.Count());" % (p.ctype, n, p.ctype)], n
        return ["%s %s = a.Value<%s>();" % (p.ctype, n, p.ctype)], n
    if r == "stream":
        return ["%s %s = a.Stream<%s>();" % (p.ctype, n, p.ctype)], n
    if r == "handle":
        kind = p.args.get("kind") or _first(p.args)
        return ["%s %s = a.Handle<%s>(HandleKind::k%s);" % (p.ctype, n, p.ctype, kind)], n
    if r == "device":
        return ["%s %s = static_cast<%s>(a.Device());" % (p.ctype, n, p.ctype)], n
    if r == "devptr":
        return ["%s %s = a.DevPtr<%s>();" % (p.ctype, n, p.ctype)], n
    if r in ("in", "inout"):
        if "size" in p.args:
            return ["auto* %s_buf = a.Buffer();" % n], "a.Null() ? nullptr : static_cast<%s>(%s_buf)" % (p.ctype, n)
        return ["auto %s_v = a.Value<%s>();" % (n, p.pointee)], "a.Null() ? nullptr : &%s_v" % n
    if r == "array":
        return ["auto %s_v = a.Values<%s>();" % (n, p.pointee)], "%s_v.data()" % n
    if r == "string":
        return ["std::string %s_v = a.String();" % n], "%s_v.c_str()" % n
    if r == "out":
        if "size" in p.args:
            return ["auto* %s_buf = a.Buffer();" % n], "a.Null() ? nullptr : static_cast<%s>(%s_buf)" % (p.ctype, n)
        return ["%s %s_v{};" % (p.pointee, n)], "a.Null() ? nullptr : &%s_v" % n
    if r == "outarray":
        return ["std::vector<%s> %s_v(ApiFuzzArgs::kElements);" % (p.pointee, n)], "%s_v.data()" % n
    if r == "outstring":
        return ["std::vector<char> %s_v(ApiFuzzArgs::kElements);" % n], "%s_v.data()" % n
    raise SystemExit("emit_fuzz: role %s has no rule (tools/gen/apigen/emit_fuzz.py)" % r)


def emit_fuzz_calls(lib):
    entries = sorted((e for e in lib.entries if e.travels), key=lambda e: e.number)
    out = [BANNER % lib.path, '#include <string>\n#include <vector>\n\n',
           '#include "api_fuzz_args.h"\n#include "%s_client.h"\n\n' % lib.name,
           "namespace remora::fuzz {\nnamespace {\n\n"]
    for e in entries:
        small = _small(e)
        out.append("Status Call_%s(ApiFuzzArgs& a) {\n" % e.name)
        args = []
        for p in e.params:
            decls, expr = _arg(e, p, small)
            out.extend("  %s\n" % d for d in decls)
            args.append(expr)
        out.append('  return gen::%s::%s(shim::CallCtx{a.PerThread(), "%s"}%s);\n}\n\n'
                   % (lib.name, e.name, e.name, "".join(", " + x for x in args)))
    out.append("}  // namespace\n\n")
    out.append("// Every travelling entry of %s, by wire number.\n" % lib.name)
    out.append("extern const ApiFuzzCall k%sFuzzCalls[] = {\n" % lib.name.capitalize())
    for e in entries:
        out.append('    {%d, "%s", %s, Call_%s},\n' % (e.number, e.name, "true" if e.cls == "ordered" else "false", e.name))
    out.append("};\n")
    out.append("extern const size_t k%sFuzzCallCount = %d;\n\n" % (lib.name.capitalize(), len(entries)))
    out.append("}  // namespace remora::fuzz\n")
    return "".join(out)

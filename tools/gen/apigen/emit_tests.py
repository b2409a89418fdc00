"""A round-trip test per travelling entry: the client stub encodes known arguments, a real
Executor (host backend, in-process pipe transport) decodes them and calls a recording
implementation of the library's table, which answers with known bytes; the test checks that
every argument arrived intact and every result came back intact."""
import re

BANNER = "// Generated from %s by tools/gen/apigen - do not edit.\n"

# Roles whose values cross the wire unchanged (the worker translates handles and streams).
RECORDED = ("value", "devptr", "device", "in", "inout", "array", "string", "fixup")


def _covered(e):
    return not any(p.role == "handle" and (p.args.get("kind") or _first(p.args)) not in ("Event", "Pool", "Stream")
                   for p in e.params)


def _first(args):
    for k, v in args.items():
        if v is True:
            return k
    return None


def _small(e):
    """Names of parameters another one's size, count or length refers to."""
    out = set()
    for p in e.params:
        for k in ("size", "count", "len"):
            v = p.args.get(k)
            if isinstance(v, str):
                out.update(re.findall(r"\b[A-Za-z_]\w*\b", v))
    return out


def _record_stmt(e, p, i):
    n, r = p.name, p.role
    if r in ("value", "device", "fixup"):
        return "rec.Add(&%s, sizeof(%s));" % (n, n)
    if r == "devptr":
        return "rec.Add(&%s, sizeof(%s));" % (n, n)
    if r in ("in", "inout"):
        size = p.args.get("size", "sizeof(*%s)" % n)
        return "rec.Add(%s, %s ? (%s) : 0);" % (n, n, size)
    if r == "array":
        return "rec.Add(%s, static_cast<size_t>(%s) * sizeof(*%s));" % (n, p.args["count"], n)
    if r == "string":
        return "rec.Add(%s, std::strlen(%s));" % (n, n)
    return None


def _fill_stmt(e, p, i):
    n, r = p.name, p.role
    if r == "out":
        if "size" in p.args:
            return "FillPattern(%s, %s, %d);" % (n, p.args["size"], i)
        if "nullable" in p.flags:
            return "if (%s) FillPattern(%s, sizeof(*%s), %d);" % (n, n, n, i)
        return "FillPattern(%s, sizeof(*%s), %d);" % (n, n, i)
    if r == "inout":
        return "if (%s) FillPattern(%s, %s, %d);" % (n, n, p.args.get("size", "sizeof(*%s)" % n), i)
    if r == "outarray":
        return "FillPattern(%s, static_cast<size_t>(%s) * sizeof(*%s), %d);" % (n, p.args["count"], n, i)
    if r == "outstring":
        return "FillPattern(%s, static_cast<size_t>(%s), %d);" % (n, p.args["len"], i)
    return None


def emit_roundtrip(lib):
    called = sorted((e for e in lib.entries if e.travels and e.cls != "wait"), key=lambda e: e.number)
    waits = sorted((e for e in lib.entries if e.cls == "wait"), key=lambda e: e.number)
    ok = lib.status["ok"]
    out = [BANNER % lib.path, "#include <cstring>\n\n", '#include "api_roundtrip_fixture.h"\n',
           '#include "%s_api.h"\n#include "%s_client.h"\n\n' % (lib.name, lib.name),
           "namespace remora::test {\nnamespace {\n\n",
           "// Records each call's arguments and answers with FillPattern bytes.\n",
           "class RecordingApi final : public worker::gen::%s::Api {\n public:\n  Recording rec;\n" % lib.name]
    for e in called:
        params = ", ".join("%s %s" % (p.ctype, p.name) for p in e.params)
        out.append("  %s %s(%s) override {\n" % (e.ret, e.name, params))
        out.append('    rec.Start("%s");\n' % e.name)
        for i, p in enumerate(e.params):
            st = _record_stmt(e, p, i)
            if st:
                out.append("    %s\n" % st)
        for i, p in enumerate(e.params):
            st = _fill_stmt(e, p, i)
            if st:
                out.append("    %s\n" % st)
        for p in e.params:
            out.append("    (void)%s;\n" % p.name)
        out.append("    return %s;\n  }\n" % ok)
    out.append("};\n\n")
    out.append("using ApiRoundTrip = RoundTripTest<RecordingApi>;\n\n")
    skipped, hooked = [], []
    for e in called + waits:
        if not _covered(e):
            skipped.append(e.name)
            continue
        if "worker" in e.attrs:
            hooked.append(e.name)
            continue
        small = _small(e)
        out.append("TEST_F(ApiRoundTrip, %s) {\n" % e.name)
        decls, recorded, checks = [], [], []
        for i, p in enumerate(e.params):
            n, r = p.name, p.role
            if r == "value":
                if n in small:
                    decls.append("%s %s = static_cast<%s>(4);" % (p.ctype, n, p.ctype))
                else:
                    decls.append("%s %s = Sample<%s>(%d);" % (p.ctype, n, p.ctype, e.number * 16 + i))
            elif r == "fixup":
                decls.append("%s %s = Sample<%s>(%d);" % (p.ctype, n, p.ctype, e.number * 16 + i))
            elif r == "stream":
                decls.append("%s %s = Stream<%s>();" % (p.ctype, n, p.ctype))
            elif r == "handle":
                kind = p.args.get("kind") or _first(p.args)
                decls.append("%s %s = Handle%s<%s>();" % (p.ctype, n, kind, p.ctype))
            elif r == "device":
                decls.append("%s %s = 0;" % (p.ctype, n))
            elif r == "devptr":
                decls.append("%s %s = DevPtr<%s>();" % (p.ctype, n, p.ctype))
            elif r in ("in", "inout"):
                if "size" in p.args:
                    decls.append("std::vector<std::byte> %s_buf(64); FillPattern(%s_buf.data(), %s_buf.size(), %d);" % (n, n, n, e.number * 16 + i + 100))
                    decls.append("%s %s = %s_buf.data();" % (p.ctype, n, n))
                else:
                    decls.append("auto %s_v = Sample<%s>(%d);" % (n, p.pointee, e.number * 16 + i))
                    decls.append("%s %s = &%s_v;" % (p.ctype, n, n))
            elif r == "array":
                decls.append("std::vector<%s> %s_v(4); for (size_t k = 0; k < 4; k++) %s_v[k] = Sample<%s>(%d + k);"
                             % (p.pointee, n, n, p.pointee, e.number * 16 + i))
                decls.append("%s %s = %s_v.data();" % (p.ctype, n, n))
            elif r == "string":
                decls.append('%s %s = "remora-roundtrip";' % (p.ctype, n))
            elif r == "out":
                if "size" in p.args:
                    decls.append("std::vector<std::byte> %s_buf(64);" % n)
                    decls.append("%s %s = %s_buf.data();" % (p.ctype, n, n))
                    checks.append("EXPECT_TRUE(IsPattern(%s, %s, %d)) << \"%s\";" % (n, p.args["size"], i, n))
                else:
                    decls.append("%s %s_v{};" % (p.pointee, n))
                    decls.append("%s %s = &%s_v;" % (p.ctype, n, n))
                    if "handle" in p.args:
                        checks.append("EXPECT_NE(%s_v, %s{}) << \"%s\";" % (n, p.pointee, n))
                    else:
                        checks.append("EXPECT_TRUE(IsPattern(&%s_v, sizeof(%s_v), %d)) << \"%s\";" % (n, n, i, n))
            elif r == "outarray":
                decls.append("std::vector<%s> %s_v(4);" % (p.pointee, n))
                decls.append("%s %s = %s_v.data();" % (p.ctype, n, n))
                checks.append("EXPECT_TRUE(IsPattern(%s_v.data(), %s_v.size() * sizeof(%s_v[0]), %d)) << \"%s\";" % (n, n, n, i, n))
            elif r == "outstring":
                decls.append("std::vector<char> %s_v(32);" % n)
                decls.append("%s %s = %s_v.data();" % (p.ctype, n, n))
            else:
                raise SystemExit("emit_tests: role %s has no sample" % r)
            if r == "inout" and "size" not in p.args:
                # What was sent, kept: the call writes its result over it.
                decls.append("const auto %s_in = %s_v;" % (n, n))
                checks.append("EXPECT_TRUE(IsPattern(&%s_v, sizeof(%s_v), %d)) << \"%s\";" % (n, n, i, n))
            if e.cls != "wait" and r in RECORDED:
                st = _record_stmt(e, p, i).replace("rec.Add(", "expected.Add(")
                if r == "inout" and "size" not in p.args:
                    st = "expected.Add(&%s_in, sizeof(%s_in));" % (n, n)
                recorded.append(st)
        for d in decls:
            out.append("  %s\n" % d)
        args = "".join(", %s" % p.name for p in e.params)
        out.append('  Status st = gen::%s::%s(shim::CallCtx{false, "%s"}%s);\n' % (lib.name, e.name, e.name, args))
        out.append("  ASSERT_TRUE(st.ok()) << st.ToString();\n")
        if e.cls == "wait":
            out.append("}\n\n")
            continue
        out.append("  ASSERT_TRUE(Drain().ok());  // an ordered call has run once a later call is answered\n")
        out.append('  ASSERT_EQ(api().rec.name(), "%s");\n' % e.name)
        out.append("  Recording expected;\n")
        out.append('  expected.Start("%s");\n' % e.name)
        for st in recorded:
            out.append("  %s\n" % st)
        out.append("  EXPECT_EQ(api().rec.args(), expected.args()) << \"the arguments changed on the way\";\n")
        for c in checks:
            out.append("  %s\n" % c)
        out.append("}\n\n")
    if skipped:
        out.append("// Not covered here (their handles need a loaded module): %s\n" % ", ".join(skipped))
    if hooked:
        out.append("// Not covered here (a worker hook checks them against the session's state; the driver-API\n"
                   "// integration test runs them): %s\n" % ", ".join(hooked))
    out.append("}  // namespace\n}  // namespace remora::test\n")
    return "".join(out)

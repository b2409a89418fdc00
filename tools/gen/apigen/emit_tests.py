"""A round-trip test per travelling entry: the client stub encodes known arguments, a real
Executor (host backend, in-process pipe transport) decodes them and calls a recording
implementation of the library's table, which answers with known bytes; the test checks that
every argument arrived intact and every result came back intact.

Library objects (roles.LIB_KINDS) come from the entry that creates their kind, called once
per test binary (a fresh one for an entry that destroys its object, or that the client
mirrors). Arguments are byte patterns, but for enums: one of their declared enumerators, read
from the library's headers (cenums.py). Entries whose worker
hooks do more than a call (wcall), or whose device extents the worker asks the library for
(wsize=F(x, ...)), are not covered here: the recording library cannot answer like the real
one; their GPU tests cover them."""
import re

import cenums
import emit_worker
import roles

BANNER = "// Generated from %s by tools/gen/apigen - do not edit.\n"

# Roles whose values cross the wire unchanged (the worker translates handles and streams).
RECORDED = ("value", "devptr", "device", "in", "inout", "array", "string", "fixup", "scalar", "devptrs", "inbytes")
LEGACY_KINDS = ("Event", "Pool", "Stream")


def _first(args):
    for k, v in args.items():
        if v is True:
            return k
    return None


def _kind_of(p):
    return p.args.get("kind") or _first(p.args)


def _creators(lib):
    """kind -> the entry that creates it (newhandle), for the fixture's objects."""
    out = {}
    for e in sorted((e for e in lib.entries if e.travels and not e.internal and "wcall" not in e.attrs and not e.hand),
                    key=lambda e: e.number):
        for p in e.params:
            if p.role == "newhandle" and _kind_of(p) not in out:
                out[_kind_of(p)] = e
    # A creator that needs an object no entry of the fixture makes (NCCL's registrations need
    # a communicator, made by a hand-written entry) cannot make its own.
    changed = True
    while changed:
        changed = False
        for k, e in list(out.items()):
            needs = [_kind_of(p) for p in e.params if p.role == "handle" and roles.is_lib_handle(p)]
            if any(n not in out for n in needs):
                del out[k]
                changed = True
    return out


# A sample of an enum type is one of its declared enumerators (cenums.py, _enum_samples): byte
# patterns put a by-value enum outside its range, a value an unscoped enum without a fixed type
# cannot hold (clang's sanitizer builds did not round-trip cufftXtQueryPlan's output with one).


def _covered(e, creators):
    if e.internal or "wcall" in e.attrs or e.hand:
        return False  # hand-written ends have hand-written tests
    if any(p.role == "array" and "fixup" in p.args and e.lib.name != "cuda" for p in e.params):
        return False  # (a math library's element hook checks device ordinals or pointers: the GPU tests)
    if any(p.role == "array" and "wcount" in p.args for p in e.params):
        return False  # (a count the worker keeps with an object)
    if any(p.role == "scalarinout" for p in e.params):
        return False  # (values that go both ways: their GPU tests cover them)
    if any(p.role in ("array", "outarray") and "handle" in p.args for p in e.params):
        return False  # handle arrays need live objects of their kind
    # An extent the worker asks the library for (cuDNN's tensor sizes): the recording library
    # answers patterns, not sizes; such entries are covered by their GPU tests.
    if any(p.role == "devptr" and ("(x," in str(p.args.get("wsize", "")) or "query" in p.args) for p in e.params):
        return False
    if any(p.role in ("out", "devptr", "hostwork") and ("_obj" in str(p.args.get("wsize", "")) or "_obj" in str(p.args.get("size", "")) or "query" in p.args)
           for p in e.params):
        return False  # extents the worker keeps with objects, or asks the library for
    # Likewise a count or size only the worker computes from the library (wcount=, wsize=).
    if any(p.role in ("array", "out") and "(x," in str(p.args.get("wcount", p.args.get("wsize", ""))) for p in e.params):
        return False
    # A range kept with an object (keep=) whose extent the application's own pointer gives
    # (SpGEMM's *bufferSize1): a sample's pattern is no size, and every later call naming the
    # object would check that range again. Their GPU tests (math_roles) cover them.
    ptrs = {q.name for q in e.params if q.role in ("in", "inout")}
    if any(p.role == "devptr" and "keep" in p.args and any(re.search(r"\b%s\b" % re.escape(q), str(p.args.get("size", "")) + str(p.args.get("wsize", "")))
                                                        for q in ptrs) for p in e.params):
        return False
    for p in e.params:
        if p.role == "handle":
            k = _kind_of(p)
            if k not in LEGACY_KINDS and k not in creators:
                return False
    return True


def _small(e):
    """Names of parameters another one's size, count or length refers to."""
    out = set()
    for p in e.params:
        for k in ("size", "count", "len", "csize", "wsize"):
            v = p.args.get(k)
            if isinstance(v, str):
                out.update(re.findall(r"\b[A-Za-z_]\w*\b", v))
    return out


def _size_expr(p):
    return p.args.get("csize", p.args.get("size", "sizeof(*%s)" % p.name))


def _unqualified(ctype):
    """A by-value parameter's type without its top-level const (`const int blockSize`)."""
    t = ctype.strip()
    return t[len("const "):] if t.startswith("const ") and not t.endswith("*") else t


def _buf_bytes(p):
    """A sample buffer's bytes: 64, or the size of the type its extent names when larger
    (cufftXtQueryPlan's cufftXt1dFactors is 96). Other extents depend on sample values that
    keep them small."""
    m = re.match(r"^sizeof\(([A-Za-z_][\w:]*)\)$", str(p.args.get("size", "")).strip())
    return "std::max<size_t>(64, sizeof(%s))" % m.group(1) if m else "64"


def _record_stmt(e, p, i):
    n, r = p.name, p.role
    if r in ("value", "device", "fixup"):
        return "rec.Add(&%s, sizeof(%s));" % (n, n)
    if r in ("devptr", "devptrs"):
        return "rec.Add(&%s, sizeof(%s));" % (n, n)
    if r == "scalar":
        if "size" not in p.args:
            return None  # its extent is an expression of one end only (cuBLASLt's scale type)
        return "rec.Add(%s, %s ? static_cast<size_t>(%s) : 0);" % (n, n, p.args["size"])
    if r in ("in", "inout", "inbytes"):
        size = p.args.get("size", "sizeof(*%s)" % n)
        return "rec.Add(%s, %s ? (%s) : 0);" % (n, n, size)
    if r == "array":
        if "wcount" in p.args:
            return None  # (its count is an expression of one end only: cusolverRf's batch)
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
    if r == "newhandle":
        return "FillPattern(%s, sizeof(*%s), %d);" % (n, n, i)
    if r == "scalarout":
        return "FillPattern(%s, %s, %d);" % (n, p.args.get("wsize", p.args.get("size")), i)
    if r == "inout":
        return "if (%s) FillPattern(%s, %s, %d);" % (n, n, p.args.get("size", "sizeof(*%s)" % n), i)
    if r == "outarray":
        return "FillPattern(%s, static_cast<size_t>(%s) * sizeof(*%s), %d);" % (n, p.args["count"], n, i)
    if r == "outstring":
        return "FillPattern(%s, static_cast<size_t>(%s), %d);" % (n, p.args["len"], i)
    return None


def _decls(e, fresh_destroyed=True):
    """Declarations of sample arguments for a call of `e`, what the library must receive, and
    what must come back: (decls, recorded, checks)."""
    small = _small(e)
    decls, recorded, checks = [], [], []
    for i, p in enumerate(e.params):
        n, r = p.name, p.role
        if r == "value":
            if n in small:
                decls.append("%s %s = static_cast<%s>(4);" % (p.ctype, n, _unqualified(p.ctype)))
            else:
                decls.append("%s %s = Sample<%s>(%d);" % (p.ctype, n, _unqualified(p.ctype), e.number * 16 + i))
        elif r == "fixup":
            decls.append("%s %s = Sample<%s>(%d);" % (p.ctype, n, p.ctype, e.number * 16 + i))
        elif r == "stream":
            decls.append("%s %s = Stream<%s>();" % (p.ctype, n, p.ctype))
        elif r == "handle":
            kind = _kind_of(p)
            if kind in LEGACY_KINDS:
                decls.append("%s %s = Handle%s<%s>();" % (p.ctype, n, kind, p.ctype))
            elif ("destroys" in p.flags or "mirror" in e.attrs) and fresh_destroyed:
                # (A call the client mirrors changes how later calls on its object travel, the
                # pointer mode say: it gets an object of its own, so the shared one stays as made.)
                decls.append("%s %s = Fresh%s<%s>();" % (p.ctype, n, kind, p.ctype))
            else:
                decls.append("%s %s = Object%s<%s>();" % (p.ctype, n, kind, p.ctype))
        elif r == "newhandle":
            decls.append("%s %s_v{};" % (p.pointee, n))
            decls.append("%s %s = &%s_v;" % (p.ctype, n, n))
            checks.append("EXPECT_NE(%s_v, %s{}) << \"%s\";" % (n, p.pointee, n))
        elif r == "device":
            decls.append("%s %s = 0;" % (p.ctype, n))
        elif r == "devptr":
            decls.append("%s %s = DevPtr<%s>();" % (p.ctype, n, p.ctype))
        elif r == "devptrs":
            decls.append("%s %s = DevPtrs<%s>();" % (p.ctype, n, p.ctype))
        elif r == "hostwork":  # the worker passes its own: nothing to compare
            decls.append("%s %s = nullptr;" % (p.ctype, n))
        elif r == "scalar":
            # Large enough for the largest scalar of any description (cublasDrotm's 5 doubles).
            decls.append("std::vector<std::byte> %s_buf(128); FillPattern(%s_buf.data(), %s_buf.size(), %d);" % (n, n, n, e.number * 16 + i + 100))
            decls.append("%s %s = (%s)(%s_buf.data());" % (p.ctype, n, p.ctype, n))
        elif r == "scalarout":
            decls.append("std::vector<std::byte> %s_buf(128);" % n)
            decls.append("%s %s = (%s)(%s_buf.data());" % (p.ctype, n, p.ctype, n))
            checks.append("EXPECT_TRUE(IsPattern(%s, %s, %d)) << \"%s\";" % (n, _size_expr(p), i, n))
        elif r in ("in", "inout", "inbytes"):
            if "size" in p.args:
                decls.append("std::vector<std::byte> %s_buf(%s); FillPattern(%s_buf.data(), %s_buf.size(), %d);"
                             % (n, _buf_bytes(p), n, n, e.number * 16 + i + 100))
                decls.append("%s %s = reinterpret_cast<%s>(%s_buf.data());" % (p.ctype, n, p.ctype, n))
            elif n in small:  # another argument's extent reads it (*bufferSize1)
                decls.append("%s %s_v = static_cast<%s>(4);" % (p.pointee, n, p.pointee))
                decls.append("%s %s = &%s_v;" % (p.ctype, n, n))
            else:
                decls.append("auto %s_v = Sample<%s>(%d);" % (n, p.pointee, e.number * 16 + i))
                decls.append("%s %s = &%s_v;" % (p.ctype, n, n))
            if r == "inout":  # the library sees what was sent; the caller gets what it wrote
                size = p.args.get("size", "sizeof(*%s)" % n)
                decls.append("const std::vector<std::byte> %s_sent(reinterpret_cast<const std::byte*>(%s), reinterpret_cast<const std::byte*>(%s) + %s);" % (n, n, n, size))
                checks.append("EXPECT_TRUE(IsPattern(%s, %s, %d)) << \"%s\";" % (n, size, i, n))
        elif r == "array":
            decls.append("std::vector<%s> %s_v(4); for (size_t k = 0; k < 4; k++) %s_v[k] = Sample<%s>(%d + k);"
                         % (p.pointee, n, n, p.pointee, e.number * 16 + i))
            decls.append("%s %s = %s_v.data();" % (p.ctype, n, n))
        elif r == "string":
            decls.append('%s %s = "remora-roundtrip";' % (p.ctype, n))
        elif r == "out":
            if "size" in p.args:
                decls.append("std::vector<std::byte> %s_buf(%s);" % (n, _buf_bytes(p)))
                decls.append("%s %s = reinterpret_cast<%s>(%s_buf.data());" % (p.ctype, n, p.ctype, n))
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
        if e.cls != "wait" and r == "inout":
            recorded.append("expected.Add(%s_sent.data(), %s_sent.size());" % (n, n))
        elif e.cls != "wait" and r in RECORDED and _record_stmt(e, p, i) is not None:
            recorded.append(_record_stmt(e, p, i).replace("rec.Add(", "expected.Add("))
    return decls, recorded, checks


def _setter_of(kind, entries, creators):
    """An entry that changes an object of `kind` (a `sets` handle), with that parameter."""
    for s in entries:
        for p in s.params:
            if p.role == "handle" and "sets" in p.flags and _kind_of(p) == kind and _covered(s, creators):
                return s, p
    return None, None


def _memo_test(lib, e, entries, creators, enums):
    """A memoised query: asked once for objects made afresh with the same content, asked again
    once one of them changed (when the library has a call that changes it)."""
    decls, _, checks = _decls(e)
    decls = [d.replace("= Object", "= Fresh") for d in decls]
    args = "".join(", %s" % p.name for p in e.params)
    change = None
    for p in e.params:
        if p.role == "handle" and _kind_of(p) not in LEGACY_KINDS:
            s, sp = _setter_of(_kind_of(p), entries, creators)
            if s is not None:
                change = (p, s, sp)
                break
    rounds = 3 if change else 2
    out = ["// %s is memoised by the content of what it names.\n" % e.name,
           "TEST_F(ApiRoundTrip, %s_Memoised) {\n" % e.name,
           "  api().rec.Clear();\n",
           "  for (int round = 0; round < %d; round++) {\n" % rounds]
    out += ["    %s\n" % d for d in decls]
    if change:
        p, s, sp = change
        sdecls, _, _ = _decls(s)
        out.append("    if (round == 2) {  // one object changed: its answer must be asked for\n")
        out.append("      auto changed = %s;\n" % p.name)
        for d in sdecls:
            if d.startswith("%s %s = " % (sp.ctype, sp.name)):
                d = "%s %s = (%s)(changed);" % (sp.ctype, sp.name, sp.ctype)  # (a const descriptor's setter)
            # Other values than the setter's own round-trip test gave the shared object, so
            # the changed content is one no earlier test asked about.
            # (An enum's next enumerator: a sample of an enum is its enumerator seed % count.)
            d = re.sub(r"Sample<(.+?)>\((\d+)\)",
                       lambda m: "Sample<%s>(%d)" % (m.group(1), int(m.group(2)) + (1 if _enum_key(m.group(1)) in enums else 1000)), d)
            out.append("      %s\n" % d)
        sargs = "".join(", %s" % q.name for q in s.params)
        out.append('      ASSERT_TRUE(gen::%s::%s(shim::CallCtx{false, "%s"}%s).ok());\n' % (lib.name, s.name, s.name, sargs))
        out.append("      ASSERT_TRUE(Drain().ok());\n      api().rec.Clear();\n    }\n")
    out.append('    Status st = gen::%s::%s(shim::CallCtx{false, "%s"}%s);\n' % (lib.name, e.name, e.name, args))
    out.append("    ASSERT_TRUE(st.ok()) << st.ToString();\n    ASSERT_TRUE(Drain().ok());\n")
    out += ["    %s\n" % c for c in checks]
    out.append('    if (round == 1) {\n      EXPECT_LE(api().rec.Count("%s"), 1u) << "asked again for objects of the same content";\n    }\n' % e.name)
    if change:
        out.append('    if (round == 2) {\n      EXPECT_EQ(api().rec.Count("%s"), 1u) << "a changed object\'s answer came from the memo";\n    }\n' % e.name)
    out.append("  }\n}\n\n")
    return "".join(out)


def _enum_key(ctype):
    """The name an argument type's enum is declared under (`const cudnnDataType_t` ->
    cudnnDataType_t, `enum cudaMemcpyKind` -> cudaMemcpyKind)."""
    return ctype.replace("const ", "").replace("enum ", "").strip()


def _enum_samples(text, enums):
    """Sample<T> for each enum T that `text` samples: its declared enumerators in turn."""
    out = []
    for t in sorted(set(re.findall(r"Sample<([^<>]+)>", text))):
        names = enums.get(_enum_key(t))
        if not names:
            continue
        out.append("template <>\ninline %s Sample<%s>(int seed) {\n" % (t, t))
        out.append("  static const %s kEnumerators[] = {%s};\n" % (_enum_key(t), ", ".join(names)))
        out.append("  return kEnumerators[static_cast<unsigned>(seed) %% %d];\n}\n" % len(names))
    if out:
        out.insert(0, "// Enums are sampled from their declared enumerators (a pattern may be no value of the type).\n")
        out.append("\n")
    return "".join(out)


def emit_roundtrip(lib, include_dirs=()):
    enums = cenums.of_library(lib, include_dirs)
    table = emit_worker.called(lib)
    called = sorted((e for e in lib.entries if e.travels and e.cls != "wait"), key=lambda e: e.number)
    waits = sorted((e for e in lib.entries if e.cls == "wait"), key=lambda e: e.number)
    ok = lib.status["ok"]
    dom = lib.props.get("domain", lib.name)
    dom = dom[0].upper() + dom[1:]
    creators = _creators(lib)
    out = [BANNER % lib.path, '#pragma GCC diagnostic ignored "-Wdeprecated-declarations"\n', "#include <algorithm>\n#include <cstring>\n\n",
           '#include "api_roundtrip_fixture.h"\n',
           '#include "%s_api.h"\n#include "%s_client.h"\n\n' % (lib.name, lib.name),
           "namespace remora::test {\nnamespace {\n\n",
           ("using namespace %s;  // the description's size expressions\n\n" % lib.props["hooks_ns"]) if lib.props.get("hooks_ns") else "",
           "// Records each call's arguments and answers with FillPattern bytes.\n",
           "class RecordingApi final : public worker::gen::%s::Api {\n public:\n  Recording rec;\n" % lib.name]
    for e in table:
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
        if e.ret == "void":
            out.append("  }\n")  # `return void{};` is gcc's extension only
        else:
            out.append("    return %s;\n  }\n" % (ok if e.ret == lib.status["type"] else "%s{}" % e.ret))
    out.append("};\n\n")
    if lib.name == "cuda":
        out.append("using ApiRoundTrip = RoundTripTest<RecordingApi>;\n\n")
    else:
        out.append("using ApiRoundTrip = RoundTripTest<RecordingApi, worker::gen::%s::Api, Domain::k%s>;\n\n" % (lib.name, dom))
    # The library's objects, made by the entries that create them (declared first: one kind's
    # creator may take an object of a kind made later, cuSPARSE's const descriptors).
    for kind in sorted(creators):
        out.append("template <typename T>\nT Object%s();\n" % kind)
    for kind, e in sorted(creators.items()):
        target = [p for p in e.params if p.role == "newhandle" and _kind_of(p) == kind][0]
        decls, _, _ = _decls(e, fresh_destroyed=False)
        args = "".join(", %s" % p.name for p in e.params)
        out.append("// A %s, made by %s.\n" % (kind, e.name))
        out.append("template <typename T>\nT Fresh%s() {\n" % kind)
        for d in decls:
            out.append("  %s\n" % d.replace("= DevPtr<", "= SharedDevPtr<"))
        out.append('  Status st = gen::%s::%s(shim::CallCtx{false, "fixture"}%s);\n' % (lib.name, e.name, args))
        out.append("  EXPECT_TRUE(st.ok()) << st.ToString();\n")
        out.append("  return (T)(%s_v);\n}\n" % target.name)  # (cuSPARSE's const descriptors: a C cast)
        out.append("template <typename T>\nT Object%s() {\n  static T made = Fresh%s<T>();\n  return made;\n}\n\n" % (kind, kind))
    skipped, hooked = [], []
    for e in called + waits:
        if not _covered(e, creators):
            skipped.append(e.name)
            continue
        if "worker" in e.attrs:
            hooked.append(e.name)
            continue
        out.append("TEST_F(ApiRoundTrip, %s) {\n" % e.name)
        decls, recorded, checks = _decls(e)
        for d in decls:
            out.append("  %s\n" % d)
        args = "".join(", %s" % p.name for p in e.params)
        out.append('  Status st = gen::%s::%s(shim::CallCtx{false, "%s"}%s);\n' % (lib.name, e.name, e.name, args))
        out.append("  ASSERT_TRUE(st.ok()) << st.ToString();\n")
        if e.cls == "wait":
            out.append("}\n\n")
            continue
        out.append("  ASSERT_TRUE(Drain().ok());  // an ordered call has run once a later call is answered\n")
        out.append('  const Recording::Call* call = api().rec.Last("%s");\n' % e.name)
        out.append('  ASSERT_NE(call, nullptr) << "%s did not reach the library";\n' % e.name)
        out.append("  Recording expected;\n")
        out.append('  expected.Start("%s");\n' % e.name)
        for st in recorded:
            out.append("  %s\n" % st)
        out.append("  EXPECT_EQ(call->args, expected.args()) << \"the arguments changed on the way\";\n")
        for c in checks:
            out.append("  %s\n" % c)
        out.append("}\n\n")
    if lib.name != "cuda":
        for e in called:
            if "memo" in e.attrs and e.cls == "sync" and _covered(e, creators):
                out.append(_memo_test(lib, e, called, creators, enums))
    if skipped:
        out.append("// Not covered here (hand-written worker ends, or handles that need a loaded module): %s\n"
                   % ", ".join(skipped))
    if hooked:
        out.append("// Not covered here (a worker hook checks them against the session's state; the driver-API\n"
                   "// integration test runs them): %s\n" % ", ".join(hooked))
    out.append("}  // namespace\n}  // namespace remora::test\n")
    text = "".join(out)
    head = "namespace remora::test {\n"
    at = text.index(head) + len(head)
    samples = _enum_samples(text[at:], enums)
    return text[:at] + ("\n" + samples if samples else "") + text[at:]

"""What each parameter role generates, on both ends of the wire, kept side by side so the
encoder (shim) and the decoder (worker) of a role cannot drift apart.

Wire encoding of a call's arguments (protocol/api/include/remora/api/args.h): parameters in
declaration order, each as below; scalars are the little-endian bytes of the C type.

  value        sizeof(T) bytes
  stream       u64 handle, u8 per-thread flag
  handle(K)    u64 Remora handle of kind K
  device       i32 device ordinal (the application's)
  devptr       u64 address (checked against the session's allocations)
  in           u8 present, then sizeof(T) bytes if present
  inout        as in; the result carries sizeof(T) bytes back
  array(count) u64 element count, then count * sizeof(T) bytes
  string       u64 length, then the bytes (no NUL)
  out, outarray(count), outstring(len): nothing on the way in (outarray/outstring send
               their capacity as u64); the result carries the bytes back
  fixup(F)     sizeof(T) bytes of a by-value struct the worker adjusts with the hand-written
               hook F (e.g. device ordinals inside a CUmemLocation)
"""
from model import ApiError


def _expr(e, prefix=""):
    return e


def client_encode(e, p):
    """Statements that validate `p` in the shim and append it to the request (`c`)."""
    n, r = p.name, p.role
    err = e.lib.status["invalid"]
    if r == "value":
        return ["c.Put(%s);" % n]
    if r == "fixup":
        return ["c.Put(%s);" % n]
    if r == "stream":
        return ["RETURN_IF_ERROR(c.Stream(%s));" % n]
    if r == "handle":
        kind = _kind(e, p)
        if "nullable" in p.flags:
            return ["RETURN_IF_ERROR(c.Handle(HandleKind::k%s, %s, true));" % (kind, n)]
        return ["RETURN_IF_ERROR(c.Handle(HandleKind::k%s, %s, false));" % (kind, n)]
    if r == "device":
        return ["RETURN_IF_ERROR(c.Device(static_cast<int>(%s)));" % n]
    if r == "devptr":
        size = p.args.get("size", "1")
        return ["RETURN_IF_ERROR(c.DevPtr(reinterpret_cast<uint64_t>(%s), static_cast<uint64_t>(%s)));" % (_asint(p), size)]
    if r in ("in", "inout"):
        lines = []
        if "nullable" not in p.flags:
            lines.append('if (%s == nullptr) return c.Fail(%s, "%s is NULL");' % (n, err, n))
        lines.append("c.PutOptional(%s, %s);" % (n, _size(p)))
        return lines
    if r == "array":
        count = p.args["count"]
        return ['if (%s == nullptr && (%s) != 0) return c.Fail(%s, "%s is NULL");' % (n, count, err, n),
                "c.PutArray(%s, static_cast<uint64_t>(%s), sizeof(%s));" % (n, count, p.pointee)]
    if r == "string":
        return ['if (%s == nullptr) return c.Fail(%s, "%s is NULL");' % (n, err, n), "c.PutString(%s);" % n]
    if r == "out":
        lines = []
        if "nullable" not in p.flags:
            lines.append('if (%s == nullptr) return c.Fail(%s, "%s is NULL");' % (n, err, n))
        if "size" in p.args:
            lines.append("c.Put<uint64_t>(static_cast<uint64_t>(%s));" % p.args["size"])
        return lines
    if r == "outarray":
        count = p.args["count"]
        return ['if (%s == nullptr && (%s) != 0) return c.Fail(%s, "%s is NULL");' % (n, count, err, n),
                "c.Put<uint64_t>(static_cast<uint64_t>(%s));" % count]
    if r == "outstring":
        ln = p.args["len"]
        return ['if (%s == nullptr || (%s) <= 0) return c.Fail(%s, "%s is NULL or empty");' % (n, ln, err, n),
                "c.Put<uint64_t>(static_cast<uint64_t>(%s));" % ln]
    raise ApiError("role %s has no client encoding" % r)


def client_decode(e, p):
    """Statements that copy `p`'s result from the reply (`r`, an ArgReader) to the caller."""
    n, r = p.name, p.role
    if r == "out" and "size" in p.args:
        return ["r.GetArray(%s, static_cast<uint64_t>(%s), 1);" % (n, p.args["size"])]
    if r == "out":
        if p.role == "out" and "handle" in p.args:
            return ["{ uint64_t h = r.Get<uint64_t>(); if (%s) *%s = reinterpret_cast<%s>(h); }" % (n, n, p.pointee)]
        if "nullable" in p.flags:
            return ["{ auto v = r.Get<%s>(); if (%s) *%s = v; }" % (p.pointee, n, n)]
        return ["*%s = r.Get<%s>();" % (n, p.pointee)]
    if r == "inout" and "size" in p.args:
        return ["if (%s) r.GetArray(%s, static_cast<uint64_t>(%s), 1);" % (n, n, p.args["size"])]
    if r == "inout":
        return ["{ auto v = r.Get<%s>(); if (%s) *%s = v; }" % (p.pointee, n, n)]
    if r == "outarray":
        return ["r.GetArray(%s, static_cast<uint64_t>(%s), sizeof(%s));" % (n, p.args["count"], p.pointee)]
    if r == "outstring":
        return ["r.GetString(%s, static_cast<uint64_t>(%s));" % (n, p.args["len"])]
    return []


def worker_decode(e, p):
    """Statements that read `p` from the request (`x`, an OpContext) into a local named like it."""
    n, r = p.name, p.role
    if r == "value":
        return ["%s %s = x.in().Get<%s>();" % (p.ctype, n, p.ctype)]
    if r == "fixup":
        return ["%s %s = x.in().Get<%s>();" % (p.ctype, n, p.ctype)]
    if r == "stream":
        return ["%s %s = nullptr;" % (p.ctype, n), "RETURN_IF_ERROR(x.Stream(reinterpret_cast<void**>(&%s)));" % n]
    if r == "handle":
        kind = _kind(e, p)
        nullable = "true" if "nullable" in p.flags else "false"
        return ["%s %s{};" % (p.ctype, n),
                "RETURN_IF_ERROR(x.Handle(HandleKind::k%s, %s, reinterpret_cast<void**>(&%s)));" % (kind, nullable, n)]
    if r == "device":
        return ["%s %s{};" % (p.ctype, n), "{ int d = 0; RETURN_IF_ERROR(x.Device(&d)); %s = static_cast<%s>(d); }" % (n, p.ctype)]
    if r == "devptr":
        return ["uint64_t %s_addr = x.in().Get<uint64_t>();" % n]
    if r in ("in", "inout") and "size" in p.args:
        return ["std::vector<std::byte> %s_v;" % n,
                "RETURN_IF_ERROR(x.Buffer(&%s_v, static_cast<uint64_t>(%s)));" % (n, p.args["size"]),
                "bool %s_has = x.in().GetOptional(%s_v.data(), %s_v.size());" % (n, n, n)]
    if r in ("in", "inout"):
        return ["%s %s_v{};" % (p.pointee, n), "bool %s_has = x.in().GetOptional(&%s_v, sizeof(%s_v));" % (n, n, n)]
    if r == "array":
        return ["std::vector<%s> %s_v;" % (p.pointee, n), "RETURN_IF_ERROR(x.in().GetArray(&%s_v));" % n]
    if r == "string":
        return ["std::string %s_v;" % n, "RETURN_IF_ERROR(x.in().GetString(&%s_v));" % n]
    if r == "out" and "size" in p.args:
        return ["std::vector<std::byte> %s_v;" % n, "RETURN_IF_ERROR(x.OutArray(&%s_v));" % n]
    if r == "out":
        return ["%s %s_v{};" % (p.pointee, n)]
    if r == "outarray":
        return ["std::vector<%s> %s_v;" % (p.pointee, n), "RETURN_IF_ERROR(x.OutArray(&%s_v));" % n]
    if r == "outstring":
        return ["std::vector<char> %s_v;" % n, "RETURN_IF_ERROR(x.OutArray(&%s_v));" % n]
    raise ApiError("role %s has no worker decoding" % r)


def worker_check(e, p):
    """Checks that run once every argument is decoded (extents may name other arguments)."""
    n, r = p.name, p.role
    if r == "devptr":
        size = p.args.get("size", "1")
        return ["%s %s{};" % (p.ctype, n),
                "RETURN_IF_ERROR(x.DevPtr(%s_addr, static_cast<uint64_t>(%s), reinterpret_cast<uint64_t*>(&%s)));" % (n, size, n)]
    if r == "fixup":
        return ["RETURN_IF_ERROR(%s(x, &%s));" % (p.args.get("hook") or _first(p.args), n)]
    if r in ("array", "outarray"):
        lines = ["if (%s_v.size() < static_cast<size_t>(%s)) return x.Malformed(\"%s holds fewer elements than %s\");"
                 % (n, p.args["count"], n, p.args["count"].replace('"', ''))]
        if r == "array" and "fixup" in p.args:
            lines.append("for (auto& el : %s_v) RETURN_IF_ERROR(%s(x, &el));" % (n, p.args["fixup"]))
        return lines
    if r == "outstring":
        return ["if (%s_v.size() < static_cast<size_t>(%s)) return x.Malformed(\"%s is shorter than %s\");" % (n, p.args["len"], n, p.args["len"])]
    if r == "out" and "size" in p.args:
        return ["if (%s_v.size() < static_cast<size_t>(%s)) return x.Malformed(\"%s is shorter than its size\");" % (n, p.args["size"], n)]
    if r == "array" and "fixup" in p.args:
        return ["for (auto& el : %s_v) RETURN_IF_ERROR(%s(x, &el));" % (n, p.args["fixup"])]
    if r in ("in", "inout") and "fixup" in p.args:
        return ["if (%s_has) RETURN_IF_ERROR(%s(x, &%s_v));" % (n, p.args["fixup"], n)]
    return []


def worker_arg(e, p):
    """The expression passed to the real function for `p`."""
    n, r = p.name, p.role
    if r in ("value", "stream", "handle", "device", "devptr", "fixup"):
        return n
    if r in ("in", "inout") and "size" in p.args:
        return "(%s_has ? static_cast<void*>(%s_v.data()) : nullptr)" % (n, n)
    if r in ("in", "inout"):
        return "(%s_has ? &%s_v : nullptr)" % (n, n)
    if r == "out" and "size" in p.args:
        return "static_cast<void*>(%s_v.data())" % n
    if r == "array":
        return "%s_v.data()" % n
    if r == "string":
        return "%s_v.c_str()" % n
    if r == "out":
        return "&%s_v" % n
    if r in ("outarray", "outstring"):
        return "%s_v.data()" % n
    raise ApiError("role %s has no worker argument" % r)


def worker_encode(e, p):
    """Statements appending `p`'s result to the reply after a successful call."""
    n, r = p.name, p.role
    if (r == "out" or r == "inout") and "size" in p.args:
        return ["x.out().PutArray(%s_v.data(), %s_v.size(), 1);" % (n, n)]
    if r == "out":
        if "handle" in p.args:
            return ["x.out().Put<uint64_t>(x.AdoptHandle(HandleKind::k%s, reinterpret_cast<void*>(%s_v)));" % (p.args["handle"], n)]
        return ["x.out().Put(%s_v);" % n]
    if r == "inout":
        return ["x.out().Put(%s_v);" % n]
    if r in ("outarray", "outstring"):
        return ["x.out().PutArray(%s_v.data(), %s_v.size(), sizeof(%s_v[0]));" % (n, n, n)]
    return []


def _size(p):
    return p.args["size"] if "size" in p.args else "sizeof(%s)" % p.pointee


def _kind(e, p):
    k = p.args.get("kind") or _first(p.args)
    if not k:
        raise ApiError("%s: %s's handle role needs a kind, e.g. handle(Event)" % (e.name, p.name))
    return k


def _first(args):
    for k, v in args.items():
        if v is True:
            return k
    return None


def _asint(p):
    # CUdeviceptr is an integer, cudart device pointers are void*: go through uintptr_t.
    return "(uintptr_t)(%s)" % p.name

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
  array(count) u64 element count, then count * sizeof(T) bytes (`nullable`: u8 present
               first, the array only if present); with handle=K the
               elements are session handles of kind K (u64), translated by the worker;
               wcount=W: the worker checks the count with its own expression W
  outarray(count, handle=K): the elements come back as session handles of kind K
  array(.., ccount=C, wcount=W), out(size=S, csize=C, wsize=W)
               as above; C/W replace the count (size) on the client/worker side only, where
               only that side can compute it (the client from what it mirrors, the worker from
               the library's own answer): the worker checks what arrived against W
  string       u64 length, then the bytes (no NUL)
  out, outarray(count), outstring(len): nothing on the way in (outarray/outstring and a
               sized out send their capacity as u64; out(csize=, wsize=): each end's own
               expression of it); the result carries the bytes back
               (out(handle=K): the worker first checks the session's limit for kind K)
  fixup(F)     sizeof(T) bytes of a by-value struct the worker adjusts with the hand-written
               hook F (e.g. device ordinals inside a CUmemLocation)

An entry marked `hand` has no roles to generate from: its client stub (declared in
<lib>_client.h) and its worker operation (Op_<name>, declared in <lib>_dispatch.cc) are
hand-written, for calls whose arguments are structures of pointers (graph node parameters,
3D copies); numbering, dispatch, classes and exports stay generated.

Math libraries (their objects are LIB_KINDS below: session-owned, client-minted ids):
  handle(K)    of a library kind: u64 object id (an int handle such as cufftHandle travels
               as the id it stands for); flags `destroys` (the call ends the object; the
               worker releases what it charged for it), `sets` (the call changes the object:
               memoised queries naming it are asked again)
  newhandle(K) u64 id the client minted for the object the call creates (so a create can
               be posted); the worker registers the library's handle under it
  scalar(size=S, mode=H, bit=B)
               an alpha/beta: u8 on-device flag (bit B of the pointer mode mirrored on
               object H), then the u64 device address, or u64 n and n bytes read on the host
  scalarout(size=S, mode=H, bit=B)
               a scalar result: u8 on-device flag, then the u64 device address, or the u64
               size of the host result, which the reply carries back
  scalarinout(size=S, mode=H, bit=B)
               a scalar the library reads and writes (rotg's a and b): sent as a scalar, and
               in host mode the reply carries its S bytes back
  devptr(.., wsize=W, csize=C)
               as devptr; W/C replace the extent on the worker/client side only (where only
               that side can compute it); NULL is accepted when the extent is 0 (an empty
               array: passed on as NULL); `nullable`: NULL is accepted whatever the extent
               (the library takes it as "none")
  inbytes(size=S) host bytes read by the library: u64 count, then the bytes; the worker checks
               the count against S (which may name a later parameter); `nullable`
  devptrs(count=N, size=S, stream=H)
               u64 address of a device array of N device pointers, each to S bytes: the
               worker reads the array in H's stream order and checks every pointer

Multi-phase calls and workspaces (cuSOLVER, cuSPARSE):
  devptr(.., keep=O)
               after the call succeeded, the checked range is kept with library object O (a
               handle or newhandle parameter), under the parameter's name (a later call's
               range of the same name replaces it; NULL forgets it). Every later call naming
               O checks its kept ranges again (below), so a descriptor's arrays or a
               multi-phase buffer freed between the phases never reach the library
  devptr(.., query=F[, unit=U])
               the extent, on the worker, is what the library's own size query F answers for
               this call's arguments (F's parameters matched by name; its last parameter is
               the answer, times U bytes): for a buffer the call takes without its size
  hostwork(size=S or query=F[, unit=U], owner=O)
               the application's host workspace: nothing travels; the worker passes S bytes
               of its own, kept with object O (grown as needed, at most 256 MiB), so the
               application's address never reaches the library
  A library object named by a call is checked again with its kept ranges unless the
  parameter `destroys` or `sets` the object, or the call only asks (a `memo` query, or a
  sync call with results and no device pointer).
  in, inout (unsized): on the worker a pointer named like the parameter points at the value
               received (NULL if none), so another parameter's size may say `*name`
"""
import os
import re

from model import ApiError

# Handle kinds of library objects: the enumerators of HandleKind from kFirstLibraryKind to
# kLastLibraryKind, read from memmgr/include/remora/memmgr/handle_table.h, where they are
# declared once (without the `k`: CublasHandle). The client mirrors them
# (shim/src/lib_objects.h), the worker keeps them in the session's LibObjects
# (server/worker/session/lib_objects.h).
HANDLE_TABLE_H = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "memmgr", "include", "remora",
                              "memmgr", "handle_table.h")


def library_kinds(path=HANDLE_TABLE_H):
    """{name: value} of the library object kinds declared in `path` (handle_table.h)."""
    text = open(path).read()
    bounds = {}
    for name in ("kFirstLibraryKind", "kLastLibraryKind"):
        m = re.search(r"constexpr uint8_t %s = (0x[0-9a-fA-F]+);" % name, text)
        if not m:
            raise ApiError("%s: no %s" % (path, name))
        bounds[name] = int(m.group(1), 16)
    enum = re.search(r"enum class HandleKind[^{]*\{(.*?)\};", text, re.S)
    if not enum:
        raise ApiError("%s: no enum class HandleKind" % path)
    kinds = {}
    for m in re.finditer(r"^\s*k(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*,", enum.group(1), re.M):
        v = int(m.group(2), 0)
        if bounds["kFirstLibraryKind"] <= v <= bounds["kLastLibraryKind"]:
            kinds[m.group(1)] = v
    return kinds


LIB_KINDS = library_kinds()


def is_lib_handle(p):
    return p.role in ("handle", "newhandle") and _first(p.args) in LIB_KINDS or \
        p.role in ("handle", "newhandle") and p.args.get("kind") in LIB_KINDS


def lib_kind(e, p):
    return _kind(e, p)


def _expr(e, prefix=""):
    return e


def client_encode(e, p):
    """Statements that validate `p` in the shim and append it to the request (`c`)."""
    n, r = p.name, p.role
    err = e.lib.status["invalid"]
    lib = _client_lib_encode(e, p, err)
    if lib is not None:
        return lib
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
        # NULL with a zero extent is what a library gets for an empty array (PyTorch's and
        # CuPy's empty tensors have no memory): it reads and writes nothing, so NULL passes
        # through as the application gave it, as natively.
        size = p.args.get("csize", p.args.get("size", "1"))
        check = "RETURN_IF_ERROR(c.DevPtr(reinterpret_cast<uint64_t>(%s), static_cast<uint64_t>(%s)));" % (_asint(p), size)
        if "nullable" in p.flags:
            return ["if (%s == 0) c.Put<uint64_t>(0); else %s" % (_asint(p), check)]
        return ["if (%s == 0 && static_cast<uint64_t>(%s) == 0) c.Put<uint64_t>(0); else %s" % (_asint(p), size, check)]
    if r in ("in", "inout"):
        lines = []
        if "nullable" not in p.flags:
            lines.append('if (%s == nullptr) return c.Fail(%s, "%s is NULL");' % (n, err, n))
        lines.append("c.PutOptional(%s, %s);" % (n, _size(p)))
        return lines
    if r == "array" and "nullable" in p.flags:
        count = p.args.get("ccount", p.args["count"])
        return ["c.Put<uint8_t>(%s != nullptr);" % n,
                "if (%s != nullptr) c.PutArray(%s, static_cast<uint64_t>(%s), sizeof(%s));" % (n, n, count, p.pointee)]
    if r == "array":
        count = p.args.get("ccount", p.args["count"])
        return ['if (%s == nullptr && (%s) != 0) return c.Fail(%s, "%s is NULL");' % (n, count, err, n),
                "c.PutArray(%s, static_cast<uint64_t>(%s), sizeof(%s));" % (n, count, p.pointee)]
    if r == "string":
        return ['if (%s == nullptr) return c.Fail(%s, "%s is NULL");' % (n, err, n), "c.PutString(%s);" % n]
    if r == "out":
        lines = []
        if "nullable" not in p.flags:
            lines.append('if (%s == nullptr) return c.Fail(%s, "%s is NULL");' % (n, err, n))
        if ("size" in p.args or "csize" in p.args) and "nullable" in p.flags:
            lines.append("c.Put<uint64_t>(%s == nullptr ? 0 : static_cast<uint64_t>(%s));" % (n, _csize(p)))
        elif "size" in p.args or "csize" in p.args:
            lines.append("c.Put<uint64_t>(static_cast<uint64_t>(%s));" % _csize(p))
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
    if r in ("scalarout", "scalarinout"):
        return ["if (!%s_dev) r.GetArray(%s, static_cast<uint64_t>(%s), 1);" % (n, n, _csize(p))]
    if r == "out" and ("size" in p.args or "csize" in p.args) and "nullable" in p.flags:
        return ["if (%s) r.GetArray(%s, static_cast<uint64_t>(%s), 1); else { std::vector<std::byte> skip; (void)r.GetArray(&skip); }"
                % (n, n, _csize(p))]
    if r == "out" and ("size" in p.args or "csize" in p.args):
        return ["r.GetArray(%s, static_cast<uint64_t>(%s), 1);" % (n, _csize(p))]
    if r == "out":
        if p.role == "out" and "handle" in p.args:
            return ["{ uint64_t h = r.Get<uint64_t>(); if (%s) *%s = (%s)(h); }" % (n, n, p.pointee)]
        if "nullable" in p.flags:
            return ["{ auto v = r.Get<%s>(); if (%s) *%s = v; }" % (p.pointee, n, n)]
        return ["*%s = r.Get<%s>();" % (n, p.pointee)]
    if r == "inout" and "size" in p.args:
        # (A NULL array still gets its bytes in the reply: skipped.)
        return ["if (%s) r.GetArray(%s, static_cast<uint64_t>(%s), 1); else { std::vector<std::byte> skip; (void)r.GetArray(&skip); }"
                % (n, n, p.args["size"])]
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
    lib = _worker_lib_decode(e, p)
    if lib is not None:
        return lib
    if r == "value":
        return ["%s %s = x.in().Get<%s>();" % (_local(p), n, _local(p))]
    if r == "fixup":
        return ["%s %s = x.in().Get<%s>();" % (_local(p), n, _local(p))]
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
        return ["%s %s_v{};" % (p.pointee, n), "bool %s_has = x.in().GetOptional(&%s_v, sizeof(%s_v));" % (n, n, n),
                "[[maybe_unused]] %s* %s = %s_has ? &%s_v : nullptr;" % (p.pointee, n, n, n)]
    if r == "array" and "nullable" in p.flags:
        return ["std::vector<%s> %s_v;" % (p.pointee, n), "bool %s_has = x.in().Get<uint8_t>() != 0;" % n,
                "if (%s_has) RETURN_IF_ERROR(x.in().GetArray(&%s_v));" % (n, n),
                "[[maybe_unused]] const auto* %s = %s_has ? %s_v.data() : nullptr;  // (for extents that read it)" % (n, n, n)]
    if r == "array":
        return ["std::vector<%s> %s_v;" % (p.pointee, n), "RETURN_IF_ERROR(x.in().GetArray(&%s_v));" % n,
                "[[maybe_unused]] const auto* %s = %s_v.data();  // (for extents that read it)" % (n, n)]
    if r == "string":
        return ["std::string %s_v;" % n, "RETURN_IF_ERROR(x.in().GetString(&%s_v));" % n]
    if r == "out" and ("size" in p.args or "wsize" in p.args):
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
    lib = _worker_lib_check(e, p)
    if lib is not None:
        return lib
    if r == "devptr" and "query" in p.args:
        return _query_check(e, p)
    if r == "devptr":
        size = p.args.get("wsize", p.args.get("size", "1"))
        check = "RETURN_IF_ERROR(x.DevPtr(%s_addr, static_cast<uint64_t>(%s), reinterpret_cast<uint64_t*>(&%s)));" % (n, size, n)
        if "nullable" in p.flags:
            check = "if (%s_addr != 0) %s" % (n, check)
        else:  # (NULL with a zero extent: an empty array, passed on as NULL)
            check = "if (%s_addr != 0 || static_cast<uint64_t>(%s) != 0) %s" % (n, size, check)
        return ["%s %s{};" % (p.ctype, n), check]
    if r == "fixup":
        return ["RETURN_IF_ERROR(%s(x, &%s));" % (p.args.get("hook") or _first(p.args), n)]
    if r in ("array", "outarray"):
        count = p.args.get("wcount", p.args["count"])  # (wcount: the worker's own expression of it)
        lines = ["if (%s%s_v.size() < static_cast<size_t>(%s)) return x.Malformed(\"%s holds fewer elements than %s\");"
                 % ("%s_has && " % n if "nullable" in p.flags else "", n, count, n, count.replace('"', ''))]
        if r == "array" and "fixup" in p.args:
            lines.append("for (auto& el : %s_v) RETURN_IF_ERROR(%s(x, &el));" % (n, p.args["fixup"]))
        if r == "array" and "handle" in p.args:
            lines.append("RETURN_IF_ERROR(x.Handles(HandleKind::k%s, reinterpret_cast<void**>(%s_v.data()), %s_v.size()));"
                         % (p.args["handle"], n, n))
        return lines
    if r == "outstring":
        return ["if (%s_v.size() < static_cast<size_t>(%s)) return x.Malformed(\"%s is shorter than %s\");" % (n, p.args["len"], n, p.args["len"])]
    if r == "out" and ("size" in p.args or "wsize" in p.args):
        empty_ok = "!%s_v.empty() && " % n if "nullable" in p.flags else ""
        return ["if (%s%s_v.size() < static_cast<size_t>(%s)) return x.Malformed(\"%s is shorter than its size\");" % (empty_ok, n, _wsize(p), n)]
    if r == "out" and "handle" in p.args:
        # A created handle counts against the session's limit for its kind (worker/session/limits.h).
        return ["RETURN_IF_ERROR(x.HandleRoom(HandleKind::k%s));" % p.args["handle"]]
    if r == "array" and "fixup" in p.args:
        return ["for (auto& el : %s_v) RETURN_IF_ERROR(%s(x, &el));" % (n, p.args["fixup"])]
    if r in ("in", "inout") and "fixup" in p.args:
        return ["if (%s_has) RETURN_IF_ERROR(%s(x, &%s_v));" % (n, p.args["fixup"], n)]
    return []


def worker_arg(e, p):
    """The expression passed to the real function for `p`."""
    n, r = p.name, p.role
    if r == "newhandle":
        return "&%s_v" % n
    if r in ("value", "stream", "handle", "device", "devptr", "fixup", "scalar", "scalarout", "scalarinout", "devptrs", "inbytes", "hostwork"):
        return n
    if r in ("in", "inout") and "size" in p.args:
        return "(%s_has ? (%s)(%s_v.data()) : nullptr)" % (n, p.ctype, n)
    if r in ("in", "inout"):
        return "(%s_has ? &%s_v : nullptr)" % (n, n)
    if r == "out" and ("size" in p.args or "wsize" in p.args) and "nullable" in p.flags:
        return "(%s_v.empty() ? nullptr : (%s)(%s_v.data()))" % (n, p.ctype, n)
    if r == "out" and ("size" in p.args or "wsize" in p.args):
        return "(%s)(%s_v.data())" % (p.ctype, n)
    if r == "array" and "nullable" in p.flags:
        return "(%s_has ? %s_v.data() : nullptr)" % (n, n)
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
    if r in ("scalarout", "scalarinout"):
        return ["if (!%s_dev) x.out().PutArray(%s_h.data(), %s_n, 1);" % (n, n, n)]
    if r == "out" and "used" in p.args:
        # The first `used` bytes only (the client reads up to its room).
        return ["x.out().PutArray(%s_v.data(), std::min<size_t>(%s_v.size(), static_cast<size_t>(%s_v)), 1);" % (n, n, p.args["used"])]
    if (r == "out" or r == "inout") and ("size" in p.args or "wsize" in p.args):
        return ["x.out().PutArray(%s_v.data(), %s_v.size(), 1);" % (n, n)]
    if r == "out":
        if "handle" in p.args:
            return ["x.out().Put<uint64_t>(x.AdoptHandle(HandleKind::k%s, (void*)(uintptr_t)(%s_v)));" % (p.args["handle"], n)]
        return ["x.out().Put(%s_v);" % n]
    if r == "inout":
        return ["x.out().Put(%s_v);" % n]
    if r == "outarray" and "handle" in p.args:
        return ["for (auto& el : %s_v) el = (%s)(x.AdoptHandle(HandleKind::k%s, (void*)(uintptr_t)(el)));" % (n, p.pointee, p.args["handle"]),
                "x.out().PutArray(%s_v.data(), %s_v.size(), sizeof(%s_v[0]));" % (n, n, n)]
    if r in ("outarray", "outstring"):
        return ["x.out().PutArray(%s_v.data(), %s_v.size(), sizeof(%s_v[0]));" % (n, n, n)]
    return []


def _size(p):
    return p.args["size"] if "size" in p.args else "sizeof(%s)" % p.pointee


def _local(p):
    """The type of the worker's local for a by-value parameter: a top-level const dropped
    (`const int blockSize`, `const cusparseMatDescr_t descrA`: the local is assigned)."""
    t = p.ctype.strip()
    if t.startswith("const ") and not t.endswith("*"):
        return t[len("const "):].strip()
    return t


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


# ---- math-library roles ---------------------------------------------------------------------


def _csize(p):
    return p.args.get("csize", p.args.get("size", "1"))


def _wsize(p):
    return p.args.get("wsize", p.args.get("size", "1"))


def _mode_param(e, p):
    h = p.args.get("mode")
    for q in e.params:
        if q.name == h and is_lib_handle(q):
            return q
    raise ApiError("%s: %s's mode=%s must name a library handle parameter" % (e.name, p.name, h))


def _client_lib_encode(e, p, err):
    n, r = p.name, p.role
    if r == "handle" and is_lib_handle(p):
        kind = _kind(e, p)
        nul = "true" if "nullable" in p.flags else "false"
        ends = ", true" if "destroys" in p.flags else ""
        return ["RETURN_IF_ERROR(c.Object(HandleKind::k%s, shim::HandleBits(HandleKind::k%s, %s), %s%s));" % (kind, kind, n, nul, ends)]
    if r == "newhandle":
        return ['if (%s == nullptr) return c.Fail(%s, "%s is NULL");' % (n, err, n),
                "const uint64_t %s_id = c.NewObject(HandleKind::k%s);" % (n, _kind(e, p))]
    if r in ("scalar", "scalarout", "scalarinout"):
        h = _mode_param(e, p)
        hk = _kind(e, h)
        size = _csize(p)
        lines = ["const bool %s_dev = c.ObjectMode(shim::HandleBits(HandleKind::k%s, %s), %s);" % (n, hk, h.name, p.args.get("bit", "0")),
                 "c.Put<uint8_t>(%s_dev ? 1 : 0);" % n]
        dev = "RETURN_IF_ERROR(c.DevPtr(static_cast<uint64_t>((uintptr_t)(%s)), static_cast<uint64_t>(%s)));" % (n, size)
        if "nullable" in p.flags:
            dev = "if (%s == nullptr) c.Put<uint64_t>(0); else %s" % (n, dev)
        else:  # (as a devptr: NULL with a zero extent is an empty array)
            dev = "if (%s == nullptr && static_cast<uint64_t>(%s) == 0) c.Put<uint64_t>(0); else %s" % (n, size, dev)
        lines.append("if (%s_dev) {" % n)
        lines.append("  " + dev)
        lines.append("} else {")
        if r == "scalar" and "nullable" in p.flags:
            lines.append("  c.PutArray(%s, %s != nullptr ? static_cast<uint64_t>(%s) : 0, 1);" % (n, n, size))
        elif r in ("scalar", "scalarinout"):
            lines.append('  if (%s == nullptr) return c.Fail(%s, "%s is NULL");' % (n, err, n))
            lines.append("  c.PutArray(%s, static_cast<uint64_t>(%s), 1);" % (n, size))
        else:
            lines.append('  if (%s == nullptr && static_cast<uint64_t>(%s) != 0) return c.Fail(%s, "%s is NULL");' % (n, size, err, n))
            lines.append("  c.Put<uint64_t>(static_cast<uint64_t>(%s));" % size)
        lines.append("}")
        return lines
    if r == "inbytes":
        size = p.args["size"]
        if "nullable" in p.flags:
            return ["c.PutArray(%s, %s != nullptr ? static_cast<uint64_t>(%s) : 0, 1);" % (n, n, size)]
        return ['if (%s == nullptr && static_cast<uint64_t>(%s) != 0) return c.Fail(%s, "%s is NULL");' % (n, size, err, n),
                "c.PutArray(%s, static_cast<uint64_t>(%s), 1);" % (n, size)]
    if r == "hostwork":
        return ["(void)%s;  // the worker passes a host workspace of its own" % n]
    if r == "devptrs":
        count = p.args["count"]
        check = "RETURN_IF_ERROR(c.DevPtr(static_cast<uint64_t>((uintptr_t)(%s)), static_cast<uint64_t>(%s) * sizeof(void*)));" % (n, count)
        return ["if (%s == nullptr && static_cast<uint64_t>(%s) == 0) c.Put<uint64_t>(0); else %s" % (n, count, check)]
    return None


def _worker_lib_decode(e, p):
    n, r = p.name, p.role
    if r == "handle" and is_lib_handle(p):
        nul = "true" if "nullable" in p.flags else "false"
        out = ["%s %s{};" % (_local(p), n), "[[maybe_unused]] LibObject* %s_obj = nullptr;" % n,
               "RETURN_IF_ERROR(x.Object(HandleKind::k%s, %s, &%s, &%s_obj));" % (_kind(e, p), nul, n, n)]
        if "destroys" in p.flags:
            # Only an object's own kind ends it (another kind may serve for it: HandleKindServes).
            out.append("if (%s_obj != nullptr && %s_obj->kind != HandleKind::k%s) return Error(Err::kInvalidValue, \"%s is not a %s\");"
                       % (n, n, _kind(e, p), n, _kind(e, p)))
        if rechecks(e, p):
            out.append("RETURN_IF_ERROR(x.RecheckObject(%s_obj, \"%s\"));" % (n, n))
        return out
    if r == "hostwork":
        return []
    if r == "newhandle":
        return ["const uint64_t %s_id = x.in().Get<uint64_t>();" % n, "[[maybe_unused]] %s %s_v{};" % (p.pointee, n)]
    if r in ("scalar", "scalarinout"):
        return ["const uint8_t %s_dev = x.in().Get<uint8_t>();" % n, "uint64_t %s_addr = 0;" % n,
                "std::vector<std::byte> %s_h;" % n,
                "if (%s_dev) %s_addr = x.in().Get<uint64_t>(); else RETURN_IF_ERROR(x.in().GetArray(&%s_h));" % (n, n, n)]
    if r == "scalarout":
        return ["const uint8_t %s_dev = x.in().Get<uint8_t>();" % n, "uint64_t %s_addr = 0, %s_n = 0;" % (n, n),
                "if (%s_dev) %s_addr = x.in().Get<uint64_t>(); else %s_n = x.in().Get<uint64_t>();" % (n, n, n)]
    if r == "devptrs":
        return ["const uint64_t %s_addr = x.in().Get<uint64_t>();" % n]
    if r == "inbytes":
        return ["std::vector<std::byte> %s_v;" % n, "RETURN_IF_ERROR(x.in().GetArray(&%s_v));" % n]
    return None


def _worker_lib_check(e, p):
    n, r = p.name, p.role
    if r == "hostwork":
        owner = _object_param(e, p, "owner")
        lines = []
        size = p.args.get("size")
        if "query" in p.args:
            lines += _query_size(e, p)
            size = "%s_q" % n
        return lines + ["%s %s = nullptr;" % (p.ctype, n),
                        "{ auto hw = x.HostWork(%s_obj, static_cast<uint64_t>(%s)); if (!hw.ok()) return hw.take_status(); %s = static_cast<%s>(*hw); }"
                        % (owner.name, size, n, p.ctype)]
    if r == "newhandle":
        return ["RETURN_IF_ERROR(x.CheckNewObject(HandleKind::k%s, %s_id));" % (_kind(e, p), n)]
    if r in ("scalar", "scalarout", "scalarinout"):
        h = _mode_param(e, p)
        size = _wsize(p)
        lines = ["RETURN_IF_ERROR(x.ScalarMode(%s_obj, %s, %s_dev != 0, \"%s\"));" % (h.name, p.args.get("bit", "0"), n, n),
                 "%s %s = nullptr;" % (p.ctype, n)]
        if r == "scalarinout":  # the host value comes back with as many bytes as it came
            lines.insert(0, "const uint64_t %s_n = %s_h.size();" % (n, n))
        dev = "{ uint64_t u = 0; RETURN_IF_ERROR(x.DevPtr(%s_addr, static_cast<uint64_t>(%s), &u)); %s = (%s)(uintptr_t)u; }" % (n, size, n, p.ctype)
        if "nullable" in p.flags:
            dev = "if (%s_addr != 0) %s" % (n, dev)
        else:
            dev = "if (%s_addr != 0 || static_cast<uint64_t>(%s) != 0) %s" % (n, size, dev)
        lines.append("if (%s_dev) {" % n)
        lines.append("  " + dev)
        if r in ("scalar", "scalarinout"):
            host = "{ x.PadScalar(&%s_h); %s = (%s)(%s_h.data()); }" % (n, n, p.ctype, n)
            if "nullable" in p.flags:
                host = "if (!%s_h.empty()) %s" % (n, host)
        else:
            host = "{ std::vector<std::byte>& b = %s_h; RETURN_IF_ERROR(x.Buffer(&b, %s_n)); x.PadScalar(&b); %s = (%s)(b.data()); }" % (n, n, n, p.ctype)
        lines.append("} else " + host)
        if r == "scalarout":
            lines.insert(0, "std::vector<std::byte> %s_h;" % n)
        return lines
    if r == "inbytes":
        cond = "%s_v.size() != static_cast<size_t>(%s)" % (n, p.args["size"])
        if "nullable" in p.flags:
            cond = "!%s_v.empty() && %s" % (n, cond)
        return ["if (%s) return x.Malformed(\"%s does not hold the bytes its size says\");" % (cond, n),
                "%s %s = %s_v.empty() ? nullptr : static_cast<%s>(%s_v.data());" % (p.ctype, n, n, p.ctype, n)]
    if r == "devptrs":
        h = p.args.get("stream")
        return ["%s %s{};" % (p.ctype, n),
                "if (%s_addr != 0 || static_cast<uint64_t>(%s) != 0) {" % (n, p.args["count"]),
                "  uint64_t u = 0;",
                "  RETURN_IF_ERROR(x.DevPtrArray(%s_addr, static_cast<uint64_t>(%s), static_cast<uint64_t>(%s), %s_obj, &u));"
                % (n, p.args["count"], p.args["size"], h),
                "  %s = (%s)(uintptr_t)u;" % (n, p.ctype), "}"]
    return None


# ---- multi-phase calls: kept ranges, size queries, host workspaces ------------------------------


def _object_param(e, p, arg):
    """The library-object parameter `p`'s argument `arg` names."""
    want = p.args.get(arg)
    for q in e.params:
        if q.name == want and (is_lib_handle(q) or q.role == "newhandle"):
            return q
    raise ApiError("%s: %s's %s=%s must name a library handle parameter" % (e.name, p.name, arg, want))


def rechecks(e, p):
    """Whether a call naming library object `p` checks the object's kept ranges again first."""
    if "destroys" in p.flags or "sets" in p.flags:
        return False
    if "memo" in e.attrs:
        return False
    if e.cls == "sync" and any(q.role in ("out", "outarray", "outstring") for q in e.params) and \
            not any(q.role in ("devptr", "devptrs", "scalar", "scalarout") for q in e.params):
        return False
    return True


def keeps(e):
    """(parameter, object parameter) pairs of the call's ranges kept with an object."""
    return [(p, _object_param(e, p, "keep")) for p in e.params if p.role == "devptr" and "keep" in p.args]


def worker_keep(e, p, obj):
    """After the call succeeded: `p`'s range kept with `obj` (NULL forgets it)."""
    size = "%s_q" % p.name if "query" in p.args else p.args.get("wsize", p.args.get("size", "1"))
    return ["x.KeepRange(%s_obj, \"%s\", %s_addr, static_cast<uint64_t>(%s));" % (obj.name, p.name, p.name, size)]


def _query_size(e, p):
    """`<name>_q`: the bytes the library's size query (query=F, unit=U) answers for this call's
    arguments. F's parameters are matched by name; its last is the answer; another output of
    F that this call does not have is answered into a scratch value."""
    n = p.name
    q = e.lib.entry(p.args["query"])
    if q is None or not q.signed:
        raise ApiError("%s: %s's query=%s names no entry with a signature" % (e.name, n, p.args["query"]))
    names = {x.name: x for x in e.params}
    args, scratch = [], []
    for i, qp in enumerate(q.params[:-1]):
        if qp.name in names:
            args.append(worker_arg(e, names[qp.name]))
        elif qp.role in ("out", "inout") or (qp.role == "value" and qp.ctype.endswith("*") and not qp.ctype.startswith("const")):
            scratch.append("%s scratch%d{};" % (qp.pointee, i))
            args.append("&scratch%d" % i)
        else:
            raise ApiError("%s: query %s's parameter %s is not one of this call's" % (e.name, q.name, qp.name))
    last = q.params[-1]
    unit = p.args.get("unit", "1")
    return ["uint64_t %s_q = 0;" % n,
            "{ %s%s got{}; if (x.Library<Api>().%s(%s&got) == %s && got > 0) %s_q = static_cast<uint64_t>(got) * %s; }"
            % ("".join(x + " " for x in scratch), last.pointee, q.name, "".join(a + ", " for a in args), e.lib.status["ok"], n, unit)]


def _query_check(e, p):
    """A devptr whose extent the library's size query answers (query=F, unit=U)."""
    n = p.name
    lines = _query_size(e, p) + ["%s %s{};" % (p.ctype, n)]
    check = "RETURN_IF_ERROR(x.DevPtr(%s_addr, %s_q, reinterpret_cast<uint64_t*>(&%s)));" % (n, n, n)
    if "nullable" in p.flags:
        check = "if (%s_addr != 0) %s" % (n, check)
    lines.append(check)
    return lines

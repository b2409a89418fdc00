"""API descriptions (protocol/api/*.api): the parser and the in-memory model.

A description file has one `library` header followed by one entry per exported function:

    library cuda
        soname libcuda.so.1
        header cuda.h
        status CUresult ok=CUDA_SUCCESS lost=CUDA_ERROR_DEVICE_UNAVAILABLE unsupported=CUDA_ERROR_NOT_SUPPORTED invalid=CUDA_ERROR_INVALID_VALUE
        domain cuda
        wire 1

    @7 cuStreamGetId  sync  ptsz
        CUresult (CUstream hStream : stream, unsigned long long* streamId : out)

Header keys beside those: `hooks` (headers of size expressions), `hooks_ns`, `client_include`,
`worker_include`, `include` (headers of the description's own the generated code includes
after NVIDIA's: types a library header cannot bring in beside the others), `status_header`.

An entry line is `[@N] name attribute...`; its indented continuation lines hold the C
signature `ret (type name [: role], ...)`. `#` starts a comment. See docs/ARCHITECTURE.md,
"How to add an API function", for the vocabulary.
"""
import re

# ---- the vocabulary ---------------------------------------------------------------------
# Every word a description may use is registered below; any other is an error naming its
# file and line, so that a misspelt attribute fails the build instead of being ignored.
# docs/ARCHITECTURE.md ("The description language") says what each word means: a new word is
# registered here and documented there (unit.apigen_test, tools/gen/tests, checks that every
# registered word is documented).

CLASSES = ("sync", "ordered", "wait", "custom", "unsupported", "local", "via",
           # exported, answers the library's "not supported" for a written reason no server could
           # ever serve it (`reason=KEY`, one of REFUSAL_REASONS; listed in docs/COMPATIBILITY.md)
           "refused")
# Why a function is refused (class `refused`, attribute `reason=`): kept short, each one a
# reason no GPU server could ever serve such a call. docs/COMPATIBILITY.md ("Math libraries")
# lists the same keys; tests/integration/libs_served_test.py checks both.
REFUSAL_REASONS = {
    "undeclared": "declared in no public header: no application is built against it, and its "
                  "arguments (what to check, what travels) are unknown",
}

# Entry attributes beside the class: name -> the values it takes (None: a bare word; "*": any
# value, written name=VALUE; a tuple: one of those values). `via` is a class with a value.
ATTRIBUTES = {
    "via": "*",          # the class that forwards to another description's entry
    "ptsz": None,        # also exports NAME_ptsz (per-thread default stream)
    "ptds": None,        # also exports NAME_ptds
    "internal": None,    # travels, exported by no library (a hand-written entry calls its stub)
    "hand": None,        # both ends hand-written (client stub, worker Op_NAME); plumbing generated
    "export": ("hand",),  # the exported entry point is hand-written around the generated stub
    "memo": None,        # the client answers a repeated query from its memo
    "measure": None,     # the worker charges the GPU memory the call allocates to its object
    "launches": None,    # GPU work the compute scheduler admits
    "mirror": "*",       # client hook after the call went out or succeeded
    "worker": "*",       # worker function called instead of the library's, around it
    "wcall": "*",        # worker hook called instead of the library function
    "wafter": "*",       # worker hook after a successful library call
    "wapi": None,        # the worker's library interface includes this function for a hook
    "libs": "*",         # the (sub-)libraries that export it (front,NAME...; default front)
    "reason": tuple(sorted(REFUSAL_REASONS)),  # why a `refused` entry is refused (issue 42)
    "legacy": "*",       # a `local` entry of cuBLAS's legacy API answered on top of this handle-API entry
    "answer_if": "*",    # an ordered call the client answers itself when this hook says so (cuDNN)
    "check": "*",        # a client hook that refuses bad arguments before the call is posted (NCCL)
    "idle": None,        # a stream's synchronisation or query the client answers while nothing was sent since the stream drained
    "noalias": None,     # not exported under the library's alias_prefix too (NCCL)
}

# Keys of the `library` header; `status` and `sublibrary` take NAME key=value... lines.
HEADER_KEYS = ("role", "soname", "version", "header", "status_header", "hooks", "hooks_ns", "client_include",
               "worker_include", "domain", "wire", "procs", "document", "prelude", "status", "sublibrary",
               "include", "alias_prefix", "finish", "wdestroy", "path_env")
# What a description makes (`role`): `core`, the CUDA runtime and driver, whose client side is
# Remora's core and its own libraries (libremora.so, libcuda.so.1); `library`, a library served
# whole - a client library of its own under the SONAME it replaces (shim/CMakeLists.txt), a
# table and a dispatch in the worker, a line in remora-run's preload list. Everything built per
# library is listed from these (emit_index.py, tools/gen/apigen.cmake), never by hand.
LIBRARY_ROLES = ("core", "library")
STATUS_KEYS = ("ok", "lost", "unsupported", "invalid", "nomem", "internal")
STATUS_REQUIRED = ("ok", "lost", "unsupported", "invalid")
SUBLIBRARY_KEYS = ("soname", "version")

# Parameter roles: how a parameter crosses the wire (roles.py says what each generates), with
# the named arguments (role(name=expr, ...)) and the flags (words after the role) each takes,
# the arguments it needs, and what a bare word in its parentheses names (a handle kind, a hook).
ROLE_WORDS = {
    # role:      (named arguments,                            flags,                              required,                     bare word)
    "value":     ((),                                         (),                                 (),                           None),
    "stream":    ((),                                         (),                                 (),                           None),
    "handle":    (("kind",),                                  ("nullable", "sets", "destroys"),   (),                           "kind"),
    "device":    ((),                                         (),                                 (),                           None),
    "devptr":    (("size", "wsize", "csize", "keep", "query", "unit"), ("nullable",),                      (),                           None),
    "out":       (("size", "csize", "wsize", "handle", "used"), ("nullable",),                    (),                           None),
    "in":        (("size", "fixup"),                          ("nullable",),                      (),                           None),
    "inout":     (("size", "fixup"),                          ("nullable",),                      (),                           None),
    "array":     (("count", "ccount", "wcount", "fixup", "handle"), ("nullable",),                      ("count",),                   None),
    "outarray":  (("count", "handle"),                        (),                                 ("count",),                   None),
    "string":    ((),                                         (),                                 (),                           None),
    "outstring": (("len",),                                   (),                                 ("len",),                     None),
    "fixup":     (("hook",),                                  (),                                 (),                           "hook"),
    # math libraries
    "newhandle": (("kind",),                                  (),                                 (),                           "kind"),
    "scalar":    (("size", "mode", "bit", "csize", "wsize"),  ("nullable",),                      ("mode",),                    None),
    "scalarout": (("size", "mode", "bit", "csize", "wsize"),  ("nullable",),                      ("mode",),                    None),
    "devptrs":   (("count", "size", "stream"),                (),                                 ("count", "size", "stream"),  None),
    "inbytes":   (("size",),                                  ("nullable",),                      ("size",),                    None),
    "scalarinout": (("size", "mode", "bit", "csize", "wsize"), ("nullable",),                     ("mode",),                    None),
    # the application's host workspace, replaced by one the worker keeps (issue 42)
    "hostwork":  (("size", "query", "unit", "owner"),         (),                                 ("owner",),                   None),
}
ROLES = tuple(ROLE_WORDS)


class ApiError(Exception):
    pass


class Param:
    def __init__(self, ctype, name, role, args, flags):
        self.ctype = ctype          # C type as written, e.g. "unsigned long long*"
        self.name = name
        self.role = role            # one of ROLES
        self.args = args            # dict of role arguments, e.g. {"count": "numAttrs"}
        self.flags = flags          # set of extra words, e.g. {"creates", "nullable"}

    @property
    def pointee(self):
        """For a pointer parameter, the pointed-to type without top-level const."""
        t = self.ctype.strip()
        if not t.endswith("*"):
            raise ApiError("parameter %s (%s) is not a pointer" % (self.name, t))
        t = t[:-1].strip()
        if not t.endswith("*"):  # (`const void**` points at a `const void*`: that const stays)
            t = re.sub(r"^const\s+", "", t)
        t = re.sub(r"\s+const$", "", t)
        return t

    def __repr__(self):
        return "Param(%s %s : %s %s)" % (self.ctype, self.name, self.role, self.args)


class Entry:
    def __init__(self, lib, name, number, cls, attrs, line):
        self.lib = lib
        self.name = name
        self.number = number        # stable wire number, or None
        self.cls = cls              # one of CLASSES
        self.attrs = attrs          # dict: attribute -> value (True for bare words)
        self.line = line
        self.ret = None             # C return type, or None when unsigned
        self.params = []            # list of Param

    @property
    def signed(self):
        return self.ret is not None

    @property
    def twins(self):
        """Names of the per-thread-default-stream twins (name_ptsz, name_ptds)."""
        return [self.name + "_" + t for t in ("ptsz", "ptds") if t in self.attrs]

    @property
    def exported_names(self):
        if self.internal:
            return []
        names = [self.name] + self.twins
        # `alias_prefix P` (NCCL's pncclX profiling names): every function is exported under
        # a second name too, the same function, unless the entry says `noalias`.
        prefix = self.lib.props.get("alias_prefix")
        if prefix and "noalias" not in self.attrs:
            names += [prefix + n for n in names]
        return names

    @property
    def remoted(self):
        return self.cls not in ("unsupported", "refused")

    @property
    def hand(self):
        """Both ends of the call are hand-written (shim: the client stub; worker: Op_<name>),
        for calls whose arguments no role describes; the plumbing is still generated."""
        return "hand" in self.attrs

    @property
    def internal(self):
        """Travels, but no library exports it (a hand-written entry point calls its stub)."""
        return "internal" in self.attrs

    def in_module(self, module):
        """Whether the (sub-)library `module` exports this entry (`libs=front,graph`; the
        front library alone by default)."""
        return module in str(self.attrs.get("libs", "front")).split(",")

    @property
    def travels(self):
        """Whether calls of this entry cross the wire as generated requests."""
        return self.cls in ("sync", "ordered", "wait")

    def decl(self, name=None, param_names=True):
        params = ", ".join(("%s %s" % (p.ctype, p.name)) if param_names else p.ctype for p in self.params)
        return "%s %s(%s)" % (self.ret, name or self.name, params)

    def fnptr_type(self):
        return "%s (*)(%s)" % (self.ret, ", ".join(p.ctype for p in self.params))


class Library:
    def __init__(self, path):
        self.path = path
        self.name = None
        self.props = {}             # soname, header, domain, wire, version, ...
        self.status = None          # {"type":..., "ok":..., ...}
        self.entries = []
        self.sublibraries = []      # [{"name":..., "soname":..., "version":...}] (cuDNN's)

    def entry(self, name):
        for e in self.entries:
            if e.name == name:
                return e
        return None

    @property
    def exported(self):
        return [n for e in self.entries for n in e.exported_names]


# Names the generated code uses for its own locals (the call `c`, its reader `r`, the worker's
# context `x`, a result `st`, the forwarders' table `T()`...): a parameter so named (BLAS's x,
# c, s..., cuSOLVER's T) is renamed with a trailing underscore, in its role expressions too.
# Parameter names are not part of the ABI.
RESERVED = {"c", "r", "x", "st", "cc", "u", "b", "h", "v", "el", "a", "measure0", "rec", "expected", "api", "T"}


def _rename_reserved(e):
    renames = {p.name: p.name + "_" for p in e.params if p.name in RESERVED}
    if not renames:
        return
    pat = re.compile(r"\b(%s)\b" % "|".join(re.escape(n) for n in renames))
    for p in e.params:
        p.name = renames.get(p.name, p.name)
        p.args = {k: (pat.sub(lambda m: renames[m.group(1)], v) if isinstance(v, str) else v) for k, v in p.args.items()}


def _check_attribute(path, lineno, name, k, eq, v, attrs):
    at = "%s:%d: %s" % (path, lineno, name)
    if k in CLASSES and k not in ATTRIBUTES:
        if eq:
            raise ApiError("%s: the class %s takes no value" % (at, k))
        values = None
    elif k in ATTRIBUTES:
        values = ATTRIBUTES[k]
    else:
        raise ApiError("%s: unknown attribute '%s' (classes: %s; attributes: %s)"
                       % (at, k, ", ".join(CLASSES), ", ".join(a for a in ATTRIBUTES if a not in CLASSES)))
    if k in attrs:
        raise ApiError("%s: %s is given twice" % (at, k))
    if values is None and eq:
        raise ApiError("%s: %s takes no value (a bare word)" % (at, k))
    if values is not None and not v:
        raise ApiError("%s: %s needs a value (%s=...)" % (at, k, k))
    if isinstance(values, tuple) and v not in values:
        raise ApiError("%s: %s=%s: the value must be one of %s" % (at, k, v, ", ".join(values)))


def _key_values(at, what, words, first, keys):
    """`FIRST key=value...` of a header line (status, sublibrary), each key one of `keys`."""
    out = {first: words[0]}
    for w in words[1:]:
        k, eq, v = w.partition("=")
        if k not in keys:
            raise ApiError("%s: %s takes no key '%s' (known: %s)" % (at, what, k, ", ".join(keys)))
        if not eq or not v:
            raise ApiError("%s: %s's %s needs a value (%s=...)" % (at, what, k, k))
        out[k] = v
    return out


def _split_params(text):
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out]


def _parse_role(text, where):
    """'devptr(size=bytes) writes' -> ('devptr', {'size': 'bytes'}, {'writes'})"""
    text = text.strip()
    m = re.match(r"^(\w+)(?:\((.*)\))?(.*)$", text)
    if not m:
        raise ApiError("%s: cannot parse role '%s'" % (where, text))
    role, inner, rest = m.group(1), m.group(2), m.group(3)
    if role not in ROLES:
        raise ApiError("%s: unknown role '%s' (known: %s)" % (where, role, ", ".join(ROLES)))
    named, known_flags, required, bare = ROLE_WORDS[role]
    args = {}
    if inner:
        for part in _split_params(inner):
            if "=" in part:
                k, v = part.split("=", 1)
                k = k.strip()
                if k not in named:
                    raise ApiError("%s: role %s takes no argument '%s' (it takes: %s)"
                                   % (where, role, k, ", ".join(named) or "none"))
                args[k] = v.strip()
            else:
                if bare is None:
                    raise ApiError("%s: role %s takes no bare word '%s' (write name=value; it takes: %s)"
                                   % (where, role, part.strip(), ", ".join(named) or "none"))
                if any(v is True for v in args.values()):
                    raise ApiError("%s: role %s takes one %s, not two" % (where, role, bare))
                args[part.strip()] = True
    for k in required:
        if k not in args:
            raise ApiError("%s: role %s needs %s=" % (where, role, k))
    flags = set(rest.split())
    for f in sorted(flags - set(known_flags)):
        raise ApiError("%s: role %s takes no flag '%s' (it takes: %s)" % (where, role, f, ", ".join(known_flags) or "none"))
    return role, args, flags


def _parse_param(text, where):
    role_text = None
    # A role follows the last ' : ' that is outside the C type (C types have no colons).
    if ":" in text:
        text, role_text = text.split(":", 1)
    text = " ".join(text.replace("*", " * ").split()).replace(" *", "*")
    m = re.match(r"^(.*?)\s*\b(\w+)$", text)
    if not m or not m.group(1):
        raise ApiError("%s: parameter '%s' needs a type and a name" % (where, text))
    ctype, name = m.group(1).strip(), m.group(2)
    ctype = ctype.replace("*", "* ").replace("*  ", "* ").strip()
    ctype = re.sub(r"\*\s+\*", "**", ctype)
    ctype = re.sub(r"\s+\*", "*", ctype)
    if role_text is not None:
        role, args, flags = _parse_role(role_text, where)
    else:
        role, args, flags = "value", {}, set()
    return Param(ctype, name, role, args, flags)


def parse(path):
    lib = Library(path)
    current = None       # entry whose signature lines are being read
    sig_lines = []
    in_header = False

    def finish():
        nonlocal current, sig_lines
        if current is not None and sig_lines:
            sig = " ".join(sig_lines)
            where = "%s:%d (%s)" % (path, current.line, current.name)
            m = re.match(r"^(.*?)\s*\((.*)\)\s*$", sig)
            if not m:
                raise ApiError("%s: cannot parse signature '%s'" % (where, sig))
            current.ret = m.group(1).strip()
            params = m.group(2).strip()
            current.params = [] if params in ("", "void") else [_parse_param(p, where) for p in _split_params(params)]
            _rename_reserved(current)
        current, sig_lines = None, []

    with open(path) as f:
        lines = f.readlines()
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indented = line[0] in " \t"
        words = line.split()
        if not indented:
            finish()
            in_header = False
            if words[0] == "library":
                if lib.name is not None:
                    raise ApiError("%s:%d: a second library header" % (path, lineno))
                lib.name = words[1]
                in_header = True
                continue
            number = None
            if words[0].startswith("@"):
                number = int(words[0][1:])
                words = words[1:]
            name, attrs = words[0], {}
            for w in words[1:]:
                k, eq, v = w.partition("=")
                _check_attribute(path, lineno, name, k, eq, v, attrs)
                attrs[k] = v if v else True
            classes = [c for c in CLASSES if c in attrs]
            if len(classes) != 1:
                raise ApiError("%s:%d: %s needs exactly one class of %s" % (path, lineno, name, "/".join(CLASSES)))
            cls = classes[0]
            current = Entry(lib, name, number, cls, attrs, lineno)
            lib.entries.append(current)
            continue
        if in_header:
            key, rest = words[0], words[1:]
            at = "%s:%d" % (path, lineno)
            if key not in HEADER_KEYS:
                raise ApiError("%s: unknown key '%s' in the library header (known: %s)" % (at, key, ", ".join(HEADER_KEYS)))
            if not rest:
                raise ApiError("%s: the library header's %s needs a value" % (at, key))
            if key == "status":
                lib.status = _key_values(at, "status", rest, "type", STATUS_KEYS)
            elif key == "sublibrary":
                lib.sublibraries.append(_key_values(at, "sublibrary", rest, "name", SUBLIBRARY_KEYS))
            else:
                if key in lib.props:
                    raise ApiError("%s: a second %s in the library header" % (at, key))
                lib.props[key] = " ".join(rest)
            continue
        if current is None:
            raise ApiError("%s:%d: indented line outside an entry" % (path, lineno))
        sig_lines.append(line.strip())
    finish()
    validate(lib)
    return lib


def validate(lib):
    where = lib.path
    if lib.name is None or lib.status is None:
        raise ApiError("%s: needs a library header with a status line" % where)
    role = lib.props.get("role")
    if role not in LIBRARY_ROLES:
        raise ApiError("%s: the library header needs a role: %s (got %s)" % (where, " or ".join(LIBRARY_ROLES), role))
    if role == "library":
        for k in ("soname", "wire", "domain"):
            if k not in lib.props:
                raise ApiError("%s: a served library (role library) needs %s in its header" % (where, k))
    for k in STATUS_REQUIRED:
        if k not in lib.status:
            raise ApiError("%s: the status line needs %s=" % (where, k))
    seen_names, seen_numbers = set(), {}
    for e in lib.entries:
        at = "%s:%d (%s)" % (where, e.line, e.name)
        for n in e.exported_names:
            if n in seen_names:
                raise ApiError("%s: %s is listed twice" % (at, n))
            seen_names.add(n)
        if e.travels:
            if e.number is None:
                raise ApiError("%s: a %s entry needs a stable wire number (@N)" % (at, e.cls))
            if e.number in seen_numbers:
                raise ApiError("%s: wire number @%d is also used by %s" % (at, e.number, seen_numbers[e.number]))
            seen_numbers[e.number] = e.name
        if e.remoted and not e.signed:
            raise ApiError("%s: a remoted entry needs its signature" % at)
        if e.cls == "refused" and e.attrs.get("reason") not in REFUSAL_REASONS:
            raise ApiError("%s: a refused entry needs reason= one of %s" % (at, ", ".join(sorted(REFUSAL_REASONS))))
        if "reason" in e.attrs and e.cls != "refused":
            raise ApiError("%s: reason= is for refused entries" % at)
        if e.cls == "ordered":
            for p in e.params:
                if p.role in ("out", "inout", "outarray", "outstring"):
                    raise ApiError("%s: an ordered call cannot return %s (make it sync)" % (at, p.name))
        if e.internal and not e.travels:
            raise ApiError("%s: an internal entry must travel (sync, ordered or wait)" % at)
        if e.cls == "ordered" and any(p.role in ("scalarout", "scalarinout") for p in e.params):
            raise ApiError("%s: an ordered call cannot return a scalar (make it sync)" % at)
        if "launches" in e.attrs and e.cls not in ("sync", "ordered"):
            raise ApiError("%s: `launches` (GPU work the compute scheduler admits) needs a sync or ordered call" % at)
        if "answer_if" in e.attrs and e.cls != "ordered":
            raise ApiError("%s: `answer_if` (answered when a client hook says so) needs an ordered call" % at)
        if "idle" in e.attrs and (e.cls not in ("sync", "wait") or not any(p.role == "stream" for p in e.params)):
            raise ApiError("%s: `idle` (answered while the stream is drained) needs a sync or wait call with a stream" % at)
        if e.cls == "wait" and not any(p.role in ("stream", "handle") for p in e.params):
            raise ApiError("%s: a wait call needs a stream or an event to wait for" % at)
        names = {p.name for p in e.params}
        for p in e.params:
            for k, v in p.args.items():
                # A plain name must be another parameter (expressions are checked by the compiler).
                if k in ("count", "len", "size") and isinstance(v, str) and re.fullmatch(r"[A-Za-z_]\w*", v):
                    if v not in names:
                        raise ApiError("%s: %s's %s refers to unknown parameter '%s'" % (at, p.name, k, v))
                # used=N: the reply carries the first N bytes only, N another plain out parameter.
                if k == "used" and not any(q.name == v and q.role == "out" and not q.args for q in e.params):
                    raise ApiError("%s: %s's used= must name a plain out parameter of the call, not '%s'" % (at, p.name, v))
                if k == "used" and "size" not in p.args:
                    raise ApiError("%s: %s's used= needs size= (the room the caller gives)" % (at, p.name))
    return lib


def shards(entries, n):
    """`entries` cut into `n` consecutive parts of nearly equal size (the first ones larger)."""
    n = max(1, n)
    size, extra = divmod(len(entries), n)
    out, at = [], 0
    for i in range(n):
        take = size + (1 if i < extra else 0)
        out.append(entries[at:at + take])
        at += take
    return out

"""The C enumerations a library's headers declare, read from the headers themselves (its
`header`, `status_header` and `include` files and what they include, found in the -I
directories): the round-trip tests sample an enum-typed argument from its declared
enumerators, as a by-value enum outside its range is a value the type cannot hold.

Only what a C header can say is read: `enum [attributes] tag { ... }`, `typedef enum [tag]
{ ... } name;` and `typedef enum tag name;`. An enumerator is kept when it stands outside any
preprocessor conditional of the body and is not marked deprecated."""
import re

_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
# `enum` with optional attribute macros (__device_builtin__, CUDNN_DEPRECATED...), a tag, a body.
# After the body, the typedef name and its attribute macros (`} cudnnBatchNormMode_t CUDNN_DEPRECATED;`).
_ENUM_BODY = re.compile(r"\b(typedef\s+)?(?:\w+\s+)*?\benum\s+(?:__\w+__\s+|[A-Z_][A-Z0-9_]*\s+)*(\w+)?\s*"
                        r"\{([^{};]*)\}\s*(\w*)(?:\s+[A-Z_][A-Z0-9_]*)*\s*;")
_ENUM_ALIAS = re.compile(r"\btypedef\s+(?:__\w+__\s+)*enum\s+(?:__\w+__\s+)*(\w+)\s+(\w+)\s*;")


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _names(body):
    """The enumerators of an enum body that every configuration declares."""
    out, depth = [], 0
    lines = []
    for line in body.splitlines():
        s = line.strip()
        if re.match(r"#\s*if", s):
            depth += 1
        elif re.match(r"#\s*endif", s):
            depth -= 1
        elif s.startswith("#"):
            continue
        elif depth == 0:
            lines.append(s)
    for part in " ".join(lines).split(","):
        m = re.match(r"\s*([A-Za-z_]\w*)\b(.*)$", part, re.S)
        if m and "DEPRECATED" not in m.group(2):
            out.append(m.group(1))
    return out


def parse(text):
    """name -> [enumerator, ...] of every enum `text` (a header, comments allowed) declares,
    under its tag and its typedef name alike."""
    text = _strip_comments(text)
    enums = {}
    for m in _ENUM_BODY.finditer(text):
        names = _names(m.group(3))
        if not names:
            continue
        for key in (m.group(2), m.group(4) if m.group(1) else None):
            if key:
                enums[key] = names
    for tag, name in _ENUM_ALIAS.findall(text):
        if tag in enums:
            enums.setdefault(name, enums[tag])
    return enums


def of_library(lib, include_dirs):
    """name -> enumerators of the enums a library's headers (and those they include) declare."""
    props = lib.props
    todo = (props.get("header", "").split() + props.get("status_header", "").split() + props.get("include", "").split())
    seen, enums = set(), {}
    while todo:
        h = todo.pop(0)
        if h in seen:
            continue
        seen.add(h)
        for d in include_dirs:
            try:
                with open("%s/%s" % (d, h)) as f:
                    text = f.read()
            except OSError:
                continue
            for k, v in parse(text).items():
                enums.setdefault(k, v)
            todo += _INCLUDE.findall(text)
            break
    return enums

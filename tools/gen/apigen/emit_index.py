"""The index of the libraries Remora serves beside the CUDA runtime and driver (descriptions
whose header says `role library`): one generated header that every per-library list in C++ is
expanded from (the worker's tables, the files it loads, remora-run's preload list). CMake reads
the same headers for its own lists (tools/gen/apigen.cmake, remora_api_libraries)."""
import emit_shim

BANNER = "// Generated from %s by tools/gen/apigen - do not edit.\n"


def served(libs):
    return [l for l in libs if l.props.get("role") == "library"]


def _c_string(v):
    return '"%s"' % v if v else "nullptr"


def emit_libraries_h(libs, api_dir):
    libs = served(libs)
    out = [BANNER % (api_dir + "/*.api"),
           "// The libraries Remora serves whole beside the CUDA runtime and driver (`role library`).\n",
           "#pragma once\n\n",
           "// X(name, wire, soname, core_table, path_env): the description's name (its generated code's\n",
           "// namespace gen::name), its wire number (its remora::Domain), the SONAME it replaces, the\n",
           "// table libremora-core.so exports for it, and the environment variable that names the real\n",
           "// library's file on the worker (nullptr: none).\n",
           "#define REMORA_SERVED_LIBRARIES(X)"]
    for l in libs:
        out.append(" \\\n  X(%s, %s, \"%s\", \"%s\", %s)" % (l.name, l.props["wire"], l.props["soname"], emit_shim.getter(l),
                                                       _c_string(l.props.get("path_env"))))
    out.append("\n\n// Every SONAME a client library answers to, its sub-libraries' too, in the descriptions' order:\n"
               "// what remora-run preloads.\n#define REMORA_CLIENT_SONAMES")
    names = []
    for l in libs:
        names.append(l.props["soname"])
        names.extend(sub["soname"] for sub in l.sublibraries)
    out.append(" \\\n  " + ", \\\n  ".join('"%s"' % n for n in names) + "\n")
    return "".join(out)

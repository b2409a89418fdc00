"""Unit tests of tools/gen/apigen (Python standard library; CTest runs them as apigen_test,
label unit): the description parser's vocabulary, the sharding of large generated files, and
what each generator run reads."""
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
APIGEN = os.path.join(ROOT, "tools", "gen", "apigen")
sys.path.insert(0, APIGEN)

import cenums  # noqa: E402
import emit_index  # noqa: E402
import emit_shim  # noqa: E402
import emit_tests  # noqa: E402
import emit_worker  # noqa: E402
import model  # noqa: E402
from model import ApiError  # noqa: E402

HEADER = """\
library demo
    soname libdemo.so.1
    header demo.h
    status demoStatus_t ok=DEMO_OK lost=DEMO_LOST unsupported=DEMO_UNSUPPORTED invalid=DEMO_INVALID
    domain demo
    wire 9
    role library
"""


def parse_text(text, name="demo.api"):
    """Parses `text` as a description file; returns the Library (or raises ApiError)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        return model.parse(path)


def entries(*lines):
    return HEADER + "\n" + "\n".join(lines) + "\n"


class Vocabulary(unittest.TestCase):
    def assertRejected(self, text, *fragments):
        with self.assertRaises(ApiError) as cm:
            parse_text(text)
        msg = str(cm.exception)
        for frag in fragments:
            self.assertIn(frag, msg)
        return msg

    def test_a_correct_description_parses(self):
        lib = parse_text(entries(
            "@1 demoCreate  sync  measure  wafter=DemoCreated",
            "    demoStatus_t (demoHandle_t* h : newhandle(CublasHandle))",
            "@2 demoRun  ordered  ptsz  mirror=MirrorRun",
            "    demoStatus_t (demoHandle_t h : handle(CublasHandle) sets, void* p : devptr(size=n) nullable, size_t n)",
            "demoLocal  local",
            "    demoStatus_t (int x)",
            "demoOld  unsupported",
            "    demoStatus_t (int x)"))
        self.assertEqual([e.name for e in lib.entries], ["demoCreate", "demoRun", "demoLocal", "demoOld"])
        run = lib.entry("demoRun")
        self.assertEqual(run.attrs["mirror"], "MirrorRun")
        self.assertEqual(run.exported_names, ["demoRun", "demoRun_ptsz"])
        self.assertEqual(run.params[1].args, {"size": "n"})
        self.assertEqual(run.params[1].flags, {"nullable"})

    def test_a_misspelt_attribute_names_its_file_and_line(self):
        msg = self.assertRejected(entries("@1 demoRun  sync  mesure", "    demoStatus_t (int x)"),
                                  "unknown attribute 'mesure'", "demoRun")
        self.assertRegex(msg, r"demo\.api:9: ")

    def test_attribute_values(self):
        self.assertRejected(entries("@1 demoRun  sync  memo=yes", "    demoStatus_t (int x)"), "memo takes no value")
        self.assertRejected(entries("@1 demoRun  sync  mirror", "    demoStatus_t (int x)"), "mirror needs a value")
        self.assertRejected(entries("@1 demoRun  sync  export=auto", "    demoStatus_t (int x)"), "export=auto", "hand")
        self.assertRejected(entries("@1 demoRun  sync  ptsz ptsz", "    demoStatus_t (int x)"), "ptsz is given twice")
        self.assertRejected(entries("@1 demoRun  sync=1", "    demoStatus_t (int x)"), "the class sync takes no value")
        self.assertRejected(entries("demoRun  via", "    demoStatus_t (int x)"), "via needs a value")

    def test_exactly_one_class(self):
        self.assertRejected(entries("@1 demoRun  memo", "    demoStatus_t (int x)"), "needs exactly one class")
        self.assertRejected(entries("@1 demoRun  sync ordered", "    demoStatus_t (int x)"), "needs exactly one class")

    def test_header_keys(self):
        self.assertRejected(HEADER.replace("domain demo", "domian demo"), "demo.api:5:", "unknown key 'domian'")
        self.assertRejected(HEADER.replace("invalid=", "invalud="), "demo.api:4:", "status takes no key 'invalud'")
        self.assertRejected(HEADER.replace(" invalid=DEMO_INVALID", ""), "the status line needs invalid=")
        self.assertRejected(HEADER + "    wire 10\n", "a second wire")
        self.assertRejected(HEADER + "    sublibrary demo_x sonam=libx.so\n", "sublibrary takes no key 'sonam'")

    def test_every_description_says_what_it_makes(self):
        self.assertRejected(HEADER.replace("    role library\n", ""), "needs a role: core or library")
        self.assertRejected(HEADER.replace("role library", "role plugin"), "needs a role", "plugin")
        self.assertRejected(HEADER.replace("    wire 9\n", ""), "a served library (role library) needs wire")
        parse_text(HEADER.replace("    wire 9\n", "").replace("role library", "role core"))  # the core needs none

    def test_the_index_lists_the_served_libraries_alone(self):
        lib = parse_text(HEADER + "    path_env DEMO_PATH\n    sublibrary demo_x soname=libdemo_x.so.1\n")
        core = parse_text(HEADER.replace("role library", "role core").replace("libdemo.so.1", "libcore.so.1"), "core.api")
        text = emit_index.emit_libraries_h([core, lib], "protocol/api")
        self.assertIn('X(demo, 9, "libdemo.so.1", "remora_core_demo_table_v1", "DEMO_PATH")', text)
        self.assertNotIn("libcore.so.1", text)
        self.assertRegex(text, r'REMORA_CLIENT_SONAMES \\\n  "libdemo\.so\.1", \\\n  "libdemo_x\.so\.1"\n')

    def test_library_kinds_are_read_from_the_handle_table(self):
        import roles
        kinds = roles.library_kinds()
        self.assertEqual(kinds["CublasHandle"], 0x70)
        self.assertEqual(kinds["NcclComm"], 0x90)
        self.assertNotIn("Stream", kinds)  # a core object, below the range
        self.assertNotIn("Graph", kinds)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "handle_table.h")
            with open(path, "w") as f:
                f.write("enum class HandleKind : uint8_t {\n  kStream = 0x51,\n  kDemoHandle = 0x70,\n  kLast = 0xd0,\n};\n"
                        "inline constexpr uint8_t kFirstLibraryKind = 0x70;\ninline constexpr uint8_t kLastLibraryKind = 0xcf;\n")
            self.assertEqual(roles.library_kinds(path), {"DemoHandle": 0x70})
            with open(path, "w") as f:
                f.write("enum class HandleKind : uint8_t {\n  kDemoHandle = 0x70,\n};\n")
            with self.assertRaises(ApiError):
                roles.library_kinds(path)

    def test_roles(self):
        def sig(params):
            return entries("@1 demoRun  sync", "    demoStatus_t (%s)" % params)
        self.assertRejected(sig("void* p : devptr(sise=8)"), "role devptr takes no argument 'sise'")
        self.assertRejected(sig("void* p : devptr(size=8) nulable"), "role devptr takes no flag 'nulable'")
        self.assertRejected(sig("int* a : array(n)"), "role array takes no bare word 'n'")
        self.assertRejected(sig("int* a : array(fixup=F)"), "role array needs count=")
        self.assertRejected(sig("void* h : handle(Event, Pool)"), "takes one kind, not two")
        self.assertRejected(sig("int x : valeu"), "unknown role 'valeu'")
        self.assertRejected(sig("int* a : array(count=m), int n"), "refers to unknown parameter 'm'")
        self.assertRejected(sig("void* b : out(size=n, used=m), size_t n, size_t* k : out"), "used= must name a plain out parameter")
        self.assertRejected(sig("void* b : out(size=n, used=n), size_t n"), "used= must name a plain out parameter")
        self.assertRejected(sig("void* b : out(wsize=n, used=k), size_t n, size_t* k : out"), "used= needs size=")
        parse_text(entries("@1 demoRun  sync", "    demoStatus_t (void* b : out(size=n, used=k), size_t n, size_t* k : out)"))

    def test_a_device_pointer_may_be_null_only_with_a_zero_extent(self):
        # An empty array (PyTorch's, CuPy's) has no memory: NULL with a zero extent passes on
        # both ends as NULL; `nullable` lets NULL pass whatever the extent.
        import roles
        lib = parse_text(entries(
            "@1 demoRun  sync",
            "    demoStatus_t (float* a : devptr(size=n * 4), size_t n, float* b : devptr(size=n * 4) nullable)"))
        e = lib.entry("demoRun")
        a, b = e.params[0], e.params[2]
        client = " ".join(roles.client_encode(e, a))
        self.assertIn("== 0 && static_cast<uint64_t>(n * 4) == 0) c.Put<uint64_t>(0); else RETURN_IF_ERROR(c.DevPtr(", client)
        worker = " ".join(roles.worker_check(e, a))
        self.assertIn("if (a__addr != 0 || static_cast<uint64_t>(n * 4) != 0) RETURN_IF_ERROR(x.DevPtr(a__addr", worker)
        self.assertIn("if (b__addr != 0) RETURN_IF_ERROR(x.DevPtr(b__addr", " ".join(roles.worker_check(e, b)))
        self.assertRejected(entries("@2 demoOld  sync", "    demoStatus_t (float* x : devptr(size=4) empty)"),
                            "role devptr takes no flag 'empty'")

    def test_wire_numbers(self):
        self.assertRejected(entries("demoRun  sync", "    demoStatus_t (int x)"), "needs a stable wire number")
        self.assertRejected(entries("@1 demoA  sync", "    demoStatus_t (int x)", "@1 demoB  sync", "    demoStatus_t (int x)"),
                            "wire number @1 is also used by demoA")

    def test_every_description_of_the_tree_parses(self):
        api = os.path.join(ROOT, "protocol", "api")
        names = [f for f in sorted(os.listdir(api)) if f.endswith(".api")]
        self.assertTrue(names)
        for f in names:
            model.parse(os.path.join(api, f))

    def test_every_registered_word_is_documented(self):
        # docs/ARCHITECTURE.md's "The description language" lists each word in backquotes.
        text = open(os.path.join(ROOT, "docs", "ARCHITECTURE.md")).read()
        m = re.search(r"^### The description language\n(.*?)(?=^#)", text, re.S | re.M)
        self.assertIsNotNone(m, "docs/ARCHITECTURE.md has no section 'The description language'")
        section = m.group(1)
        words = set(model.CLASSES) | set(model.ATTRIBUTES) | set(model.HEADER_KEYS) | set(model.STATUS_KEYS)
        words |= set(model.SUBLIBRARY_KEYS) | set(model.ROLE_WORDS)
        for named, flags, _, bare in model.ROLE_WORDS.values():
            words |= set(named) | set(flags)
        missing = sorted(w for w in words if not re.search(r"`%s[`(=,]" % re.escape(w), section))
        self.assertEqual(missing, [], "registered in model.py but not documented in docs/ARCHITECTURE.md")


def big_library(n):
    lines = []
    for i in range(1, n + 1):
        lines += ["@%d demoCall%d  %s" % (i, i, "ordered" if i % 2 else "sync"),
                  "    demoStatus_t (int x, void* p : devptr(size=x))"]
    lines += ["@%d demoHand  sync  hand" % (n + 1), "    demoStatus_t (int x)"]
    return parse_text(entries(*lines))


class Shards(unittest.TestCase):
    def test_shards_keep_order_and_balance(self):
        self.assertEqual(model.shards(list(range(10)), 3), [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]])
        self.assertEqual(model.shards(list(range(3)), 1), [[0, 1, 2]])
        self.assertEqual(model.shards([], 2), [[], []])
        self.assertEqual(model.shards([1, 2], 0), [[1, 2]])

    def test_dispatch_defines_each_operation_once_and_declares_the_others(self):
        lib = big_library(10)
        one = emit_worker.emit_dispatch(lib, 1)
        three = emit_worker.emit_dispatch(lib, 3)
        self.assertEqual(len(one), 1)
        self.assertEqual(len(three), 3)

        def defined(text):
            return re.findall(r"^Status Op_(\w+)\(OpContext& x\) \{", text, re.M)
        all_ops = ["demoCall%d" % i for i in range(1, 11)]
        self.assertEqual(defined(one[0]), all_ops)
        self.assertEqual([op for t in three for op in defined(t)], all_ops)
        # The first file holds the table of every operation, declares those of the other
        # parts (and the hand-written one), and is the only one with a table.
        declared = re.findall(r"^Status Op_(\w+)\(OpContext& x\);", three[0], re.M)
        self.assertEqual(sorted(declared), sorted(defined(three[1]) + defined(three[2]) + ["demoHand"]))
        for t in three:
            self.assertEqual(t.count("constexpr OpEntry kOps[]"), 1 if t is three[0] else 0)
        self.assertEqual(re.findall(r"&Op_(\w+), ", three[0]), all_ops + ["demoHand"])

    def test_client_stubs_are_split_the_same_way(self):
        lib = big_library(10)
        one = emit_shim.emit_client_cc(lib, 1)
        four = emit_shim.emit_client_cc(lib, 4)

        def stubs(text):
            return re.findall(r"^Status (\w+)\(const shim::CallCtx& cc", text, re.M)
        self.assertEqual([s for t in four for s in stubs(t)], stubs(one[0]))
        self.assertEqual(len(four), 4)
        self.assertNotIn("demoHand", "".join(four))  # a `hand` entry's stub is hand-written


class Reads(unittest.TestCase):
    """A generator run for one library reads that library's description only (its build step
    depends on that file alone), except shim-exports, which follows `via` into others."""

    def run_apigen(self, api_dir, out, *args):
        return subprocess.run([sys.executable, APIGEN, "--api-dir", api_dir, "--out", out] + list(args),
                              capture_output=True, text=True)

    def test_one_library_reads_its_own_description(self):
        with tempfile.TemporaryDirectory() as d:
            api, out = os.path.join(d, "api"), os.path.join(d, "out")
            os.mkdir(api)
            with open(os.path.join(api, "demo.api"), "w") as f:
                f.write(entries("@1 demoRun  sync", "    demoStatus_t (int x)"))
            with open(os.path.join(api, "other.api"), "w") as f:
                f.write("library other\n    bogus key\n")
            r = self.run_apigen(api, out, "--lib", "demo", "--emit", "wire")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("k_demoRun = 1", open(os.path.join(out, "demo_wire.h")).read())
            r = self.run_apigen(api, out, "--lib", "demo", "--emit", "shim-exports")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("other.api:2: unknown key 'bogus'", r.stderr)

    def test_sharded_files_are_named_as_cmake_expects(self):
        with tempfile.TemporaryDirectory() as d:
            api, out = os.path.join(d, "api"), os.path.join(d, "out")
            os.mkdir(api)
            lines = []
            for i in range(1, 6):
                lines += ["@%d demoCall%d  sync" % (i, i), "    demoStatus_t (int x)"]
            with open(os.path.join(api, "demo.api"), "w") as f:
                f.write(entries(*lines))
            r = self.run_apigen(api, out, "--lib", "demo", "--emit", "client", "--shards", "3")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["demo_client.cc", "demo_client.h", "demo_client_2.cc", "demo_client_3.cc"])


class Enums(unittest.TestCase):
    """The round-trip tests sample an enum from its declared enumerators (cenums.py)."""

    HEADER_TEXT = """
        #include "other.h"
        typedef enum demoMode_t {   /* a comment, { braces } and all */
            DEMO_MODE_A = 0,
            DEMO_MODE_B = 1 << 2,   // an expression
        #if defined(DEMO_NEW)
            DEMO_MODE_NEW = 7,
        #endif
            DEMO_MODE_OLD DEMO_DEPRECATED_ENUM = 9,
            DEMO_MODE_MAX = 0x7fffffff
        } demoMode_t;
        enum __device_builtin__ demoKind { demoKindOne, demoKindTwo };
        typedef __device_builtin__ enum demoKind demoKind_t;
        typedef enum { DEMO_ANON } demoAnon;
        typedef enum { DEMO_GONE_A, DEMO_GONE_B } demoGone DEMO_DEPRECATED;
        void demoCall(demoGone g);
        typedef enum { DEMO_NEXT } demoNext;
        struct demoStruct { int enum_like; };
    """

    def test_enumerators_are_those_every_configuration_declares(self):
        e = cenums.parse(self.HEADER_TEXT)
        self.assertEqual(e["demoMode_t"], ["DEMO_MODE_A", "DEMO_MODE_B", "DEMO_MODE_MAX"])
        self.assertEqual(e["demoKind"], ["demoKindOne", "demoKindTwo"])
        self.assertEqual(e["demoKind_t"], ["demoKindOne", "demoKindTwo"])
        self.assertEqual(e["demoAnon"], ["DEMO_ANON"])
        self.assertEqual(e["demoGone"], ["DEMO_GONE_A", "DEMO_GONE_B"])  # an attribute after the name
        self.assertEqual(e["demoNext"], ["DEMO_NEXT"])
        self.assertNotIn("demoStruct", e)

    def test_a_library_reads_the_headers_its_headers_include(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "demo.h"), "w") as f:
                f.write(textwrap.dedent(self.HEADER_TEXT))
            with open(os.path.join(d, "other.h"), "w") as f:
                f.write("typedef enum otherE { OTHER_X, OTHER_Y } otherE_t;\n")
            lib = parse_text(HEADER)
            e = cenums.of_library(lib, [d])
        self.assertEqual(e["otherE_t"], ["OTHER_X", "OTHER_Y"])
        self.assertIn("demoMode_t", e)

    def test_only_sampled_enums_get_a_sample_of_their_enumerators(self):
        enums = {"demoMode_t": ["DEMO_MODE_A", "DEMO_MODE_B"]}
        text = "demoMode_t m = Sample<demoMode_t>(3); int i = Sample<int>(4); const demoMode_t c = Sample<const demoMode_t>(5);"
        out = emit_tests._enum_samples(text, enums)
        self.assertIn("inline demoMode_t Sample<demoMode_t>(int seed)", out)
        self.assertIn("inline const demoMode_t Sample<const demoMode_t>(int seed)", out)
        self.assertIn("{DEMO_MODE_A, DEMO_MODE_B}", out)
        self.assertIn("% 2];", out)
        self.assertNotIn("Sample<int>", out)
        self.assertEqual(emit_tests._enum_samples("int i = Sample<int>(4);", enums), "")

    def test_the_tree_samples_cufft_query_types_from_the_header(self):
        include = "/usr/local/cuda/include"
        if not os.path.exists(os.path.join(include, "cufftXt.h")):
            self.skipTest("no CUDA headers at %s" % include)
        lib = model.parse(os.path.join(ROOT, "protocol", "api", "cufft.api"))
        out = emit_tests.emit_roundtrip(lib, [include])
        self.assertIn("TEST_F(ApiRoundTrip, cufftXtQueryPlan)", out)
        self.assertIn("{CUFFT_QUERY_1D_FACTORS, CUFFT_QUERY_UNDEFINED}", out)


if __name__ == "__main__":
    unittest.main()

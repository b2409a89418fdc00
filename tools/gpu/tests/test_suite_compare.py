"""Unit test of tools/gpu/suite_compare.py (CTest unit.suite_compare): counts per mode, and
only the tests every mode ran are compared, each difference named."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "suite_compare.py")


def junit(cases):
    body = []
    for name, state in cases:
        inner = {"pass": "", "fail": "<failure message='x'/>", "skip": "<skipped/>", "error": "<error message='e'/>"}[state]
        body.append("<testcase classname='t.mod' name='%s'>%s</testcase>" % (name, inner))
    return "<testsuites><testsuite>%s</testsuite></testsuites>" % "".join(body)


class SuiteCompare(unittest.TestCase):
    def test_differences_on_common_tests_only(self):
        with tempfile.TemporaryDirectory() as d:
            paths = {}
            for mode, cases in {
                "native": [("a", "pass"), ("b", "fail"), ("c", "skip"), ("d", "pass")],
                "shm": [("a", "pass"), ("b", "fail"), ("c", "skip"), ("d", "error")],
                "tcp": [("a", "fail"), ("b", "fail"), ("c", "skip")],  # d never ran over tcp
            }.items():
                paths[mode] = os.path.join(d, mode + ".xml")
                with open(paths[mode], "w") as f:
                    f.write(junit(cases))
            out = subprocess.run([sys.executable, SCRIPT] + ["%s=%s" % (m, p) for m, p in paths.items()],
                                 capture_output=True, text=True, check=True).stdout
        self.assertIn("of 3 run by every mode", out)
        self.assertIn("| native | 4 | 2 | 1 | 1 | 3 |", out)
        self.assertIn("| shm | 4 | 1 | 2 | 1 | 3 |", out)  # d differs, but only a-c are common
        self.assertIn("| tcp | 3 | 0 | 2 | 1 | 2 |", out)
        self.assertIn("tcp differs: pass -> fail  t.mod::a", out)
        self.assertNotIn("shm differs", out)


if __name__ == "__main__":
    unittest.main()

// remora-bench: runs the same CUDA measurements natively and under the Remora shim for each
// transport, in one invocation, and prints native, remoted and remoted/native.
//
// Modes. Parent (default): never touches CUDA; runs this binary as a child with --run-suite,
// once natively and once per transport under LD_PRELOAD=libremora.so with a remora-server of
// its own (see runner.hpp), then prints a table (or --json). Child (--run-suite, internal):
// runs the measurement suite in this process and writes JSON to --out (see suite.hpp).
// Exit status: 0 all runs and measurements succeeded, 1 something failed (the output says
// what), 2 bad usage.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "metrics.hpp"
#include "process.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "suite.hpp"

namespace fs = std::filesystem;
using namespace remora::bench;

namespace {

std::string relative_to_exe(const std::string& rel) {
  std::string dir = self_exe_dir();
  if (dir.empty()) return rel;
  return fs::weakly_canonical(fs::path(dir) / rel).string();
}

// The tiled matmul test program of this build (tests/gpu builds gpu_matmul_tiled into bin/,
// next to this binary), or "" if there is none.
std::string default_matmul() {
  for (const char* rel :
       {"gpu_matmul_tiled", "../tests/gpu/matmul_tiled", "../tests/gpu/gpu_matmul_tiled"}) {
    std::string p = relative_to_exe(rel);
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::vector<std::string> drop_empty(std::vector<std::string> v) {
  std::erase_if(v, [](const std::string& s) { return s.empty(); });
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "remora-bench: CUDA runtime micro-benchmarks and an app's wall time, natively and "
      "through Remora (shim + remora-server) for each transport, in one run. Prints native, "
      "remoted and remoted/native (time: lower is better; GB/s: higher is better)."};
  app.set_help_flag("-h,--help", "Print this help and exit");

  std::vector<std::string> transports = {"shm", "tcp"};
  std::vector<std::string> only;
  bool json_out = false, quick = false, keep_temp = false, list_metrics = false;
  std::string matmul, backend = "cuda";
  std::string server_bin = relative_to_exe("../bin/remora-server");
  std::string shim = relative_to_exe("../lib/libremora.so");
  std::vector<std::string> server_args;
  int timeout_s = 300, ready_timeout_s = 30;
  bool run_suite_mode = false;
  std::string out_path, label = "native", json_file;

  app.add_option(
         "--transports", transports,
         "Transports to run remoted, comma-separated: shm, tcp, tcp-enc (tcp with the data path "
         "encrypted), or NAME=URL (an explicit --listen URL for the server, e.g. "
         "rdma=rdma://10.0.0.1:0); 'none' for native only")
      ->delimiter(',')
      ->type_name("LIST")
      ->capture_default_str();
  app.add_flag("--json", json_out, "Print machine-readable JSON on stdout instead of the table");
  app.add_option("--json-file", json_file, "Also write the JSON report to this file (the table still prints)")
      ->type_name("PATH");
  app.add_flag("--quick", quick,
               "Fewer iterations and repetitions (smoke tests); figures are less stable");
  app.add_option("--only", only,
                 "Run only these metrics, comma-separated; each selects the metric ids it "
                 "prefixes (e.g. launch, memcpy_h2d_pinned, matmul); see --list-metrics")
      ->delimiter(',')
      ->type_name("METRIC[,...]");
  app.add_flag("--list-metrics", list_metrics, "List metric ids and exit");
  app.add_option("--matmul", matmul,
                 "Tiled matmul test program whose whole-process wall time is measured (default: "
                 "<build>/bin/gpu_matmul_tiled if present; 'none' to skip)")
      ->type_name("PATH");
  app.add_option("--backend", backend,
                 "remora-server backend; 'host' emulates the GPU in host memory (NOT a GPU: "
                 "plumbing smoke test only)")
      ->check(CLI::IsMember({"cuda", "host"}))
      ->type_name("cuda|host")
      ->capture_default_str();
  app.add_option("--server-bin", server_bin, "remora-server binary")
      ->type_name("PATH")
      ->capture_default_str();
  app.add_option("--shim", shim, "libremora.so to LD_PRELOAD in remoted runs")
      ->type_name("PATH")
      ->capture_default_str();
  app.add_option("--server-arg", server_args,
                 "Extra argument for remora-server (repeatable; write --server-arg=--flag)")
      ->type_name("ARG");
  app.add_option("--timeout", timeout_s, "Limit for each child process run, in seconds")
      ->check(CLI::PositiveNumber)
      ->type_name("SECONDS")
      ->capture_default_str();
  app.add_option("--ready-timeout", ready_timeout_s,
                 "How long to wait for remora-server's ready file, in seconds")
      ->check(CLI::PositiveNumber)
      ->type_name("SECONDS")
      ->capture_default_str();
  app.add_flag("--keep-temp", keep_temp, "Keep the temporary directory (logs, results, state)");
  // Internal: the child side of the parent/child protocol (suite.hpp).
  app.add_flag("--run-suite", run_suite_mode, "")->group("");
  app.add_option("--out", out_path, "")->group("");
  app.add_option("--label", label, "")->group("");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  Selection selection(drop_empty(only));
  if (auto err = selection.validate()) {
    std::fprintf(stderr, "remora-bench: %s\n", err->c_str());
    return 2;
  }
  if (list_metrics) {
    for (const MetricDef& d : metric_catalog()) {
      std::printf("%-28s %-5s %s\n", d.id.c_str(), unit_name(d.unit), d.label.c_str());
    }
    return 0;
  }

  if (run_suite_mode) {
    if (out_path.empty()) {
      std::fprintf(stderr, "remora-bench: --run-suite needs --out FILE\n");
      return 2;
    }
    return run_suite(SuiteOptions{out_path, label, quick, selection});
  }

  BenchOptions o;
  o.quick = quick;
  o.selection = selection;
  o.backend = backend;
  o.server_bin = server_bin;
  o.shim = shim;
  o.server_args = server_args;
  o.child_timeout = std::chrono::seconds(timeout_s);
  o.ready_timeout = std::chrono::seconds(ready_timeout_s);
  o.keep_temp = keep_temp;
  std::set<std::string> names;
  for (const auto& spec : drop_empty(transports)) {
    if (spec == "none") continue;
    try {
      o.transports.push_back(parse_transport(spec));
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "remora-bench: --transports: %s\n", e.what());
      return 2;
    }
    if (o.transports.back().name == "native" || !names.insert(o.transports.back().name).second) {
      std::fprintf(stderr, "remora-bench: --transports: duplicate or reserved name '%s'\n",
                   o.transports.back().name.c_str());
      return 2;
    }
  }
  if (matmul.empty()) {
    o.matmul = default_matmul();
  } else if (matmul != "none") {
    if (::access(matmul.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "remora-bench: --matmul %s: not an executable file\n", matmul.c_str());
      return 2;
    }
    o.matmul = fs::absolute(matmul).string();
  }
  std::string matmul_note;
  if (o.matmul.empty() && matmul != "none" && selection.selected("matmul_wall")) {
    matmul_note = "matmul: not measured (no gpu_matmul_tiled in this build; see --matmul)";
    std::fprintf(stderr, "remora-bench: %s\n", matmul_note.c_str());
  }

  Report report;
  try {
    report = run_benchmark(o);
    report.matmul_note = matmul_note;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remora-bench: %s\n", e.what());
    return 1;
  }
  if (!json_file.empty()) {
    std::ofstream f(json_file);
    print_json(f, report, selection);
    if (!f) std::fprintf(stderr, "remora-bench: cannot write %s\n", json_file.c_str());
  }
  if (json_out) {
    print_json(std::cout, report, selection);
  } else {
    print_table(std::cout, report, selection);
  }
  std::cout.flush();
  return report_ok(report, selection) ? 0 : 1;
}

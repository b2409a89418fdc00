// The bench parent (see runner.hpp for the contract).
#include "runner.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <optional>
#include <stdexcept>

#include "process.hpp"

namespace remora::bench {
namespace {

using std::chrono::milliseconds;

void progress(const std::string& line) { std::fprintf(stderr, "remora-bench: %s\n", line.c_str()); }

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// Runs `remora-bench --run-suite` in a child with the given environment edits and reads its
// result file, whatever happened to the child.
RunResult run_suite_child(const std::string& label, const SpawnSpec& env_spec,
                          const BenchOptions& o, const std::string& dir) {
  std::string out = dir + "/result-" + label + ".json";
  SpawnSpec spec = env_spec;
  spec.argv = {self_exe_path(), "--run-suite", "--out", out, "--label", label};
  if (o.quick) spec.argv.push_back("--quick");
  if (!o.selection.selectors().empty()) {
    std::string joined;
    for (const auto& s : o.selection.selectors()) joined += (joined.empty() ? "" : ",") + s;
    spec.argv.push_back("--only");
    spec.argv.push_back(joined);
  }
  spec.log_path = dir + "/suite-" + label + ".log";

  RunResult r;
  r.label = label;
  ExitStatus st;
  try {
    st = wait_for(spawn(spec), o.child_timeout);
  } catch (const std::exception& e) {
    r.error = "cannot run the suite";
    r.error_detail = e.what();
    return r;
  }
  if (auto text = read_whole_file(out)) {
    try {
      r = run_from_json(json::parse(*text));
    } catch (const std::exception& e) {
      r.error = "unreadable results";
      r.error_detail = out + ": " + e.what();
    }
  }
  r.label = label;
  if (!r.completed && r.error.empty()) {
    r.error = "suite " + st.describe();
    if (st.timed_out)
      r.error = "suite timed out after " + std::to_string(o.child_timeout.count()) + " s";
  } else if (r.completed && !st.success()) {
    // Figures are valid, but an app that dies on its way out (e.g. in the shim's teardown) is
    // a failure worth failing the run for.
    r.error = "suite finished, then " + st.describe();
  }
  if (r.failed()) {
    std::string tail = file_tail(spec.log_path, 15);
    if (!tail.empty()) {
      r.error_detail += (r.error_detail.empty() ? "" : "\n") + std::string("suite log ") +
                        spec.log_path + ":\n" + tail;
    }
  }
  return r;
}

// Median wall time of the external app, run `runs` times after `warmups` untimed runs.
Measurement measure_app(const std::string& label, const SpawnSpec& env_spec, const BenchOptions& o,
                        const std::string& dir, int warmups, int runs) {
  SpawnSpec spec = env_spec;
  spec.argv = {o.matmul};
  spec.log_path = dir + "/matmul-" + label + ".log";
  Measurement m;
  m.iterations = 1;
  for (int i = 0; i < warmups + runs; ++i) {
    try {
      auto [st, secs] = run_timed(spec, o.child_timeout);
      if (!st.success()) {
        m.error = "app " + st.describe();
        m.error_detail = o.matmul + " " + st.describe() + "; log " + spec.log_path + ":\n" +
                         file_tail(spec.log_path, 10);
        m.samples.clear();
        return m;
      }
      if (i >= warmups) m.samples.push_back(secs);
    } catch (const std::exception& e) {
      m.error = "cannot run app";
      m.error_detail = e.what();
      return m;
    }
  }
  m.value = median(m.samples);
  return m;
}

std::string default_listen_url(const Transport& t, const std::string& dir) {
  if (!t.url.empty()) return t.url;
  if (t.name == "shm") return "shm://" + dir + "/" + t.name + ".sock";
  return "tcp://127.0.0.1:0";
}

}  // namespace

Transport parse_transport(const std::string& spec) {
  auto eq = spec.find('=');
  if (eq != std::string::npos) {
    Transport t{spec.substr(0, eq), spec.substr(eq + 1), ""};
    bool name_ok = !t.name.empty() && t.name.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-") == std::string::npos;
    if (!name_ok || t.url.find("://") == std::string::npos) {
      throw std::invalid_argument("transport '" + spec +
                                  "': expected NAME=SCHEME://... (NAME: letters, digits, _ -)");
    }
    return t;
  }
  if (spec == "shm") return Transport{spec, "", ""};
  if (spec == "tcp") return Transport{spec, "", "off"};
  if (spec == "tcp-enc") return Transport{spec, "", "on"};
  throw std::invalid_argument("unknown transport '" + spec +
                              "' (use shm, tcp, tcp-enc, or NAME=URL for an explicit --listen URL)");
}

Report run_benchmark(const BenchOptions& o) {
  Report rep;
  rep.version = REMORA_VERSION;
  const char* commit = std::getenv("REMORA_COMMIT");
  rep.commit = commit && *commit ? commit : "unknown (set REMORA_COMMIT)";
  rep.date = utc_now();
  rep.host = hostname();
  rep.quick = o.quick;
  rep.host_emulated = o.backend == "host";
  bool want_app = !o.matmul.empty() && o.selection.selected("matmul_wall");
  int warmups = o.quick ? 0 : 1;
  int runs = o.quick ? 1 : 3;
  if (want_app) {
    rep.matmul = o.matmul;
    rep.matmul_runs = runs;
  }

  TempDir tmp;
  if (o.keep_temp) {
    tmp.keep();
    rep.temp_dir = tmp.path();
  }

  // Native: no shim, whatever the bench itself was started with.
  {
    progress("native run");
    SpawnSpec env;
    env.env = {{"LD_PRELOAD", std::nullopt}, {"REMORA_SERVER", std::nullopt}};
    Column col;
    col.result = run_suite_child("native", env, o, tmp.path());
    if (want_app && !col.result.failed()) {
      progress("native run: " + o.matmul);
      col.result.metrics["matmul_wall"] = measure_app("native", env, o, tmp.path(), warmups, runs);
    }
    rep.columns.push_back(std::move(col));
  }

  for (const Transport& t : o.transports) {
    Column col;
    col.result.label = t.name;
    if (::access(o.server_bin.c_str(), X_OK) != 0) {
      col.result.error = "remora-server not found";
      col.result.error_detail = "not executable: " + o.server_bin + " (use --server-bin)";
    } else if (::access(o.shim.c_str(), R_OK) != 0) {
      col.result.error = "shim not found";
      col.result.error_detail = "not readable: " + o.shim + " (use --shim)";
    }
    if (col.result.failed()) {
      rep.columns.push_back(std::move(col));
      continue;
    }

    ServerConfig sc;
    sc.binary = o.server_bin;
    sc.listen_url = default_listen_url(t, tmp.path());
    sc.backend = o.backend;
    sc.work_dir = tmp.path();
    sc.name = t.name;
    sc.extra_args = o.server_args;
    sc.ready_timeout = o.ready_timeout;
    progress(t.name + ": starting remora-server --listen " + sc.listen_url);
    auto [server, failure] = start_server(sc);
    if (!server) {
      col.result.error = failure.reason;
      col.result.error_detail = failure.detail;
      rep.columns.push_back(std::move(col));
      continue;
    }

    progress(t.name + ": run against " + server->url);
    SpawnSpec env;
    env.env = {{"LD_PRELOAD", o.shim}, {"REMORA_SERVER", server->url}};
    if (!t.encrypt.empty()) env.env.push_back({"REMORA_ENCRYPT", t.encrypt});
    col.result = run_suite_child(t.name, env, o, tmp.path());
    col.result.server_url = server->url;
    if (want_app && !col.result.failed()) {
      progress(t.name + ": " + o.matmul);
      col.result.metrics["matmul_wall"] = measure_app(t.name, env, o, tmp.path(), warmups, runs);
    }

    if (server->url.rfind("tcp://", 0) == 0 && !col.result.failed()) {
      // The stream count the sessions negotiated, from the worker's "serving tcp ... (N
      // data streams)" line; none: bulk stayed on the control connection.
      std::string log = file_tail(server->log_path, 400);
      size_t at = log.rfind(" data streams)");
      size_t open = at == std::string::npos ? at : log.rfind('(', at);
      std::string n = open == std::string::npos ? "0" : log.substr(open + 1, at - open - 1);
      col.notes.push_back(t.name + ": " + n + " tcp data stream(s): bulk of 1 MiB and more striped over them" +
                          (n == "0" ? " (none: encrypted, REMORA_TCP_STREAMS=0 or --tcp-streams 0)" : ""));
      if (rep.tcp_ceiling.empty()) {
        progress("raw loopback TCP ceiling (1, 2, 4, 8 streams)");
        rep.tcp_ceiling = measure_tcp_ceiling({1, 2, 4, 8}, 64ull << 20, 7);
      }
    }
    ExitStatus st = stop_server(*server, milliseconds(10000));
    if (!st.success()) {
      col.notes.push_back(t.name + ": remora-server did not exit cleanly after SIGTERM (" +
                          st.describe() + "); log " + server->log_path + ":\n" +
                          file_tail(server->log_path, 10));
    }
    if (col.result.failed()) {
      col.notes.push_back(t.name + ": server log " + server->log_path + ":\n" +
                          file_tail(server->log_path, 15));
    }
    rep.columns.push_back(std::move(col));
  }
  return rep;
}

bool report_ok(const Report& report, const Selection& selection) {
  for (const Column& c : report.columns) {
    if (c.result.failed()) return false;
    for (const MetricDef& d : metric_catalog()) {
      if (!selection.selected(d.id)) continue;
      if (d.family == Family::AppWall && report.matmul.empty()) continue;
      auto it = c.result.metrics.find(d.id);
      if (it == c.result.metrics.end() || !it->second.value) return false;
    }
  }
  return true;
}

}  // namespace remora::bench

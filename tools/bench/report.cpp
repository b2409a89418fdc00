// Output of remora-bench (see report.hpp for the contract).
#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace remora::bench {
namespace {

std::string fmt_double(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string format_value(Unit unit, double v) {
  switch (unit) {
    case Unit::Microseconds:
      return fmt_double(v < 1 ? "%.3f" : v < 100 ? "%.2f" : v < 1000 ? "%.1f" : "%.0f", v);
    case Unit::Seconds: return fmt_double("%.3f", v);
    case Unit::GBps: return fmt_double("%.2f", v);
  }
  return "?";
}

const Measurement* find(const Column& c, const std::string& id) {
  auto it = c.result.metrics.find(id);
  return it == c.result.metrics.end() ? nullptr : &it->second;
}

// The metrics that appear in the output: selected, and the app row only if an app was run.
std::vector<const MetricDef*> rows(const Report& report, const Selection& selection) {
  std::vector<const MetricDef*> out;
  for (const MetricDef& d : metric_catalog()) {
    if (!selection.selected(d.id)) continue;
    if (d.family == Family::AppWall && report.matmul.empty()) continue;
    out.push_back(&d);
  }
  return out;
}

// `run_error_shown`: the run-level error of this column was already printed in a row above, so
// this row says just "error" (the reason stays in the device line and the notes).
std::string value_cell(const Column& c, const MetricDef& d, bool& run_error_shown) {
  const Measurement* m = find(c, d.id);
  if (m && m->value) return format_value(d.unit, *m->value);
  if (m && !m->error.empty()) return "error: " + m->error;
  if (c.result.failed()) {
    if (run_error_shown) return "error";
    run_error_shown = true;
    return "error: " + c.result.error;
  }
  return "not run";
}

std::optional<double> ratio(const Column& native, const Column& c, const MetricDef& d) {
  const Measurement* n = find(native, d.id);
  const Measurement* r = find(c, d.id);
  if (!n || !r || !n->value || !r->value || *n->value == 0) return std::nullopt;
  return *r->value / *n->value;
}

std::string device_line(const Column& c) {
  const RunResult& r = c.result;
  std::string line = r.label + ": ";
  if (r.failed() && r.device_name.empty()) return line + "error: " + r.error;
  line += r.device_name.empty() ? "(device name unknown)" : r.device_name;
  line += " (runtime " + std::to_string(r.runtime_version) + ", driver " +
          std::to_string(r.driver_version) + ")";
  if (!r.server_url.empty()) line += " via " + r.server_url;
  if (r.failed()) line += "; error: " + r.error;
  return line;
}

}  // namespace

void print_table(std::ostream& out, const Report& report, const Selection& selection) {
  out << "remora-bench " << report.version
      << (report.host_emulated ? " | remoted backend: host-emulated, NOT a GPU" : "")
      << " | commit " << report.commit << " | " << report.date << " | host " << report.host
      << (report.quick ? " | --quick" : "") << "\n";
  if (report.host_emulated) {
    out << "(host-emulated: remoted kernel, copy and memset figures say nothing about GPU "
           "hardware; this run only exercises the plumbing)\n";
  }
  for (const Column& c : report.columns) out << device_line(c) << "\n";
  out << "time (us, s): lower is better; GB/s (1e9 B/s): higher is better; "
         "\"x native\" = remoted / native for both\n\n";

  // Header and cells, then pad every column to its widest cell.
  std::vector<std::vector<std::string>> table;
  std::vector<std::string> header = {"metric", "unit", report.columns[0].result.label};
  for (size_t i = 1; i < report.columns.size(); ++i) {
    const std::string& name = report.columns[i].result.label;
    std::string shown = report.host_emulated ? name + " (host-emulated)" : name;
    header.push_back(shown);
    header.push_back(name + " x native");
  }
  table.push_back(header);
  std::vector<char> run_error_shown(report.columns.size(), 0);
  auto cell = [&](size_t i, const MetricDef& d) {
    bool shown = run_error_shown[i];
    std::string text = value_cell(report.columns[i], d, shown);
    run_error_shown[i] = shown;
    return text;
  };
  for (const MetricDef* d : rows(report, selection)) {
    std::vector<std::string> row = {d->label, unit_name(d->unit), cell(0, *d)};
    for (size_t i = 1; i < report.columns.size(); ++i) {
      const Column& c = report.columns[i];
      row.push_back(cell(i, *d));
      auto r = ratio(report.columns[0], c, *d);
      row.push_back(r ? fmt_double("%.2fx", *r) : "n/a");
    }
    table.push_back(row);
  }
  std::vector<size_t> width(header.size(), 3);
  for (const auto& row : table) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    out << "|";
    for (size_t i = 0; i < row.size(); ++i) {
      std::string pad(width[i] - row[i].size(), ' ');
      out << " " << (i < 2 ? row[i] + pad : pad + row[i]) << " |";  // numbers right-aligned
    }
    out << "\n";
  };
  print_row(table[0]);
  out << "|";
  for (size_t i = 0; i < width.size(); ++i) {
    out << (i < 2 ? " " + std::string(width[i], '-') + " |"
                  : " " + std::string(width[i] - 1, '-') + ": |");
  }
  out << "\n";
  for (size_t i = 1; i < table.size(); ++i) print_row(table[i]);

  // Notes: what was measured how, then every error in full.
  out << "\n";
  if (selection.selected("launch_async")) {
    out << "async launch: " << (report.quick ? "10k" : "100k")
        << " null launches on one stream, then one cudaStreamSynchronize; per-launch time "
           "(throughput target >= 0.8x native means <= 1.25x here)\n";
  }
  if (!report.matmul.empty()) {
    out << "matmul: " << report.matmul << ", whole-process wall time, median of "
        << report.matmul_runs << " run(s)\n";
  } else if (!report.matmul_note.empty()) {
    out << report.matmul_note << "\n";
  }
  out << "each figure: median of the repetitions, host-timed (steady_clock); copies and memsets "
         "end with cudaDeviceSynchronize inside the timed loop\n";
  for (const Column& c : report.columns) {
    if (c.result.failed()) {
      out << c.result.label << ": error: " << c.result.error << "\n";
      if (!c.result.error_detail.empty()) out << "  " << c.result.error_detail << "\n";
    }
    // Failed measurements, one line per distinct cause.
    std::vector<std::pair<std::string, std::vector<std::string>>> causes;
    for (const MetricDef* d : rows(report, selection)) {
      const Measurement* m = find(c, d->id);
      if (!m || m->error.empty()) continue;
      std::string cause = m->error_detail.empty() ? m->error : m->error_detail;
      auto it = std::find_if(causes.begin(), causes.end(),
                             [&](const auto& x) { return x.first == cause; });
      if (it == causes.end()) it = causes.insert(causes.end(), {cause, {}});
      it->second.push_back(d->id);
    }
    for (const auto& [cause, ids] : causes) {
      out << c.result.label << ": " << ids.front();
      if (ids.size() > 1) out << " and " << ids.size() - 1 << " more";
      out << " failed: " << cause << "\n";
    }
    for (const auto& n : c.notes) out << n << "\n";
  }
  if (!report.tcp_ceiling.empty()) {
    out << "raw loopback TCP ceiling (64 MiB split over N plain connections, a sender and a receiver thread "
           "each, best of 7, this machine, this run):";
    for (const CeilingPoint& p : report.tcp_ceiling) {
      char buf[64];
      if (p.error.empty()) std::snprintf(buf, sizeof(buf), " %d: %.2f GB/s", p.streams, p.gb_per_s);
      else std::snprintf(buf, sizeof(buf), " %d: error", p.streams);
      out << buf << (&p == &report.tcp_ceiling.back() ? "" : ",");
    }
    out << "\n";
  }
  if (!report.temp_dir.empty()) {
    out << "logs kept in " << report.temp_dir << "\n";
  } else if (!report_ok(report, selection)) {
    out << "(the logs named above were removed with the temporary directory; --keep-temp keeps "
           "them)\n";
  }
}

void print_json(std::ostream& out, const Report& report, const Selection& selection) {
  json::Value v = json::Value::object();
  v.set("tool", "remora-bench");
  v.set("version", report.version);
  v.set("commit", report.commit);
  v.set("date", report.date);
  v.set("host", report.host);
  v.set("quick", report.quick);
  v.set("host_emulated", report.host_emulated);
  v.set("matmul", report.matmul.empty() ? json::Value() : json::Value(report.matmul));
  if (!report.temp_dir.empty()) v.set("temp_dir", report.temp_dir);
  if (!report.tcp_ceiling.empty()) {
    json::Value ceiling = json::Value::array();
    for (const CeilingPoint& p : report.tcp_ceiling) {
      json::Value e = json::Value::object();
      e.set("streams", p.streams);
      e.set("gb_per_s", p.gb_per_s);
      if (!p.error.empty()) e.set("error", p.error);
      ceiling.push(std::move(e));
    }
    v.set("tcp_loopback_ceiling", std::move(ceiling));
  }

  json::Value runs = json::Value::array();
  for (const Column& c : report.columns) {
    json::Value run = to_json(c.result);
    json::Value notes = json::Value::array();
    for (const auto& n : c.notes) notes.push(n);
    run.set("notes", std::move(notes));
    runs.push(std::move(run));
  }
  v.set("runs", std::move(runs));

  // One entry per row of the table: values by run label, ratios remoted / native.
  json::Value table = json::Value::array();
  for (const MetricDef* d : rows(report, selection)) {
    json::Value row = json::Value::object();
    row.set("id", d->id);
    row.set("label", d->label);
    row.set("unit", unit_name(d->unit));
    row.set("lower_is_better", lower_is_better(d->unit));
    json::Value values = json::Value::object();
    json::Value ratios = json::Value::object();
    for (size_t i = 0; i < report.columns.size(); ++i) {
      const Column& c = report.columns[i];
      const Measurement* m = find(c, d->id);
      values.set(c.result.label, m && m->value ? json::Value(*m->value) : json::Value());
      if (i > 0) {
        auto r = ratio(report.columns[0], c, *d);
        ratios.set(c.result.label, r ? json::Value(*r) : json::Value());
      }
    }
    row.set("values", std::move(values));
    row.set("x_native", std::move(ratios));
    table.push(std::move(row));
  }
  v.set("table", std::move(table));
  out << json::dump(v) << "\n";
}

}  // namespace remora::bench

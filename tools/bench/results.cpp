// Results of one suite run and their JSON form (see results.hpp).
#include "results.hpp"

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>

namespace remora::bench {

json::Value to_json(const RunResult& r) {
  json::Value metrics = json::Value::object();
  for (const auto& [id, m] : r.metrics) {
    json::Value jm = json::Value::object();
    jm.set("value", m.value ? json::Value(*m.value) : json::Value());
    json::Value samples = json::Value::array();
    for (double s : m.samples) samples.push(s);
    jm.set("samples", std::move(samples));
    jm.set("iterations", static_cast<double>(m.iterations));
    if (!m.error.empty()) jm.set("error", m.error);
    if (!m.error_detail.empty()) jm.set("error_detail", m.error_detail);
    metrics.set(id, std::move(jm));
  }
  json::Value v = json::Value::object();
  v.set("label", r.label);
  if (!r.server_url.empty()) v.set("server_url", r.server_url);
  v.set("completed", r.completed);
  if (!r.error.empty()) v.set("error", r.error);
  if (!r.error_detail.empty()) v.set("error_detail", r.error_detail);
  v.set("device_name", r.device_name);
  v.set("device_count", r.device_count);
  v.set("runtime_version", r.runtime_version);
  v.set("driver_version", r.driver_version);
  v.set("metrics", std::move(metrics));
  return v;
}

RunResult run_from_json(const json::Value& v) {
  RunResult r;
  auto str = [&](const char* key) {
    const json::Value* x = v.find(key);
    return x ? x->as_string() : std::string();
  };
  auto num = [&](const char* key) {
    const json::Value* x = v.find(key);
    return x ? static_cast<int>(x->as_number()) : 0;
  };
  r.label = str("label");
  r.server_url = str("server_url");
  r.error = str("error");
  r.error_detail = str("error_detail");
  r.device_name = str("device_name");
  r.device_count = num("device_count");
  r.runtime_version = num("runtime_version");
  r.driver_version = num("driver_version");
  if (const json::Value* c = v.find("completed")) r.completed = c->as_bool();
  if (const json::Value* ms = v.find("metrics")) {
    for (const auto& member : ms->members()) {
      Measurement m;
      const json::Value& jm = member.value;
      if (const json::Value* x = jm.find("value"); x && !x->is_null()) m.value = x->as_number();
      if (const json::Value* x = jm.find("samples")) {
        for (const auto& s : x->items()) m.samples.push_back(s.as_number());
      }
      if (const json::Value* x = jm.find("iterations")) {
        m.iterations = static_cast<long>(x->as_number());
      }
      if (const json::Value* x = jm.find("error")) m.error = x->as_string();
      if (const json::Value* x = jm.find("error_detail")) m.error_detail = x->as_string();
      r.metrics[member.key] = std::move(m);
    }
  }
  return r;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw std::system_error(errno, std::generic_category(), "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot rename " + tmp);
  }
}

std::optional<std::string> read_whole_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace remora::bench

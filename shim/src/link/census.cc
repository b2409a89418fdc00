#include "census.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cublasLt_wire.h"
#include "cublas_wire.h"
#include "cuda_wire.h"
#include "cudnn_wire.h"
#include "cufft_wire.h"
#include "curand_wire.h"
#include "cusolver_wire.h"
#include "cusparse_wire.h"
#include "remora/protocol/request_names.h"

namespace remora::shim {
namespace {

// The generated call `function` of library `library` (its wire number) and its class.
const char* ApiName(uint16_t library, uint32_t function, char* cls) {
  switch (library) {
    case gen::cuda::kLibrary: return gen::cuda::FnName(function, cls);
    case gen::cublas::kLibrary: return gen::cublas::FnName(function, cls);
    case gen::cublasLt::kLibrary: return gen::cublasLt::FnName(function, cls);
    case gen::cudnn::kLibrary: return gen::cudnn::FnName(function, cls);
    case gen::cufft::kLibrary: return gen::cufft::FnName(function, cls);
    case gen::curand::kLibrary: return gen::curand::FnName(function, cls);
    case gen::cusolver::kLibrary: return gen::cusolver::FnName(function, cls);
    case gen::cusparse::kLibrary: return gen::cusparse::FnName(function, cls);
    default: return nullptr;
  }
}

bool IsApi(uint16_t which) { return which == static_cast<uint16_t>(wire::Request::API_CALL); }

bool IsMarker(const wire::Request::Reader& req, uint32_t function) {
  return req.isApiCall() && req.getApiCall().getLibrary() == gen::cuda::kLibrary && req.getApiCall().getFunction() == function;
}

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

Census* Census::Get() {
  static Census* census = []() -> Census* {
    const char* v = std::getenv("REMORA_CALL_STATS");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return nullptr;
    return new Census(std::strcmp(v, "1") == 0 ? std::string() : std::string(v));  // lives until exit
  }();
  return census;
}

std::string Census::Name(const Key& k, bool* synchronising) {
  *synchronising = false;
  if (IsApi(k.which)) {
    char cls = 0;
    const char* name = ApiName(k.library, k.function, &cls);
    std::string n = name ? name : "apiCall library " + std::to_string(k.library) + " @" + std::to_string(k.function);
    // What the application asked to wait for: a wait call, or a query of completion.
    *synchronising = k.round_trip && (cls == 'w' || n == "cuStreamQuery" || n == "cuEventQuery");
    return n;
  }
  const char* name = RequestName(static_cast<wire::Request::Which>(k.which));
  std::string n = name ? name : "request #" + std::to_string(k.which);
  // Synchronous by CUDA's contract: a copy waited for (into host memory the application reads
  // next, or a synchronous one), a device synchronisation.
  *synchronising = k.round_trip && (n == "memcpyDtoH" || n == "memcpyHtoD" || n == "memcpyPeer" || n == "copy3D" ||
                                    n == "deviceSynchronize");
  return n;
}

void Census::Count(const wire::Request::Reader& req, bool round_trip) {
  Key k{static_cast<uint16_t>(req.which()), 0, 0, round_trip};
  if (req.isApiCall()) {
    k.library = req.getApiCall().getLibrary();
    k.function = req.getApiCall().getFunction();
  }
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    session_[k]++;
    if (IsMarker(req, gen::cuda::k_cuProfilerStart)) {
      interval_.clear();
      interval_details_.clear();
      in_interval_ = true;
      intervals_++;
    } else if (IsMarker(req, gen::cuda::k_cuProfilerStop)) {
      if (in_interval_ && !path_.empty()) line = LineLocked(std::to_string(intervals_), interval_, interval_details_);
      in_interval_ = false;
    } else if (in_interval_) {
      interval_[k]++;
    }
  }
  if (!line.empty()) Append(line);
}

void Census::Detail(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  session_details_[what]++;
  if (in_interval_) interval_details_[what]++;
}

Census::Totals Census::Sum(const Counts& c) {
  Totals t;
  for (const auto& [k, n] : c) {
    bool sync = false;
    (void)Name(k, &sync);
    t.messages += n;
    (k.round_trip ? t.round_trips : t.posted) += n;
    if (sync) t.synchronising += n;
  }
  return t;
}

Census::Totals Census::interval() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Sum(interval_);
}

Census::Totals Census::session() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Sum(session_);
}

std::string Census::SessionLine() const {
  std::lock_guard<std::mutex> lock(mu_);
  return LineLocked("\"session\"", session_, session_details_);
}

std::string Census::IntervalLine() const {
  std::lock_guard<std::mutex> lock(mu_);
  return LineLocked(std::to_string(intervals_), interval_, interval_details_);
}

std::string Census::LineLocked(const std::string& label, const Counts& c, const std::map<std::string, uint64_t>& details) const {
  struct Row {
    uint64_t round_trips = 0, posted = 0;
    bool synchronising = false;
  };
  std::map<std::string, Row> rows;
  for (const auto& [k, n] : c) {
    bool sync = false;
    Row& r = rows[Name(k, &sync)];
    (k.round_trip ? r.round_trips : r.posted) += n;
    r.synchronising = r.synchronising || sync;
  }
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second.round_trips + a.second.posted > b.second.round_trips + b.second.posted;
  });
  Totals t = Sum(c);
  std::string out = "{\"interval\": " + label + ", \"messages\": " + std::to_string(t.messages) +
                    ", \"round_trips\": " + std::to_string(t.round_trips) + ", \"posted\": " + std::to_string(t.posted) +
                    ", \"synchronising\": " + std::to_string(t.synchronising) +
                    ", \"other_round_trips\": " + std::to_string(t.round_trips - t.synchronising) + ", \"calls\": [";
  bool first = true;
  for (const auto& [name, r] : sorted) {
    out += first ? "" : ", ";
    first = false;
    out += "{\"call\": " + Json(name) + ", \"round_trips\": " + std::to_string(r.round_trips) +
           ", \"posted\": " + std::to_string(r.posted) + ", \"synchronising\": " + (r.synchronising ? "true" : "false") + "}";
  }
  out += "]";
  if (!details.empty()) {
    out += ", \"details\": {";
    first = true;
    for (const auto& [what, n] : details) {
      out += (first ? "" : ", ") + Json(what) + ": " + std::to_string(n);
      first = false;
    }
    out += "}";
  }
  return out + "}";
}

void Census::Append(const std::string& line) const {
  FILE* f = std::fopen(path_.c_str(), "a");
  if (f == nullptr) {
    std::fprintf(stderr, "remora: REMORA_CALL_STATS: cannot append to %s: %s\n", path_.c_str(), std::strerror(errno));
    return;
  }
  std::fprintf(f, "%s\n", line.c_str());
  std::fclose(f);
}

void Census::Report() {
  std::vector<std::pair<uint64_t, Key>> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reported_) return;
    reported_ = true;
    if (!path_.empty()) {
      std::string line = LineLocked("\"session\"", session_, session_details_);
      Append(line);
      return;
    }
    for (const auto& [k, n] : session_) rows.push_back({n, k});
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::fprintf(stderr, "remora call census (REMORA_CALL_STATS): count, round trip or posted, request\n");
  for (const auto& [n, k] : rows) {
    bool sync = false;
    std::string name = Name(k, &sync);
    std::fprintf(stderr, "%10llu  %-10s  %s%s\n", static_cast<unsigned long long>(n), k.round_trip ? "round trip" : "posted",
                 name.c_str(), sync ? " (synchronising)" : "");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [what, n] : session_details_)
    std::fprintf(stderr, "%10llu  %-10s  %s\n", static_cast<unsigned long long>(n), "detail", what.c_str());
}

}  // namespace remora::shim

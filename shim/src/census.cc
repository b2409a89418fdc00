#include "census.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace remora::shim {

bool Census::Wanted() {
  const char* v = std::getenv("REMORA_CALL_STATS");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void Census::Count(const wire::Request::Reader& req, bool round_trip) {
  Key k{static_cast<uint16_t>(req.which()), 0, 0, round_trip};
  if (req.isApiCall()) {
    k.library = req.getApiCall().getLibrary();
    k.function = req.getApiCall().getFunction();
  }
  std::lock_guard<std::mutex> lock(mu_);
  counts_[k]++;
}

void Census::Print() const {
  std::vector<std::pair<uint64_t, Key>> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, n] : counts_) rows.push_back({n, k});
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // The shim's Cap'n Proto is built lite (no reflection): requests are named by their position
  // in Request's union (protocol/schema/remora.capnp), generated calls by library wire number
  // and the entry's @N in its protocol/api description.
  std::fprintf(stderr, "remora call census (REMORA_CALL_STATS): count, round trip or posted, request\n");
  for (const auto& [n, k] : rows) {
    std::string name = "Request union member #" + std::to_string(k.which);
    if (k.which == static_cast<uint16_t>(wire::Request::API_CALL))
      name = "apiCall library " + std::to_string(k.library) + " @" + std::to_string(k.function);
    std::fprintf(stderr, "%10llu  %-10s  %s\n", static_cast<unsigned long long>(n), k.round_trip ? "round trip" : "posted",
                 name.c_str());
  }
}

}  // namespace remora::shim

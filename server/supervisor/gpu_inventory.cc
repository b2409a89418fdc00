#include "supervisor/gpu_inventory.h"

#include <charconv>
#include <optional>
#include <sstream>

#include "supervisor/process.h"

namespace remora::server {

namespace {

// Whole-field unsigned number, or nullopt.
std::optional<uint64_t> Number(const std::string& s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

Result<Inventory> ParseProbe(const std::string& text) {
  Inventory inv;
  std::istringstream in(text);
  std::string line;
  bool saw_backend = false;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    std::string field;
    while (std::getline(ls, field, '\t')) f.push_back(field);
    if (f.empty()) continue;
    if (f[0] == "backend" && f.size() == 3) {
      inv.backend = f[1];
      inv.emulated = f[2] == "1";
      saw_backend = true;
    } else if (f[0] == "driver" && f.size() == 2 && Number(f[1]) && *Number(f[1]) <= INT32_MAX) {
      inv.driver_version = static_cast<int>(*Number(f[1]));
    } else if (f[0] == "kernel-driver" && f.size() == 2 && !f[1].empty() &&
               f[1].find_first_not_of("0123456789.") == std::string::npos) {
      inv.kernel_driver = f[1];
    } else if (f[0] == "gpu" && f.size() == 6 && Number(f[1]) && *Number(f[1]) <= INT32_MAX && Number(f[2])) {
      GpuInfo g;
      g.index = static_cast<int>(*Number(f[1]));
      g.total_memory = *Number(f[2]);
      g.uuid = f[3];
      g.pci_bus_id = f[4];
      g.name = f[5];
      inv.gpus.push_back(g);
    } else if (f[0] == "mps" && f.size() == 3 && Number(f[1]) && (f[2] == "0" || f[2] == "1")) {
      for (GpuInfo& g : inv.gpus)
        if (static_cast<uint64_t>(g.index) == *Number(f[1])) g.mps = f[2] == "1";
    } else {
      return Error(Err::kInitializationError, "unexpected GPU probe output: '{}'", line);
    }
  }
  if (!saw_backend) return Error(Err::kInitializationError, "GPU probe printed no backend line");
  return inv;
}

Result<Inventory> ProbeGpus(const std::string& worker_path, const std::vector<std::string>& backend_args) {
  std::vector<std::string> args = {"--probe"};
  args.insert(args.end(), backend_args.begin(), backend_args.end());
  ASSIGN_OR_RETURN(std::string out, RunAndCapture(worker_path, args, 60000));
  return ParseProbe(out);
}

}  // namespace remora::server

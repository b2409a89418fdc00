// Fuzz target `image_symbols`: the host-emulated backend's reading of a client's code image
// (server/worker/backend/host/image_symbols.h): fat binaries, ELF cubins and PTX text, as cuModuleLoadData
// and cuLibraryLoadData hand them to the worker. Input: the image itself.
// Besides memory safety (the reader must stay inside the bytes it is given): every name it
// returns is non-empty and NUL-free, every kernel is listed once.
#include <cstdint>
#include <set>
#include <string>

#include "worker/backend/host/image_symbols.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  remora::worker::ImageSymbols s = remora::worker::ReadImageSymbols(data, size);
  auto bad = [](const std::string& n) { return n.empty() || n.find('\0') != std::string::npos; };
  for (const auto& [name, bytes] : s.variables)
    if (bad(name)) __builtin_trap();
  std::set<std::string> seen;
  for (const std::string& k : s.kernels)
    if (bad(k) || !seen.insert(k).second) __builtin_trap();
  return 0;
}

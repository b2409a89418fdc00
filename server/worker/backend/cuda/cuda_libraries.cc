#include "worker/backend/cuda/cuda_libraries.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "libraries.h"
#include "remora/base/log.h"
#include "worker/backend/library_apis.h"

namespace remora::worker {
namespace {

struct LibraryFile {
  const char* soname;
  const char* core_table;  // exported by libremora-core.so: present means "this is Remora's"
  const char* path_variable = nullptr;  // a variable naming the file, tried first
};

// From the generated index of served libraries (protocol/api/*.api, `path_env`: NCCL's
// REMORA_NCCL_PATH names the file itself, PyTorch's wheel's, say).
Result<LibraryFile> FileOf(Domain d) {
  switch (static_cast<uint16_t>(d)) {
#define REMORA_FILE_CASE(name, wire, soname, core_table, path_env) \
  case wire:                                                       \
    return LibraryFile{soname, core_table, path_env};
    REMORA_SERVED_LIBRARIES(REMORA_FILE_CASE)
#undef REMORA_FILE_CASE
    default: return Error(Err::kNotSupported, "{} is not a library Remora serves", DomainName(d));
  }
}

std::vector<std::string> Candidates(const LibraryFile& f) {
  const char* soname = f.soname;
  std::vector<std::string> out;
  if (const char* file = f.path_variable ? std::getenv(f.path_variable) : nullptr; file != nullptr && *file) out.push_back(file);
  if (const char* path = std::getenv("REMORA_LIBRARY_PATH"); path != nullptr) {
    std::string p = path;
    size_t start = 0;
    while (start <= p.size()) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      if (end > start) out.push_back(p.substr(start, end - start) + "/" + soname);
      start = end + 1;
    }
  }
  out.push_back(soname);
#ifdef REMORA_CUDA_LIBRARY_DIR
  out.push_back(std::string(REMORA_CUDA_LIBRARY_DIR) + "/" + soname);
#endif
  out.push_back(std::string("/usr/local/cuda/lib64/") + soname);
  return out;
}

Result<void*> Open(const LibraryFile& f) {
  std::string errors;
  for (const std::string& path : Candidates(f)) {
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      if (const char* e = ::dlerror()) errors += fmt::format("\n  {}", e);
      continue;
    }
    if (::dlsym(h, f.core_table) != nullptr) {
      ::dlclose(h);
      errors += fmt::format("\n  {} is Remora's client library, not NVIDIA's (check LD_LIBRARY_PATH)", path);
      continue;
    }
    const char* where = path.c_str();
    struct link_map* lm = nullptr;
    if (::dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr && *lm->l_name) where = lm->l_name;
    LOG_INFO("loaded {} from {}", f.soname, where);
    return h;
  }
  return Error(Err::kNotSupported, "{} is not installed on this GPU server (set REMORA_LIBRARY_PATH{}):{}", f.soname,
               f.path_variable ? fmt::format(" or {}", f.path_variable) : std::string(), errors);
}

}  // namespace

Result<void*> CudaLibraries::Get(Domain library) {
  auto it = apis_.find(library);
  if (it != apis_.end()) return it->second.get();
  ASSIGN_OR_RETURN(LibraryFile f, FileOf(library));
  ASSIGN_OR_RETURN(void* h, Open(f));
  std::vector<std::string> missing;
  std::shared_ptr<void> api = LoadDlApi(library, [h](const char* name) { return ::dlsym(h, name); }, &missing);
  if (!api) return Error(Err::kNotSupported, "{} has no table in this worker", DomainName(library));
  if (!missing.empty())
    LOG_INFO("{} lacks {} function(s) clients may call (they answer \"not supported\"), e.g. {}", f.soname, missing.size(), missing[0]);
  void* raw = api.get();
  apis_.emplace(library, std::move(api));
  return raw;
}

}  // namespace remora::worker

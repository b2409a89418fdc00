#include "rdma/verbs_api.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

namespace remora::rdma {
namespace {

struct Loaded {
  VerbsApi api;
  std::string problem;  // empty when api is complete
};

template <typename F>
bool Bind(void* lib, const char* symbol, F* out, std::string* problem) {
  void* p = dlsym(lib, symbol);
  if (p == nullptr) {
    *problem = fmt::format("{} lacks {} (rdma-core too old?)", symbol[0] == 'i' ? "libibverbs.so.1" : "librdmacm.so.1", symbol);
    return false;
  }
  *out = reinterpret_cast<F>(p);
  return true;
}

Loaded Load() {
  Loaded l;
  // RTLD_LOCAL: the application (or another library in it) may bring its own copy.
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (verbs == nullptr) {
    l.problem = fmt::format("libibverbs.so.1 not found ({}); install rdma-core (libibverbs1, ibverbs-providers)", dlerror());
    return l;
  }
  void* cm = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cm == nullptr) {
    l.problem = fmt::format("librdmacm.so.1 not found ({}); install rdma-core (librdmacm1)", dlerror());
    return l;
  }
  bool ok = true;
#define REMORA_BIND_VERBS(member, symbol) ok = ok && Bind(verbs, #symbol, &l.api.member, &l.problem);
#define REMORA_BIND_CM(member, symbol) ok = ok && Bind(cm, #symbol, &l.api.member, &l.problem);
  REMORA_IBVERBS_FUNCTIONS(REMORA_BIND_VERBS)
  REMORA_RDMACM_FUNCTIONS(REMORA_BIND_CM)
#undef REMORA_BIND_VERBS
#undef REMORA_BIND_CM
  (void)ok;
  return l;
}

const Loaded& Instance() {
  static const Loaded loaded = Load();  // thread-safe initialisation
  return loaded;
}

}  // namespace

const VerbsApi* LoadVerbs(std::string* why) {
  const Loaded& l = Instance();
  if (!l.problem.empty()) {
    if (why != nullptr) *why = l.problem;
    return nullptr;
  }
  return &l.api;
}

const VerbsApi& Verbs() {
  const VerbsApi* api = LoadVerbs();
  if (api == nullptr) std::abort();  // a verbs object exists, so the table was loaded
  return *api;
}

std::string RdmaDeviceProblem() {
  std::string why;
  const VerbsApi* api = LoadVerbs(&why);
  if (api == nullptr) return why;
  int n = 0;
  errno = 0;
  ibv_device** list = api->get_device_list(&n);
  // On kernels without RDMA support the list is NULL with errno ENOSYS, not an empty list.
  if (list == nullptr) {
    int err = errno;
    return fmt::format("no RDMA device (ibv_get_device_list: {})", err != 0 ? std::strerror(err) : "failed");
  }
  api->free_device_list(list);
  if (n == 0) return "no RDMA device (ibv_get_device_list found none)";
  return "";
}

}  // namespace remora::rdma

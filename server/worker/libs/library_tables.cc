// The libraries the worker serves (protocol/api/*.api with `role library`): their dispatch
// tables and real-library tables, by remora::Domain (the library's wire number), expanded from
// the generated index (libraries.h). A library added to protocol/api needs no line here.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "libraries.h"
#include "worker/backend/library_apis.h"
#include "worker/calls/generated_call.h"
#include "worker/calls/gen_tables.h"

namespace remora::worker {

// Defined by each library's generated dispatch and table (<name>_dispatch.cc, <name>_api.cc),
// which cannot all share one translation unit (cusolverDn.h includes cublas_v2.h, which
// cannot meet cublas.h): declared here by name.
#define REMORA_DECLARE_TABLES(name, wire, soname, core_table, path_env)                                               \
  namespace gen::name {                                                                                             \
  const OpTable& Ops();                                                                                             \
  std::shared_ptr<void> LoadDlApi(const std::function<void*(const char*)>& resolve, std::vector<std::string>* missing); \
  }                                                                                                                 \
  static_assert(static_cast<uint16_t>(wire) < kNumDomains, #name ": its wire number is not a remora::Domain");
REMORA_SERVED_LIBRARIES(REMORA_DECLARE_TABLES)
#undef REMORA_DECLARE_TABLES

const OpTable* MathLibraryOps(uint16_t library) {
  switch (library) {
#define REMORA_OPS_CASE(name, wire, soname, core_table, path_env) \
  case wire:                                                      \
    return &gen::name::Ops();
    REMORA_SERVED_LIBRARIES(REMORA_OPS_CASE)
#undef REMORA_OPS_CASE
    default: return nullptr;
  }
}

std::shared_ptr<void> LoadDlApi(Domain library, const std::function<void*(const char*)>& resolve,
                                std::vector<std::string>* missing) {
  switch (static_cast<uint16_t>(library)) {
#define REMORA_LOAD_CASE(name, wire, soname, core_table, path_env) \
  case wire:                                                       \
    return gen::name::LoadDlApi(resolve, missing);
    REMORA_SERVED_LIBRARIES(REMORA_LOAD_CASE)
#undef REMORA_LOAD_CASE
    default: return nullptr;
  }
}

}  // namespace remora::worker

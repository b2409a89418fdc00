// Error state and error strings: answered locally, never remoted.
#include <cuda_runtime_api.h>

#include "export.h"
#include "runtime.h"

namespace {

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};

constexpr ErrorText kErrors[] = {
#include "error_table.inc"
};

const ErrorText* Lookup(cudaError_t e) {
  for (const auto& t : kErrors)
    if (t.code == static_cast<int>(e)) return &t;
  return nullptr;
}

}  // namespace

using remora::shim::Thread;

REMORA_API cudaError_t cudaGetLastError() {
  cudaError_t e = Thread().last_error;
  Thread().last_error = cudaSuccess;
  return e;
}

REMORA_API cudaError_t cudaPeekAtLastError() { return Thread().last_error; }

REMORA_API const char* cudaGetErrorString(cudaError_t e) {
  const ErrorText* t = Lookup(e);
  return t ? t->text : "unrecognized error code";
}

REMORA_API const char* cudaGetErrorName(cudaError_t e) {
  const ErrorText* t = Lookup(e);
  return t ? t->name : "unrecognized error code";
}

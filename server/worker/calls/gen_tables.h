// The generated operation tables of the libraries the worker serves (one per API
// description whose calls travel; build/generated/api/<lib>_dispatch.cc).
#pragma once

#include <cstdint>

namespace remora::worker {
struct OpTable;
namespace gen::cuda {
const OpTable& Ops();
}  // namespace gen::cuda
// The operations of the math library whose wire number (its remora::Domain) is `library`,
// or nullptr (library_tables.cc).
const OpTable* MathLibraryOps(uint16_t library);
}  // namespace remora::worker

// The generated operation tables of the libraries the worker serves (one per API
// description whose calls travel; build/generated/api/<lib>_dispatch.cc).
#pragma once

namespace remora::worker {
struct OpTable;
namespace gen::cuda {
const OpTable& Ops();
}  // namespace gen::cuda
}  // namespace remora::worker

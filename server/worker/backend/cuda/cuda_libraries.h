// CudaLibraries: the real NVIDIA math libraries of the cuda backend (cuBLAS, cuBLASLt, cuDNN,
// cuFFT, cuRAND, cuSOLVER, cuSPARSE), each loaded on the first call a session makes to it,
// as its generated table (gen::<lib>::DlApi: every function resolved by name). The
// libraries link their own CUDA runtime statically and use the thread's current context,
// which is the worker's primary context of the call's GPU, so what they allocate and launch
// is the session's.
//
// Where a library is looked for: the directories of REMORA_LIBRARY_PATH (colon-separated)
// in the worker's environment, then the dynamic loader's search path, then the CUDA toolkit
// Remora was built against. A library that turns out to be one of Remora's own client
// libraries (a client LD_LIBRARY_PATH leaking into the server) is refused.
//
// Owned by the cuda Driver; used by the executor's single thread.
#pragma once

#include <map>
#include <memory>

#include "remora/base/status.h"

namespace remora::worker {

class CudaLibraries {
 public:
  CudaLibraries() = default;
  CudaLibraries(const CudaLibraries&) = delete;
  CudaLibraries& operator=(const CudaLibraries&) = delete;

  // The library's table (gen::<lib>::Api*, as void*), loading it on first use.
  Result<void*> Get(Domain library);

 private:
  std::map<Domain, std::shared_ptr<void>> apis_;
};

}  // namespace remora::worker

// cuFFT's data descriptors in the client (protocol/api/cufft.api: custom), for plans on one GPU:
// cufftXtMalloc builds the cudaLibXtDesc itself, over device memory it allocates through this
// process's (remoted) runtime, so the tenant is charged for it and the data pointer is one the
// application may use like any of its allocations; its size comes from the plan's shape the
// worker keeps (remoraFftXtSizes). On one GPU the shuffled formats are the natural order, so a
// copy is a cudaMemcpy of the plan's input (to the device) or output (from it), after the
// device's work so far, and a descriptor transform is the plan's execution on the descriptors'
// data, posted in the plan's stream like cufftExec*. Descriptors are recognised by address:
// one this process did not build is CUFFT_INVALID_VALUE. Thread-safe (a mutex guards the set).
#include <cuda_runtime_api.h>
#include <cufftXt.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "cufft_client.h"
#include "remote_call.h"

namespace {

struct Descriptor {
  cudaLibXtDesc lib{};
  cudaXtDesc xt{};
  uint64_t in = 0, out = 0;  // the plan's input and output bytes when the descriptor was made
};

std::mutex g_mu;
std::map<const cudaLibXtDesc*, std::unique_ptr<Descriptor>> g_descriptors;

// The descriptor's data pointer and bytes; false for one this process did not build.
bool Data(const void* d, void** data, uint64_t* bytes, uint64_t* in = nullptr, uint64_t* out = nullptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_descriptors.find(static_cast<const cudaLibXtDesc*>(d));
  if (it == g_descriptors.end()) return false;
  *data = it->second->xt.data[0];
  *bytes = it->second->xt.size[0];
  if (in != nullptr) *in = it->second->in;
  if (out != nullptr) *out = it->second->out;
  return true;
}

bool Pair(cudaLibXtDesc* input, cudaLibXtDesc* output, void** in, void** out) {
  uint64_t bytes = 0;
  return Data(input, in, &bytes) && Data(output, out, &bytes);
}

}  // namespace

extern "C" cufftResult cufftXtMalloc(cufftHandle plan, cudaLibXtDesc** descriptor, cufftXtSubFormat format) {
  const char* name = "cufftXtMalloc";
  if (descriptor == nullptr) return CUFFT_INVALID_VALUE;
  long long sizes[3] = {0, 0, 0};
  remora::Status st = remora::gen::cufft::remoraFftXtSizes(remora::shim::CallCtx{false, name}, plan, format, sizes);
  if (!st.ok()) {
    constexpr remora::shim::LibCodes kCodes{CUFFT_SUCCESS,       CUFFT_INVALID_VALUE, CUFFT_SETUP_FAILED,
                                            CUFFT_NOT_SUPPORTED, CUFFT_ALLOC_FAILED,  CUFFT_INTERNAL_ERROR};
    return static_cast<cufftResult>(remora::shim::FinishLib(remora::Domain::kCufft, kCodes, st, name));
  }
  auto d = std::make_unique<Descriptor>();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return CUFFT_INTERNAL_ERROR;
  void* data = nullptr;
  if (cudaMalloc(&data, static_cast<size_t>(sizes[0])) != cudaSuccess) {
    (void)cudaGetLastError();
    return CUFFT_ALLOC_FAILED;
  }
  d->xt.version = CUDA_XT_DESCRIPTOR_VERSION;
  d->xt.nGPUs = 1;
  d->xt.GPUs[0] = device;
  d->xt.data[0] = data;
  d->xt.size[0] = static_cast<size_t>(sizes[0]);
  d->lib.version = CUDA_XT_DESCRIPTOR_VERSION;
  d->lib.descriptor = &d->xt;
  d->lib.library = LIB_FORMAT_CUFFT;
  d->lib.subFormat = format;
  d->in = static_cast<uint64_t>(sizes[1]);
  d->out = static_cast<uint64_t>(sizes[2]);
  *descriptor = &d->lib;
  std::lock_guard<std::mutex> lock(g_mu);
  g_descriptors.emplace(&d->lib, std::move(d));
  return CUFFT_SUCCESS;
}

extern "C" cufftResult cufftXtFree(cudaLibXtDesc* descriptor) {
  std::unique_ptr<Descriptor> d;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_descriptors.find(descriptor);
    if (it == g_descriptors.end()) return CUFFT_INVALID_VALUE;
    d = std::move(it->second);
    g_descriptors.erase(it);
  }
  return cudaFree(d->xt.data[0]) == cudaSuccess ? CUFFT_SUCCESS : CUFFT_INTERNAL_ERROR;
}

// Synchronous, as cuFFT's: after the device's work so far (a transform posted in the plan's
// stream), the copy of the plan's input to a descriptor, its output from one, or a
// descriptor's data to another's.
extern "C" cufftResult cufftXtMemcpy(cufftHandle, void* dstPointer, void* srcPointer, cufftXtCopyType type) {
  void *dst = nullptr, *src = nullptr;
  uint64_t bytes = 0, other = 0, in = 0, out = 0;
  cudaMemcpyKind kind;
  switch (type) {
    case CUFFT_COPY_HOST_TO_DEVICE:
      if (srcPointer == nullptr || !Data(dstPointer, &dst, &bytes, &in)) return CUFFT_INVALID_VALUE;
      src = srcPointer;
      bytes = std::min(bytes, in);
      kind = cudaMemcpyHostToDevice;
      break;
    case CUFFT_COPY_DEVICE_TO_HOST:
      if (dstPointer == nullptr || !Data(srcPointer, &src, &bytes, nullptr, &out)) return CUFFT_INVALID_VALUE;
      dst = dstPointer;
      bytes = std::min(bytes, out);
      kind = cudaMemcpyDeviceToHost;
      break;
    case CUFFT_COPY_DEVICE_TO_DEVICE:
      if (!Data(srcPointer, &src, &bytes) || !Data(dstPointer, &dst, &other)) return CUFFT_INVALID_VALUE;
      bytes = std::min(bytes, other);
      kind = cudaMemcpyDeviceToDevice;
      break;
    default: return CUFFT_INVALID_VALUE;
  }
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(dst, src, bytes, kind) != cudaSuccess) {
    (void)cudaGetLastError();
    return CUFFT_EXEC_FAILED;
  }
  return CUFFT_SUCCESS;
}

extern "C" cufftResult cufftXtExecDescriptor(cufftHandle plan, cudaLibXtDesc* input, cudaLibXtDesc* output, int direction) {
  void *in = nullptr, *out = nullptr;
  if (!Pair(input, output, &in, &out)) return CUFFT_INVALID_VALUE;
  return cufftXtExec(plan, in, out, direction);
}

extern "C" cufftResult cufftXtExecDescriptorC2C(cufftHandle plan, cudaLibXtDesc* input, cudaLibXtDesc* output, int direction) {
  void *in = nullptr, *out = nullptr;
  if (!Pair(input, output, &in, &out)) return CUFFT_INVALID_VALUE;
  return cufftExecC2C(plan, static_cast<cufftComplex*>(in), static_cast<cufftComplex*>(out), direction);
}

extern "C" cufftResult cufftXtExecDescriptorZ2Z(cufftHandle plan, cudaLibXtDesc* input, cudaLibXtDesc* output, int direction) {
  void *in = nullptr, *out = nullptr;
  if (!Pair(input, output, &in, &out)) return CUFFT_INVALID_VALUE;
  return cufftExecZ2Z(plan, static_cast<cufftDoubleComplex*>(in), static_cast<cufftDoubleComplex*>(out), direction);
}

extern "C" cufftResult cufftXtExecDescriptorR2C(cufftHandle plan, cudaLibXtDesc* input, cudaLibXtDesc* output) {
  void *in = nullptr, *out = nullptr;
  if (!Pair(input, output, &in, &out)) return CUFFT_INVALID_VALUE;
  return cufftExecR2C(plan, static_cast<cufftReal*>(in), static_cast<cufftComplex*>(out));
}

extern "C" cufftResult cufftXtExecDescriptorC2R(cufftHandle plan, cudaLibXtDesc* input, cudaLibXtDesc* output) {
  void *in = nullptr, *out = nullptr;
  if (!Pair(input, output, &in, &out)) return CUFFT_INVALID_VALUE;
  return cufftExecC2R(plan, static_cast<cufftComplex*>(in), static_cast<cufftReal*>(out));
}

extern "C" cufftResult cufftXtExecDescriptorD2Z(cufftHandle plan, cudaLibXtDesc* input, cudaLibXtDesc* output) {
  void *in = nullptr, *out = nullptr;
  if (!Pair(input, output, &in, &out)) return CUFFT_INVALID_VALUE;
  return cufftExecD2Z(plan, static_cast<cufftDoubleReal*>(in), static_cast<cufftDoubleComplex*>(out));
}

extern "C" cufftResult cufftXtExecDescriptorZ2D(cufftHandle plan, cudaLibXtDesc* input, cudaLibXtDesc* output) {
  void *in = nullptr, *out = nullptr;
  if (!Pair(input, output, &in, &out)) return CUFFT_INVALID_VALUE;
  return cufftExecZ2D(plan, static_cast<cufftDoubleComplex*>(in), static_cast<cufftDoubleReal*>(out));
}

// Conditional-node bodies, one way of filling them at a time (issue 14: remoted, graphs.cu's
// kernel node in an IF body was refused by the worker's cuGraphAddNode with
// CUDA_ERROR_INVALID_VALUE). Each case builds a fresh graph whose only node is an IF node
// with a default condition of 1, fills its body one way, instantiates, launches and checks
// the result; every case runs (a refused one is reported with its error) and the program
// fails if any did. Natively all pass; the first failing case names what Remora mishandles:
//   empty     an empty node in the body (the body handle itself)
//   memset    a memset node in the body
//   kernel    cudaGraphAddKernelNode (graphs.cu's call)
//   node      cudaGraphAddNode of a kernel node
//   capture   cudaStreamBeginCaptureToGraph into the body
//   after     graphs.cu's shape: the IF node after a kernel node that sets its condition
#define GPU_TEST_NAME "graph_conditional_body"
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "gpu_test.h"

namespace {

constexpr int kN = 256;

__global__ void add_one(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}

__global__ void set_cond(cudaGraphConditionalHandle h, unsigned v) { cudaGraphSetConditional(h, v); }

int failures = 0;

// Reports a failed step of a case (not fatal: the other cases still run).
bool Ok(const char* name, const char* step, cudaError_t e) {
  if (e == cudaSuccess) return true;
  std::printf("CASE %s: %s returned %s (%s)\n", name, step, cudaGetErrorName(e), cudaGetErrorString(e));
  (void)cudaGetLastError();
  failures++;
  return false;
}

// Builds graph -> [prefix] -> IF(default 1) { fill(body) }, runs it once and expects y = 1
// (or y = 0 when the body adds nothing).
void Case(const char* name, float* y, cudaStream_t s, bool adds, bool prefix,
          const std::function<cudaError_t(cudaGraph_t body, float* y)>& fill) {
  CK(cudaMemset(y, 0, kN * sizeof(float)));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle h;
  CK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
  cudaGraphNode_t before = nullptr;
  if (prefix) {
    unsigned one = 1;
    void* args[] = {&h, &one};
    cudaKernelNodeParams kp{reinterpret_cast<void*>(set_cond), dim3(1), dim3(1), 0, args, nullptr};
    if (!Ok(name, "cudaGraphAddKernelNode (condition)", cudaGraphAddKernelNode(&before, g, nullptr, 0, &kp))) return;
  }
  cudaGraphNodeParams ifp{};
  ifp.type = cudaGraphNodeTypeConditional;
  ifp.conditional.handle = h;
  ifp.conditional.type = cudaGraphCondTypeIf;
  ifp.conditional.size = 1;
  cudaGraphNode_t cond;
  if (!Ok(name, "cudaGraphAddNode (IF)", cudaGraphAddNode(&cond, g, prefix ? &before : nullptr, nullptr, prefix ? 1 : 0, &ifp)))
    return;
  cudaGraph_t body = ifp.conditional.phGraph_out[0];
  if (body == nullptr) {
    std::printf("CASE %s: the IF node returned no body graph\n", name);
    failures++;
    return;
  }
  if (!Ok(name, "filling the body", fill(body, y))) return;
  cudaGraphExec_t exec;
  if (!Ok(name, "cudaGraphInstantiate", cudaGraphInstantiate(&exec, g, 0))) return;
  if (!Ok(name, "cudaGraphLaunch", cudaGraphLaunch(exec, s))) return;
  if (!Ok(name, "cudaStreamSynchronize", cudaStreamSynchronize(s))) return;
  float host[kN];
  CK(cudaMemcpy(host, y, sizeof(host), cudaMemcpyDeviceToHost));
  float want = adds ? 1.0f : 0.0f;
  for (int i = 0; i < kN; i++)
    if (host[i] != want) {
      std::printf("CASE %s: y[%d] = %g after the launch, expected %g\n", name, i, host[i], want);
      failures++;
      break;
    }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
  std::printf("CASE %s: done\n", name);
}

}  // namespace

int main() {
  float* y;
  CK(cudaMalloc(&y, kN * sizeof(float)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int n = kN;
  auto kernel = [&](cudaGraph_t body, float* p) {
    void* args[] = {&p, &n};
    cudaKernelNodeParams kp{reinterpret_cast<void*>(add_one), dim3(1), dim3(kN), 0, args, nullptr};
    cudaGraphNode_t node;
    return cudaGraphAddKernelNode(&node, body, nullptr, 0, &kp);
  };
  Case("empty", y, s, false, false, [](cudaGraph_t body, float*) {
    cudaGraphNode_t node;
    return cudaGraphAddEmptyNode(&node, body, nullptr, 0);
  });
  Case("memset", y, s, false, false, [](cudaGraph_t body, float* p) {
    cudaMemsetParams mp{};
    mp.dst = p;
    mp.value = 0;
    mp.elementSize = 4;
    mp.width = kN;
    mp.height = 1;
    cudaGraphNode_t node;
    return cudaGraphAddMemsetNode(&node, body, nullptr, 0, &mp);
  });
  Case("kernel", y, s, true, false, kernel);
  Case("node", y, s, true, false, [&](cudaGraph_t body, float* p) {
    void* args[] = {&p, &n};
    cudaGraphNodeParams np{};
    np.type = cudaGraphNodeTypeKernel;
    np.kernel.func = reinterpret_cast<void*>(add_one);
    np.kernel.gridDim = dim3(1);
    np.kernel.blockDim = dim3(kN);
    np.kernel.kernelParams = args;
    cudaGraphNode_t node;
    return cudaGraphAddNode(&node, body, nullptr, nullptr, 0, &np);
  });
  Case("capture", y, s, true, false, [&](cudaGraph_t body, float* p) {
    cudaStream_t c;
    cudaError_t e = cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking);
    if (e != cudaSuccess) return e;
    e = cudaStreamBeginCaptureToGraph(c, body, nullptr, nullptr, 0, cudaStreamCaptureModeRelaxed);
    if (e == cudaSuccess) {
      add_one<<<1, kN, 0, c>>>(p, n);
      cudaGraph_t out = nullptr;
      e = cudaStreamEndCapture(c, &out);
      if (e == cudaSuccess) e = cudaGetLastError();
    }
    cudaError_t d = cudaStreamDestroy(c);
    return e != cudaSuccess ? e : d;
  });
  Case("after", y, s, true, true, kernel);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(y));
  if (failures > 0) gpu_test::fail("%d step(s) of the conditional-body cases failed (see the CASE lines)", failures);
  gpu_test::pass("kernels, memsets, empty nodes and captured work in IF bodies run as natively");
  return 0;
}

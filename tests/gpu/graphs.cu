// CUDA graphs built both ways, with kernels. (1) Stream capture across two streams joined by
// events: H2D from two pinned buffers, kernels, memsets, a host function, D2H into two pinned
// buffers; replayed 200 times with new host input each time, then a kernel
// node's parameters changed in the executable graph and replayed again. (2) The explicit API:
// kernel, memcpy (pinned host memory), host, memory-allocation and -free, conditional (IF and
// WHILE, set by kernels) and child-graph nodes; launched, updated with cudaGraphExecUpdate and
// cudaGraphExecKernelNodeSetParams, relaunched. (Native CUDA accepts only pinned host memory in
// captured copies; under Remora pageable memory works too, which tests/apps/graphs.cu covers.)
#define GPU_TEST_NAME "graphs"
#include <cstring>
#include <vector>

#include "gpu_test.h"

namespace {

__global__ void scale_add(const float* x, float* y, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
__global__ void add_into(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}
__global__ void fill(float* y, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}
// Sets the IF condition to (*flag != 0).
__global__ void set_if(cudaGraphConditionalHandle h, const int* flag) { cudaGraphSetConditional(h, *flag != 0); }
// The WHILE body: counts down, adds one per iteration, stops at zero.
__global__ void loop_body(cudaGraphConditionalHandle h, int* counter, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    // Every block has added before the last one decides: one block only (n <= blockDim).
    int left = --(*counter);
    cudaGraphSetConditional(h, left > 0);
  }
}

int g_host_calls = 0;
void CountCall(void* p) { ++*static_cast<int*>(p); }

int Blocks(int n) { return (n + 255) / 256; }

void Captured(int launches) {
  const int n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  cudaStream_t s, t;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  float *x, *y, *z;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMalloc(&z, bytes));
  float *in, *out, *in_pinned, *out_pinned;
  CK(cudaMallocHost(&in, bytes));
  CK(cudaMallocHost(&out, bytes));
  CK(cudaMallocHost(&in_pinned, bytes));
  CK(cudaMallocHost(&out_pinned, bytes));
  std::memset(in, 0, bytes);
  std::memset(in_pinned, 0, bytes);

  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemcpyAsync(x, in, bytes, cudaMemcpyHostToDevice, s));
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(t, fork, 0));
  CK(cudaMemcpyAsync(z, in_pinned, bytes, cudaMemcpyHostToDevice, t));     // on the forked stream
  scale_add<<<Blocks(n), 256, 0, s>>>(x, y, 2.0f, 1.0f, n);                  // y = 2x + 1
  CK_LAUNCH("scale_add");
  CK(cudaEventRecord(join, t));
  CK(cudaStreamWaitEvent(s, join, 0));
  add_into<<<Blocks(n), 256, 0, s>>>(y, z, n);                               // y += z
  CK_LAUNCH("add_into");
  CK(cudaMemsetAsync(z, 0, bytes, s));
  CK(cudaLaunchHostFunc(s, CountCall, &g_host_calls));
  CK(cudaMemcpyAsync(out, y, bytes, cudaMemcpyDeviceToHost, s));
  CK(cudaMemcpyAsync(out_pinned, y, bytes, cudaMemcpyDeviceToHost, s));
  cudaGraph_t graph;
  CK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));

  for (int it = 0; it < launches; it++) {
    for (int i = 0; i < n; i += 101) {
      in[i] = static_cast<float>(it + i % 7);
      in_pinned[i] = static_cast<float>(i % 5);
    }
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i += 101) {
      float want = 2.0f * in[i] + 1.0f + in_pinned[i];
      if (out[i] != want || out_pinned[i] != want)
        gpu_test::fail("capture launch %d: y[%d] = %g / %g, expected %g", it, i, out[i], out_pinned[i], want);
    }
  }
  if (g_host_calls != launches) gpu_test::fail("the captured host function ran %d times in %d launches", g_host_calls, launches);

  // Change the first kernel's parameters in the executable graph only: y = 3x - 1 (+ z).
  size_t count = 0;
  CK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CK(cudaGraphGetNodes(graph, nodes.data(), &count));
  bool updated = false;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams p{};
    CK(cudaGraphKernelNodeGetParams(node, &p));
    if (p.func != reinterpret_cast<void*>(scale_add)) continue;
    float a = 3.0f, b = -1.0f;
    int nn = n;
    void* args[] = {&x, &y, &a, &b, &nn};
    p.kernelParams = args;
    CK(cudaGraphExecKernelNodeSetParams(exec, node, &p));
    updated = true;
  }
  if (!updated) gpu_test::fail("no scale_add kernel node in the captured graph");
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i += 101)
    if (out[i] != 3.0f * in[i] - 1.0f + in_pinned[i]) gpu_test::fail("after the update y[%d] = %g", i, out[i]);

  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  for (float* p : {in, out, in_pinned, out_pinned}) CK(cudaFreeHost(p));
  for (float* p : {x, y, z}) CK(cudaFree(p));
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(join));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(t));
}

void Explicit() {
  const int n = 256;  // one block: the WHILE body's countdown is block-local
  const size_t bytes = n * sizeof(float);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  float *x, *y;
  int *flag, *counter;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMalloc(&flag, sizeof(int)));
  CK(cudaMalloc(&counter, sizeof(int)));
  float *host_in, *host_out;
  CK(cudaMallocHost(&host_in, bytes));
  CK(cudaMallocHost(&host_out, bytes));
  for (int i = 0; i < n; i++) host_in[i] = static_cast<float>(i);
  int host_calls = 0;

  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  // copy in -> y = 2x+1 -> (memory node: tmp = fill 5, y += tmp, free tmp) -> IF(flag) { y += x }
  //   -> WHILE(counter) { y += 1 } -> copy out -> host
  cudaGraphNode_t copy_in, kernel, alloc, fill_tmp, add_tmp, free_tmp, set_cond, cond_if, cond_while, copy_out, host;
  CK(cudaGraphAddMemcpyNode1D(&copy_in, g, nullptr, 0, x, host_in, bytes, cudaMemcpyHostToDevice));
  float a = 2.0f, b = 1.0f;
  int nn = n;
  void* args[] = {&x, &y, &a, &b, &nn};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(scale_add);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&kernel, g, &copy_in, 1, &kp));

  cudaMemAllocNodeParams ap{};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = bytes;
  CK(cudaGraphAddMemAllocNode(&alloc, g, &kernel, 1, &ap));
  float* tmp = static_cast<float*>(ap.dptr);
  if (tmp == nullptr) gpu_test::fail("the memory node returned no address");
  float five = 5.0f;
  void* fill_args[] = {&tmp, &five, &nn};
  cudaKernelNodeParams fp{reinterpret_cast<void*>(fill), dim3(1), dim3(256), 0, fill_args, nullptr};
  CK(cudaGraphAddKernelNode(&fill_tmp, g, &alloc, 1, &fp));
  void* add_args[] = {&y, &tmp, &nn};
  cudaKernelNodeParams addp{reinterpret_cast<void*>(add_into), dim3(1), dim3(256), 0, add_args, nullptr};
  CK(cudaGraphAddKernelNode(&add_tmp, g, &fill_tmp, 1, &addp));
  CK(cudaGraphAddMemFreeNode(&free_tmp, g, &add_tmp, 1, tmp));

  cudaGraphConditionalHandle h_if, h_while;
  CK(cudaGraphConditionalHandleCreate(&h_if, g, 0, 0));
  CK(cudaGraphConditionalHandleCreate(&h_while, g, 1, cudaGraphCondAssignDefault));
  void* cond_args[] = {&h_if, &flag};
  cudaKernelNodeParams cp{reinterpret_cast<void*>(set_if), dim3(1), dim3(1), 0, cond_args, nullptr};
  CK(cudaGraphAddKernelNode(&set_cond, g, &free_tmp, 1, &cp));
  cudaGraphNodeParams ifp{};
  ifp.type = cudaGraphNodeTypeConditional;
  ifp.conditional.handle = h_if;
  ifp.conditional.type = cudaGraphCondTypeIf;
  ifp.conditional.size = 1;
  CK(cudaGraphAddNode(&cond_if, g, &set_cond, nullptr, 1, &ifp));
  cudaGraph_t if_body = ifp.conditional.phGraph_out[0];
  cudaGraphNode_t if_add;
  void* if_args[] = {&y, &x, &nn};
  cudaKernelNodeParams ip{reinterpret_cast<void*>(add_into), dim3(1), dim3(256), 0, if_args, nullptr};
  CK(cudaGraphAddKernelNode(&if_add, if_body, nullptr, 0, &ip));
  cudaGraphNodeParams wp{};
  wp.type = cudaGraphNodeTypeConditional;
  wp.conditional.handle = h_while;
  wp.conditional.type = cudaGraphCondTypeWhile;
  wp.conditional.size = 1;
  CK(cudaGraphAddNode(&cond_while, g, &cond_if, nullptr, 1, &wp));
  cudaGraphNode_t body_node;
  void* body_args[] = {&h_while, &counter, &y, &nn};
  cudaKernelNodeParams bp{reinterpret_cast<void*>(loop_body), dim3(1), dim3(256), 0, body_args, nullptr};
  CK(cudaGraphAddKernelNode(&body_node, wp.conditional.phGraph_out[0], nullptr, 0, &bp));

  CK(cudaGraphAddMemcpyNode1D(&copy_out, g, &cond_while, 1, host_out, y, bytes, cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp{CountCall, &host_calls};
  CK(cudaGraphAddHostNode(&host, g, &copy_out, 1, &hp));

  size_t count = 0;
  CK(cudaGraphGetNodes(g, nullptr, &count));
  if (count != 11) gpu_test::fail("the graph has %zu nodes, expected 11", count);

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  auto run = [&](int if_flag, int loops) {
    CK(cudaMemcpy(flag, &if_flag, sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(counter, &loops, sizeof(int), cudaMemcpyHostToDevice));
    std::fill(host_out, host_out + n, -1.0f);
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
  };
  auto expect = [&](const char* what, float scale, float shift, int if_flag, int loops) {
    for (int i = 0; i < n; i++) {
      float want = scale * host_in[i] + shift + 5.0f + (if_flag ? host_in[i] : 0.0f) + static_cast<float>(loops);
      if (host_out[i] != want) gpu_test::fail("%s: y[%d] = %g, expected %g", what, i, host_out[i], want);
    }
  };
  run(1, 3);
  expect("first launch", 2, 1, 1, 3);
  run(0, 5);
  expect("IF false, 5 loops", 2, 1, 0, 5);
  for (int i = 0; i < n; i++) host_in[i] = static_cast<float>(n - i);  // the copy node reads it at launch
  run(1, 1);
  expect("new host input", 2, 1, 1, 1);
  if (host_calls != 3) gpu_test::fail("the host node ran %d times", host_calls);

  // Update the executable graph: a kernel node's parameters directly ...
  a = 4.0f;
  b = 0.5f;
  CK(cudaGraphExecKernelNodeSetParams(exec, kernel, &kp));
  run(0, 2);
  expect("kernel node updated in the executable graph", 4, 0.5f, 0, 2);
  // ... and from the changed graph.
  a = -1.0f;
  b = 2.0f;
  CK(cudaGraphKernelNodeSetParams(kernel, &kp));
  cudaGraphExecUpdateResultInfo info{};
  CK(cudaGraphExecUpdate(exec, g, &info));
  if (info.result != cudaGraphExecUpdateSuccess) gpu_test::fail("cudaGraphExecUpdate result %d", info.result);
  run(1, 4);
  expect("graph updated", -1, 2, 1, 4);

  // A child graph (graphs with memory nodes cannot be children): fill y, copy it out.
  cudaGraph_t cg, parent;
  CK(cudaGraphCreate(&cg, 0));
  cudaGraphNode_t cfill, ccopy, child;
  float seven = 7.0f;
  void* cfill_args[] = {&y, &seven, &nn};
  cudaKernelNodeParams cfp{reinterpret_cast<void*>(fill), dim3(1), dim3(256), 0, cfill_args, nullptr};
  CK(cudaGraphAddKernelNode(&cfill, cg, nullptr, 0, &cfp));
  CK(cudaGraphAddMemcpyNode1D(&ccopy, cg, &cfill, 1, host_out, y, bytes, cudaMemcpyDeviceToHost));
  CK(cudaGraphCreate(&parent, 0));
  CK(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, cg));
  cudaGraphExec_t pexec;
  CK(cudaGraphInstantiate(&pexec, parent, 0));
  std::fill(host_out, host_out + n, -1.0f);
  CK(cudaGraphLaunch(pexec, s));
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i++)
    if (host_out[i] != 7.0f) gpu_test::fail("child graph: y[%d] = %g", i, host_out[i]);
  CK(cudaGraphDestroy(cg));

  CK(cudaGraphExecDestroy(pexec));
  CK(cudaGraphDestroy(parent));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
  for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(flag), static_cast<void*>(counter)})
    CK(cudaFree(p));
  CK(cudaFreeHost(host_in));
  CK(cudaFreeHost(host_out));
  CK(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  int launches = argc > 1 ? std::atoi(argv[1]) : 200;
  Captured(launches);
  Explicit();
  gpu_test::pass("captured graph (2 streams, pageable and pinned copies, host function) replayed %d times and updated; "
                 "explicit graph with kernel, memcpy, memset-free memory, host, conditional IF/WHILE and child nodes, "
                 "updated and relaunched",
                 launches);
  return 0;
}

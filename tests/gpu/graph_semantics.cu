// graph_semantics: the CUDA graph behaviour NVIDIA's cuda-samples rely on that an earlier
// Remora got wrong (issue 43), each checked natively and through Remora, and in CI on the
// host-emulated backend (which runs no kernel: the only kernels here end while loops on a
// GPU, where the emulator runs a while body once, so the results are the same):
//   1. the process's first small copy into pageable memory made inside a capture
//      (simpleCudaGraphs: it invalidated the capture through Remora);
//   2. host nodes see what their graph's copies before them wrote into pageable memory, and
//      copies after them read what they wrote - by hand and by capture, at the first launch
//      too (simpleCudaGraphs: its host node printed 0 at the first launch);
//   3. cudaMallocAsync / cudaFreeAsync in a capture are allocation and free nodes, and graph
//      memory freed outside its graph (graphMemoryNodes);
//   4. conditional nodes of every kind by hand, and by capture: an IF node added to a
//      capture's graph (capturedWhileGraph's shape) and a do-while body captured into the
//      node's graph with cudaStreamEndCapture(stream, NULL) (graphConditionalNodes).
#define GPU_TEST_NAME "graph_semantics"
#include <cstring>
#include <vector>

#include "gpu_test.h"

using gpu_test::fail;

__global__ void SetCondition(cudaGraphConditionalHandle handle, unsigned value) { cudaGraphSetConditional(handle, value); }

namespace {

constexpr int kLaunches = 3;

void CheckGraph(cudaGraph_t g, const char* what) {
  if (g == nullptr) fail("%s: no graph", what);
}

// Counts the nodes of `g` of type `t`.
int CountNodes(cudaGraph_t g, cudaGraphNodeType t) {
  size_t n = 0;
  CK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) CK(cudaGraphGetNodes(g, nodes.data(), &n));
  int count = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CK(cudaGraphNodeGetType(node, &type));
    count += type == t;
  }
  return count;
}

// ---- 1 ------------------------------------------------------------------------------------
void FirstSmallPageableCopyInCapture() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* d;
  CK(cudaMalloc(&d, 4096));
  int* in;  // pinned, as simpleCudaGraphs' input
  CK(cudaMallocHost(&in, 4096));
  std::memset(in, 0, 4096);
  int result = -1;  // on the stack: pageable, 4 bytes
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemcpyAsync(d, in, 4096, cudaMemcpyDefault, s));
  CK(cudaMemcpyAsync(&result, d + 5, sizeof(int), cudaMemcpyDefault, s));
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  if (e != cudaSuccess) fail("1: a capture holding a small copy into pageable memory ended with %s", cudaGetErrorName(e));
  CheckGraph(g, "1");
  if (result != -1) fail("1: the captured copy ran during the capture");
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < kLaunches; i++) {
    in[5] = 1234 + i;
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    if (result != 1234 + i) fail("1: launch %d copied %d, expected %d", i, result, 1234 + i);
  }
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  CK(cudaFreeHost(in));
  CK(cudaFree(d));
  CK(cudaStreamDestroy(s));
  gpu_test::info("1: the first small copy into pageable memory is captured");
}

// ---- 2 ------------------------------------------------------------------------------------
struct HostSide {
  int out = -1;      // the graph copies its input here, before the first host node      // ... and back here, before the first host node
  int seen[16] = {};  // what the first host node saw, per launch
  int launch = 0;
  int out2 = -1;     // the graph copies here what the second host node wrote, after it
  int* in2_at = nullptr;  // where the second host node writes (pinned memory)
};

void RecordOut(void* p) {
  auto* h = static_cast<HostSide*>(p);
  if (h->launch < 16) h->seen[h->launch] = h->out;
}
void WriteIn2(void* p) {
  auto* h = static_cast<HostSide*>(p);
  *h->in2_at = 100 + h->launch;
}

void CheckHostSide(const HostSide& h, int launch, const char* how) {
  if (h.seen[launch] != 10 + launch)
    fail("2 (%s): at launch %d the host node saw %d, expected %d (what the copy before it wrote)", how, launch,
         h.seen[launch], 10 + launch);
  if (h.out2 != 100 + launch)
    fail("2 (%s): at launch %d the copy after the host node read %d, expected %d (what the node wrote)", how, launch,
         h.out2, 100 + launch);
}

void HostNodesByHand() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *d, *d2;
  CK(cudaMalloc(&d, sizeof(int)));
  CK(cudaMalloc(&d2, sizeof(int)));
  // As in simpleCudaGraphs: the inputs pinned, the outputs pageable (on the stack there).
  HostSide h;
  int* pin;
  CK(cudaMallocHost(&pin, 2 * sizeof(int)));
  h.in2_at = pin + 1;
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t up, down, record, write, up2, down2;
  CK(cudaGraphAddMemcpyNode1D(&up, g, nullptr, 0, d, pin, sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaGraphAddMemcpyNode1D(&down, g, &up, 1, &h.out, d, sizeof(int), cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp{RecordOut, &h};
  CK(cudaGraphAddHostNode(&record, g, &down, 1, &hp));
  hp = cudaHostNodeParams{WriteIn2, &h};
  CK(cudaGraphAddHostNode(&write, g, &record, 1, &hp));
  CK(cudaGraphAddMemcpyNode1D(&up2, g, &write, 1, d2, pin + 1, sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaGraphAddMemcpyNode1D(&down2, g, &up2, 1, &h.out2, d2, sizeof(int), cudaMemcpyDeviceToHost));
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < kLaunches; i++) {
    h.launch = i;
    pin[0] = 10 + i;
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    CheckHostSide(h, i, "by hand");
  }
  // A clone runs the same way (its copies are its own nodes).
  cudaGraph_t clone;
  CK(cudaGraphClone(&clone, g));
  cudaGraphExec_t cx;
  CK(cudaGraphInstantiate(&cx, clone, 0));
  h.launch = kLaunches;
  pin[0] = 10 + kLaunches;
  CK(cudaGraphLaunch(cx, s));
  CK(cudaStreamSynchronize(s));
  CheckHostSide(h, kLaunches, "a clone");
  CK(cudaGraphExecDestroy(cx));
  CK(cudaGraphDestroy(clone));
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  CK(cudaFreeHost(pin));
  CK(cudaFree(d));
  CK(cudaFree(d2));
  CK(cudaStreamDestroy(s));
  gpu_test::info("2: host nodes of a graph built by hand see its copies, at every launch");
}

void HostNodesByCapture() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *d, *d2;
  CK(cudaMalloc(&d, sizeof(int)));
  CK(cudaMalloc(&d2, sizeof(int)));
  // Copies into pageable memory are captured as CUDA captures them (NVIDIA's simpleCudaGraphs
  // does); the sources of the host-to-device copies are pinned, as CUDA wants them in a
  // capture (over tcp Remora stages pinned memory too, so the refresh after the host node
  // is exercised there; over shm it is read in place).
  HostSide h;
  int* pin;
  CK(cudaMallocHost(&pin, 2 * sizeof(int)));
  h.in2_at = pin + 1;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemcpyAsync(d, pin, sizeof(int), cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(&h.out, d, sizeof(int), cudaMemcpyDeviceToHost, s));
  CK(cudaLaunchHostFunc(s, RecordOut, &h));
  CK(cudaLaunchHostFunc(s, WriteIn2, &h));
  CK(cudaMemcpyAsync(d2, pin + 1, sizeof(int), cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(&h.out2, d2, sizeof(int), cudaMemcpyDeviceToHost, s));
  cudaGraph_t g = nullptr;
  CK(cudaStreamEndCapture(s, &g));
  CheckGraph(g, "2");
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < kLaunches; i++) {
    h.launch = i;
    pin[0] = 10 + i;
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    CheckHostSide(h, i, "by capture");
  }
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  CK(cudaFreeHost(pin));
  CK(cudaFree(d));
  CK(cudaFree(d2));
  CK(cudaStreamDestroy(s));
  gpu_test::info("2: host functions of a captured graph see its copies, at every launch");
}

// ---- 3 ------------------------------------------------------------------------------------
void StreamOrderedMemoryInCapture() {
  const size_t n = 1 << 20;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<unsigned char> out(n);
  // Allocated, used and freed in the graph.
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  unsigned char* p = nullptr;
  cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&p), n, s);
  if (e != cudaSuccess) fail("3: cudaMallocAsync in a capture returned %s", cudaGetErrorName(e));
  CK(cudaMemsetAsync(p, 0x3c, n, s));
  CK(cudaMemcpyAsync(out.data(), p, n, cudaMemcpyDeviceToHost, s));
  e = cudaFreeAsync(p, s);
  if (e != cudaSuccess) fail("3: cudaFreeAsync in a capture returned %s", cudaGetErrorName(e));
  cudaGraph_t g = nullptr;
  e = cudaStreamEndCapture(s, &g);
  if (e != cudaSuccess) fail("3: the capture with stream-ordered memory ended with %s", cudaGetErrorName(e));
  CheckGraph(g, "3");
  int allocs = CountNodes(g, cudaGraphNodeTypeMemAlloc), frees = CountNodes(g, cudaGraphNodeTypeMemFree);
  if (allocs != 1 || frees != 1) fail("3: the graph has %d allocation and %d free nodes, expected 1 and 1", allocs, frees);
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < kLaunches; i++) {
    std::memset(out.data(), 0, n);
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    if (out[0] != 0x3c || out[n - 1] != 0x3c) fail("3: launch %d read %d %d from the graph's memory", i, out[0], out[n - 1]);
  }
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));

  // Allocated in the graph, freed outside it (cudaFreeAsync, then cudaFree), relaunched.
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  unsigned char* q = nullptr;
  CK(cudaMallocAsync(reinterpret_cast<void**>(&q), n, s));
  CK(cudaMemsetAsync(q, 0x44, n, s));
  CK(cudaStreamEndCapture(s, &g));
  CheckGraph(g, "3b");
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < 2; i++) {
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    std::memset(out.data(), 0, n);
    CK(cudaMemcpy(out.data(), q, n, cudaMemcpyDeviceToHost));
    if (out[7] != 0x44 || out[n - 7] != 0x44) fail("3b: launch %d left %d %d in the graph's memory", i, out[7], out[n - 7]);
    if (i == 0) {
      CK(cudaFreeAsync(q, s));
      CK(cudaStreamSynchronize(s));
    } else {
      CK(cudaFree(q));
    }
  }
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));

  // A hand-made allocation node whose graph is destroyed once instantiated (NVIDIA's
  // graphMemoryFootprint): the executable graph still allocates the memory, which its
  // launch leaves allocated until cudaFree.
  cudaGraph_t hg;
  CK(cudaGraphCreate(&hg, 0));
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  CK(cudaGetDevice(&ap.poolProps.location.id));
  ap.bytesize = n;
  cudaGraphNode_t alloc_node, set_node;
  CK(cudaGraphAddMemAllocNode(&alloc_node, hg, nullptr, 0, &ap));
  unsigned char* r = static_cast<unsigned char*>(ap.dptr);
  cudaMemsetParams ms = {};
  ms.dst = r;
  ms.value = 0x5a;
  ms.elementSize = 1;
  ms.width = n;
  ms.height = 1;
  CK(cudaGraphAddMemsetNode(&set_node, hg, &alloc_node, 1, &ms));
  CK(cudaGraphInstantiate(&x, hg, 0));
  CK(cudaGraphDestroy(hg));
  CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  std::memset(out.data(), 0, n);
  CK(cudaMemcpy(out.data(), r, n, cudaMemcpyDeviceToHost));
  if (out[3] != 0x5a || out[n - 3] != 0x5a) fail("3c: the launch left %d %d in the memory of a destroyed graph's node", out[3], out[n - 3]);
  CK(cudaFree(r));
  CK(cudaGraphExecDestroy(x));
  CK(cudaStreamDestroy(s));
  gpu_test::info("3: stream-ordered allocation and free in a capture are graph nodes");
}

// ---- 4 ------------------------------------------------------------------------------------
// A conditional node of `type` with `size` bodies on `handle`, each body setting marks[i] to
// 0x10 + i (and a WHILE body ending its loop).
cudaGraphNode_t AddConditional(cudaGraph_t g, const cudaGraphNode_t* deps, size_t ndeps, cudaGraphConditionalHandle handle,
                               cudaGraphConditionalNodeType type, unsigned size, unsigned char* marks) {
  cudaGraphNodeParams cp = {};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = handle;
  cp.conditional.type = type;
  cp.conditional.size = size;
  cudaGraphNode_t node;
  CK(cudaGraphAddNode(&node, g, deps, nullptr, ndeps, &cp));
  for (unsigned i = 0; i < size; i++) {
    cudaGraph_t body = cp.conditional.phGraph_out[i];
    cudaMemsetParams ms = {};
    ms.dst = marks + i;
    ms.value = 0x10 + i;
    ms.elementSize = 1;
    ms.width = 1;
    ms.height = 1;
    cudaGraphNode_t set;
    CK(cudaGraphAddMemsetNode(&set, body, nullptr, 0, &ms));
    if (type == cudaGraphCondTypeWhile) {
      cudaKernelNodeParams kp = {};
      unsigned zero = 0;
      void* args[] = {&handle, &zero};
      kp.func = reinterpret_cast<void*>(SetCondition);
      kp.gridDim = dim3(1);
      kp.blockDim = dim3(1);
      kp.kernelParams = args;
      cudaGraphNode_t end;
      CK(cudaGraphAddKernelNode(&end, body, &set, 1, &kp));
    }
  }
  return node;
}

// Runs `g` once and returns the first `n` marks (cleared before).
std::vector<unsigned char> RunMarks(cudaGraph_t g, cudaStream_t s, unsigned char* marks, int n) {
  CK(cudaMemset(marks, 0, 16));
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaGraphExecDestroy(x));
  std::vector<unsigned char> out(16);
  CK(cudaMemcpy(out.data(), marks, 16, cudaMemcpyDeviceToHost));
  out.resize(static_cast<size_t>(n));
  return out;
}

void ExpectMarks(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want, const char* what) {
  for (size_t i = 0; i < want.size(); i++)
    if (got[i] != want[i]) fail("4 (%s): body %zu left 0x%02x, expected 0x%02x", what, i, got[i], want[i]);
}

void ConditionalsByHand(cudaStream_t s, unsigned char* marks) {
  struct Case {
    const char* name;
    cudaGraphConditionalNodeType type;
    unsigned size, value;
    std::vector<unsigned char> want;
  };
  const Case cases[] = {
      {"if, true", cudaGraphCondTypeIf, 1, 1, {0x10}},
      {"if, false", cudaGraphCondTypeIf, 1, 0, {0}},
      {"if/else, false", cudaGraphCondTypeIf, 2, 0, {0, 0x11}},
      {"switch, 2 of 3", cudaGraphCondTypeSwitch, 3, 2, {0, 0, 0x12}},
      {"switch, out of range", cudaGraphCondTypeSwitch, 3, 7, {0, 0, 0}},
      {"while, false", cudaGraphCondTypeWhile, 1, 0, {0}},
      {"while, ended by its body", cudaGraphCondTypeWhile, 1, 1, {0x10}},
  };
  for (const Case& c : cases) {
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    CK(cudaGraphConditionalHandleCreate(&h, g, c.value, cudaGraphCondAssignDefault));
    AddConditional(g, nullptr, 0, h, c.type, c.size, marks);
    ExpectMarks(RunMarks(g, s, marks, static_cast<int>(c.size)), c.want, c.name);
    CK(cudaGraphDestroy(g));
  }
  gpu_test::info("4: if, if/else, switch and while nodes built by hand");
}

void ConditionalsByCapture(cudaStream_t s, unsigned char* marks) {
  // capturedWhileGraph's shape: a conditional node added to the capture's own graph.
  CK(cudaMemset(marks, 0, 16));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status;
  cudaGraph_t g = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  CK(cudaStreamGetCaptureInfo(s, &status, nullptr, &g, &deps, nullptr, &ndeps));
  if (status != cudaStreamCaptureStatusActive || g == nullptr) fail("4: no capture graph");
  cudaGraphConditionalHandle h;
  CK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
  CK(cudaMemsetAsync(marks + 8, 0x20, 1, s));
  CK(cudaStreamGetCaptureInfo(s, &status, nullptr, &g, &deps, nullptr, &ndeps));
  cudaGraphNode_t cond = AddConditional(g, deps, ndeps, h, cudaGraphCondTypeIf, 1, marks);
  CK(cudaStreamUpdateCaptureDependencies(s, &cond, nullptr, 1, cudaStreamSetCaptureDependencies));
  CK(cudaMemsetAsync(marks + 9, 0x21, 1, s));
  cudaGraph_t captured = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &captured);
  if (e != cudaSuccess) fail("4: a capture with a conditional node added to it ended with %s", cudaGetErrorName(e));
  CheckGraph(captured, "4");
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, captured, 0));
  CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaGraphExecDestroy(x));
  std::vector<unsigned char> got(16);
  CK(cudaMemcpy(got.data(), marks, 16, cudaMemcpyDeviceToHost));
  if (got[8] != 0x20 || got[0] != 0x10 || got[9] != 0x21)
    fail("4 (if added to a capture): marks 0x%02x 0x%02x 0x%02x, expected 0x20 0x10 0x21", got[8], got[0], got[9]);
  CK(cudaGraphDestroy(captured));

  // simpleDoWhileGraph: the body of a while node captured into the node's graph, the
  // capture ended without asking for the graph (it is the node's).
  CK(cudaGraphCreate(&g, 0));
  CK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
  cudaGraphNodeParams cp = {};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = h;
  cp.conditional.type = cudaGraphCondTypeWhile;
  cp.conditional.size = 1;
  CK(cudaGraphAddNode(&cond, g, nullptr, nullptr, 0, &cp));
  cudaGraph_t body = cp.conditional.phGraph_out[0];
  cudaStream_t bs;
  CK(cudaStreamCreateWithFlags(&bs, cudaStreamNonBlocking));
  CK(cudaStreamBeginCaptureToGraph(bs, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  CK(cudaMemsetAsync(marks + 3, 0x33, 1, bs));
  SetCondition<<<1, 1, 0, bs>>>(h, 0);
  CK(cudaGetLastError());
  e = cudaStreamEndCapture(bs, nullptr);
  if (e != cudaSuccess) fail("4: cudaStreamEndCapture(stream, NULL) of a capture into a graph returned %s", cudaGetErrorName(e));
  cudaStreamCaptureStatus after;
  CK(cudaStreamIsCapturing(bs, &after));
  if (after != cudaStreamCaptureStatusNone) fail("4: the stream still captures after cudaStreamEndCapture(stream, NULL)");
  std::vector<unsigned char> marks_after = RunMarks(g, s, marks, 4);
  if (marks_after[3] != 0x33) fail("4 (do-while by capture): the body left 0x%02x, expected 0x33", marks_after[3]);
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(bs));

  // A plain capture ended with NULL: whatever the driver answers (printed, to compare with
  // native), the stream is left usable.
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemsetAsync(marks, 1, 1, s));
  e = cudaStreamEndCapture(s, nullptr);
  (void)cudaGetLastError();
  CK(cudaStreamIsCapturing(s, &after));
  bool still = after != cudaStreamCaptureStatusNone;
  if (still) {
    cudaGraph_t rest = nullptr;
    (void)cudaStreamEndCapture(s, &rest);
    (void)cudaGetLastError();
    if (rest != nullptr) CK(cudaGraphDestroy(rest));
  }
  gpu_test::info("4: conditional nodes by capture (an if node in a capture, a do-while body); a plain capture ended "
                 "with NULL: %s, %s", cudaGetErrorName(e), still ? "still capturing" : "ended");
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP %s: no CUDA device\n", GPU_TEST_NAME);
    return 77;
  }
  FirstSmallPageableCopyInCapture();  // first: no small copy into pageable memory before it
  HostNodesByHand();
  HostNodesByCapture();
  StreamOrderedMemoryInCapture();
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char* marks;
  CK(cudaMalloc(&marks, 16));
  ConditionalsByHand(s, marks);
  ConditionalsByCapture(s, marks);
  CK(cudaFree(marks));
  CK(cudaStreamDestroy(s));
  gpu_test::pass("small pageable copy in a capture, host nodes and staged copies, stream-ordered memory in a capture, "
                 "conditional nodes by hand and by capture");
  return 0;
}

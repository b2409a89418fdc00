// Stream capture and CUDA graphs without kernels (the host backend does not run them):
// copies (device, pageable, pinned), memsets and host functions captured across two streams
// joined by events, replayed 100 times with the host data changed between launches; the
// capture queries and errors; the explicit graph API (memset, memcpy, host, child-graph and
// empty nodes, topology queries, executable-graph updates, clone, debug print).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "app_check.h"

namespace {

std::atomic<int> g_calls{0};
void CountCall(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

// Captured: copies and memsets on two streams (fork and join through events), a host
// function; replayed `launches` times with the host source changed before each launch.
void CaptureAndReplay(bool pinned, int launches) {
  const size_t n = 256 << 10;
  cudaStream_t s, t;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  unsigned char *a, *b, *c;
  CHECK(cudaMalloc(&a, n));
  CHECK(cudaMalloc(&b, n));
  CHECK(cudaMalloc(&c, n));
  unsigned char *in, *out, *out_small;
  std::vector<unsigned char> in_v, out_v, small_v;
  if (pinned) {
    CHECK(cudaMallocHost(&in, n));
    CHECK(cudaMallocHost(&out, n));
    CHECK(cudaMallocHost(&out_small, 4096));
  } else {
    in_v.resize(n);
    out_v.resize(n);
    small_v.resize(4096);
    in = in_v.data();
    out = out_v.data();
    out_small = small_v.data();
  }
  std::memset(in, 0, n);
  std::memset(out, 0xee, n);
  std::memset(out_small, 0xee, 4096);

  cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(s, &st));
  REQUIRE(st == cudaStreamCaptureStatusNone, "a stream captures before the capture began");

  int calls_before_capture = g_calls.load();
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamIsCapturing(s, &st));
  REQUIRE(st == cudaStreamCaptureStatusActive, "capture status %d", st);
  unsigned long long id = 0;
  cudaGraph_t capturing = nullptr;
  CHECK(cudaStreamGetCaptureInfo(s, &st, &id, &capturing, nullptr, nullptr, nullptr));
  REQUIRE(st == cudaStreamCaptureStatusActive && id != 0 && capturing != nullptr, "capture info");
  CHECK(cudaMemcpyAsync(a, in, n, cudaMemcpyHostToDevice, s));  // the host data of each launch
  CHECK(cudaMemsetAsync(b, 0x5a, n / 2, s));
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(t, fork, 0));  // t joins the capture
  CHECK(cudaStreamIsCapturing(t, &st));
  REQUIRE(st == cudaStreamCaptureStatusActive, "the forked stream is not capturing (%d)", st);
  CHECK(cudaMemcpyAsync(c, a, n, cudaMemcpyDeviceToDevice, t));
  CHECK(cudaMemsetAsync(c, 0x11, 16, t));
  CHECK(cudaEventRecord(join, t));
  CHECK(cudaStreamWaitEvent(s, join, 0));  // and is joined back
  CHECK(cudaMemcpyAsync(b + n / 2, c + n / 2, n / 2, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaLaunchHostFunc(s, CountCall, &g_calls));
  CHECK(cudaMemcpyAsync(out, c, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyAsync(out_small, b, 4096, cudaMemcpyDeviceToHost, s));
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s, &graph));
  REQUIRE(graph != nullptr, "no graph from the capture");
  CHECK(cudaStreamIsCapturing(s, &st));
  REQUIRE(st == cudaStreamCaptureStatusNone, "still capturing after the end");
  // Nothing ran during the capture.
  REQUIRE(out[100] == 0xee && out_small[0] == 0xee && g_calls.load() == calls_before_capture,
          "captured work ran during the capture (%d %d %d)", out[100], out_small[0], g_calls.load());

  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  REQUIRE(count == 8, "the captured graph has %zu nodes", count);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  int before = g_calls.load();
  for (int i = 0; i < launches; i++) {
    for (size_t k = 0; k < n; k += 997) in[k] = static_cast<unsigned char>(i * 7 + k);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    for (size_t k = 0; k < n; k += 997) {
      unsigned char want = k < 16 ? 0x11 : static_cast<unsigned char>(i * 7 + k);
      REQUIRE(out[k] == want, "launch %d: out[%zu] = %d, expected %d", i, k, out[k], want);
    }
    REQUIRE(out_small[5] == 0x5a, "launch %d: the memset is missing (%d)", i, out_small[5]);
  }
  REQUIRE(g_calls.load() - before == launches, "the host function ran %d times in %d launches", g_calls.load() - before,
          launches);
  // The device holds the last launch's data.
  std::vector<unsigned char> check(n);
  CHECK(cudaMemcpy(check.data(), b, n, cudaMemcpyDeviceToHost));
  REQUIRE(check[0] == 0x5a && check[n / 2 - 1] == 0x5a, "the first half of b is not the memset");
  for (size_t j = n / 2; j < n; j++) {
    unsigned char want = j % 997 == 0 ? static_cast<unsigned char>((launches - 1) * 7 + j) : 0;
    REQUIRE(check[j] == want, "b[%zu] = %d, expected %d", j, check[j], want);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  if (pinned) {
    CHECK(cudaFreeHost(in));
    CHECK(cudaFreeHost(out));
    CHECK(cudaFreeHost(out_small));
  }
  for (void* p : {a, b, c}) CHECK(cudaFree(p));
  CHECK(cudaEventDestroy(fork));
  CHECK(cudaEventDestroy(join));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(t));
}

// What CUDA answers to synchronising on a capturing stream: the capture is invalidated.
void CaptureErrors() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char* d;
  CHECK(cudaMalloc(&d, 4096));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  (void)cudaGetLastError();
  CHECK(cudaMemsetAsync(d, 1, 4096, s));
  EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CHECK(cudaStreamIsCapturing(s, &st));
  REQUIRE(st == cudaStreamCaptureStatusInvalidated, "after a synchronisation the capture is %d", st);
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  REQUIRE(g == nullptr, "an invalidated capture returned a graph");
  // The stream works normally again.
  CHECK(cudaMemsetAsync(d, 2, 4096, s));
  CHECK(cudaStreamSynchronize(s));
  unsigned char x = 0;
  CHECK(cudaMemcpy(&x, d + 7, 1, cudaMemcpyDeviceToHost));
  REQUIRE(x == 2, "memset after the failed capture gave %d", x);
  // The capture mode is the calling thread's.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  REQUIRE(mode == cudaStreamCaptureModeGlobal, "a thread starts in mode %d", mode);
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  REQUIRE(mode == cudaStreamCaptureModeRelaxed, "the mode was not kept (%d)", mode);
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
}

// The explicit graph API: nodes of every kind the host backend runs, topology, updates.
void ExplicitGraphs() {
  const size_t n = 64 << 10;
  unsigned char *d, *pinned;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMallocHost(&pinned, n));
  std::vector<unsigned char> pageable(n, 0);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaMemsetParams ms{};
  ms.dst = d;
  ms.value = 0x42424242;  // four bytes of 0x42
  ms.elementSize = 4;
  ms.width = n / 4;
  ms.height = 1;
  cudaGraphNode_t set, to_pinned, to_pageable, host, empty, child_node;
  CHECK(cudaGraphAddMemsetNode(&set, g, nullptr, 0, &ms));
  CHECK(cudaGraphAddMemcpyNode1D(&to_pinned, g, &set, 1, pinned, d, n, cudaMemcpyDeviceToHost));
  cudaMemcpy3DParms cp{};
  cp.srcPtr = cudaPitchedPtr{d, n, n, 1};
  cp.dstPtr = cudaPitchedPtr{pageable.data(), n, n, 1};
  cp.extent = cudaExtent{n, 1, 1};
  cp.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaGraphAddMemcpyNode(&to_pageable, g, &set, 1, &cp));
  std::atomic<int> calls{0};
  cudaHostNodeParams hp{CountCall, &calls};
  cudaGraphNode_t both[2] = {to_pinned, to_pageable};
  CHECK(cudaGraphAddHostNode(&host, g, both, 2, &hp));
  CHECK(cudaGraphAddEmptyNode(&empty, g, &host, 1));
  // A child graph with one memset of its own.
  cudaGraph_t child;
  CHECK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t child_set;
  cudaMemsetParams cms = ms;
  cms.dst = d + n / 2;
  cms.value = 0x07;
  cms.elementSize = 1;
  cms.width = 16;
  CHECK(cudaGraphAddMemsetNode(&child_set, child, nullptr, 0, &cms));
  CHECK(cudaGraphAddChildGraphNode(&child_node, g, &empty, 1, child));

  size_t count = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  REQUIRE(count == 6, "the graph has %zu nodes", count);
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(g, nodes.data(), &count));
  REQUIRE(nodes[0] == set && nodes[5] == child_node, "the nodes come back as other handles");
  size_t roots = 0;
  CHECK(cudaGraphGetRootNodes(g, nullptr, &roots));
  REQUIRE(roots == 1, "%zu root nodes", roots);
  size_t deps = 4;
  cudaGraphNode_t dep[4] = {};
  CHECK(cudaGraphNodeGetDependencies(host, dep, nullptr, &deps));
  REQUIRE(deps == 2 && dep[0] == to_pinned && dep[1] == to_pageable, "the host node depends on %zu nodes", deps);
  size_t edges = 0;
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
  REQUIRE(edges == 6, "%zu edges", edges);
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(host, &type));
  REQUIRE(type == cudaGraphNodeTypeHost, "node type %d", type);
  cudaHostNodeParams back{};
  CHECK(cudaGraphHostNodeGetParams(host, &back));
  REQUIRE(back.fn == CountCall && back.userData == &calls, "host node parameters came back changed");
  cudaMemsetParams mback{};
  CHECK(cudaGraphMemsetNodeGetParams(set, &mback));
  REQUIRE(mback.dst == d && mback.value == 0x42424242 && mback.width == n / 4, "memset node parameters came back changed");

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int i = 0; i < 3; i++) {
    std::memset(pinned, 0, n);
    std::fill(pageable.begin(), pageable.end(), 0);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(pinned[0] == 0x42 && pinned[n - 1] == 0x42, "launch %d: pinned copy %d", i, pinned[0]);
    REQUIRE(pageable[0] == 0x42 && pageable[n - 1] == 0x42, "launch %d: pageable copy %d", i, pageable[0]);
  }
  REQUIRE(calls.load() == 3, "the host node ran %d times", calls.load());
  unsigned char x = 0;
  CHECK(cudaMemcpy(&x, d + n / 2 + 3, 1, cudaMemcpyDeviceToHost));
  REQUIRE(x == 0x07, "the child graph's memset gave %d", x);

  // Executable-graph updates: a new memset value on the executable graph only.
  ms.value = 0x43434343;
  CHECK(cudaGraphExecMemsetNodeSetParams(exec, set, &ms));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(pinned[10] == 0x43 && pageable[10] == 0x43, "the updated memset gave %d/%d", pinned[10], pageable[10]);
  // A disabled node does not run.
  CHECK(cudaGraphNodeSetEnabled(exec, host, 0));
  unsigned enabled = 1;
  CHECK(cudaGraphNodeGetEnabled(exec, host, &enabled));
  REQUIRE(enabled == 0, "the node is still enabled");
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(calls.load() == 4, "a disabled host node ran (%d calls)", calls.load());
  // The graph itself changed, then the executable graph updated from it.
  ms.value = 0x44444444;
  CHECK(cudaGraphMemsetNodeSetParams(set, &ms));
  cudaGraphExecUpdateResultInfo info{};
  CHECK(cudaGraphExecUpdate(exec, g, &info));
  REQUIRE(info.result == cudaGraphExecUpdateSuccess, "update result %d", info.result);
  CHECK(cudaGraphNodeSetEnabled(exec, host, 1));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(pinned[20] == 0x44 && pageable[20] == 0x44, "the updated graph gave %d/%d", pinned[20], pageable[20]);

  // A clone runs on its own.
  cudaGraph_t copy;
  CHECK(cudaGraphClone(&copy, g));
  cudaGraphNode_t in_copy;
  CHECK(cudaGraphNodeFindInClone(&in_copy, host, copy));
  REQUIRE(in_copy != nullptr && in_copy != host, "the cloned node");
  cudaGraphExec_t exec2;
  CHECK(cudaGraphInstantiate(&exec2, copy, 0));
  std::fill(pageable.begin(), pageable.end(), 0);
  CHECK(cudaGraphLaunch(exec2, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(pageable[30] == 0x44, "the clone's copy gave %d", pageable[30]);

  char path[] = "/tmp/remora-graph-dot-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0, "mkstemp");
  close(fd);
  CHECK(cudaGraphDebugDotPrint(g, path, cudaGraphDebugDotFlagsVerbose));
  FILE* f = std::fopen(path, "r");
  REQUIRE(f != nullptr, "no dot file");
  char head[16] = {};
  REQUIRE(std::fread(head, 1, 7, f) == 7 && std::strncmp(head, "digraph", 7) == 0, "the dot file starts with '%s'", head);
  std::fclose(f);
  unlink(path);

  // Removing a node; handles of another kind are refused.
  CHECK(cudaGraphDestroyNode(empty));
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  REQUIRE(count == 5, "%zu nodes after a removal", count);
  EXPECT_ERR(cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(exec)), cudaErrorInvalidValue);
  (void)cudaGetLastError();

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphExecDestroy(exec2));
  CHECK(cudaGraphDestroy(copy));
  CHECK(cudaGraphDestroy(child));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
}

// Copy nodes with a CUDA array: device memory into a 2D array of floats at an offset, out of it
// into other device memory, launched twice with the source changed in between; a box that
// does not fit the array is refused when the node is added.
void ArrayCopyNodes() {
  const size_t w = 16, h = 8;
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  CHECK(cudaMallocArray(&arr, &f, w + 4, h + 2));
  float *src, *dst;
  CHECK(cudaMalloc(&src, w * h * sizeof(float)));
  CHECK(cudaMalloc(&dst, w * h * sizeof(float)));
  std::vector<float> host(w * h), back(w * h);
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaMemcpy3DParms in = {};
  in.srcPtr = make_cudaPitchedPtr(src, w * sizeof(float), w, h);
  in.dstArray = arr;
  in.dstPos = make_cudaPos(3, 1, 0);  // elements of the array
  in.extent = make_cudaExtent(w, h, 1);
  in.kind = cudaMemcpyDeviceToDevice;
  cudaGraphNode_t to_array, from_array;
  CHECK(cudaGraphAddMemcpyNode(&to_array, g, nullptr, 0, &in));
  cudaMemcpy3DParms out = {};
  out.srcArray = arr;
  out.srcPos = make_cudaPos(3, 1, 0);
  out.dstPtr = make_cudaPitchedPtr(dst, w * sizeof(float), w, h);
  out.extent = in.extent;
  out.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaGraphAddMemcpyNode(&from_array, g, &to_array, 1, &out));
  cudaMemcpy3DParms asked = {};
  CHECK(cudaGraphMemcpyNodeGetParams(to_array, &asked));
  REQUIRE(asked.dstArray == arr && asked.dstPos.x == 3 && asked.dstPos.y == 1 && asked.extent.width == w &&
              asked.extent.height == h,
          "the node's parameters came back as array %p at (%zu, %zu), %zu x %zu", static_cast<void*>(asked.dstArray),
          asked.dstPos.x, asked.dstPos.y, asked.extent.width, asked.extent.height);
  cudaMemcpy3DParms too_big = in;
  too_big.dstPos = make_cudaPos(8, 1, 0);
  cudaGraphNode_t bad;
  EXPECT_ERR(cudaGraphAddMemcpyNode(&bad, g, nullptr, 0, &too_big), cudaErrorInvalidValue);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int round = 0; round < 2; round++) {
    for (size_t i = 0; i < host.size(); i++) host[i] = static_cast<float>(i * 3 + round);
    CHECK(cudaMemcpy(src, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaGraphLaunch(exec, 0));
    CHECK(cudaMemcpy(back.data(), dst, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
    REQUIRE(back == host, "round %d: the box through the array's copy nodes came back different", round);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFreeArray(arr));
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
}

// A graph's host function still waiting on the client while the application copies from
// pageable memory into the same stream, behind it: the copy cannot start before the host
// function returns, and the client must still be able to send that it returned (over tcp the
// copy's bytes and the host function's answer share one connection). NVIDIA's
// simpleCudaGraphs does this (a host node, then the next launch's 64 MiB of inputs); it hung.
std::atomic<int> g_slow_calls{0};
void SlowCall(void* arg) {
  ::usleep(100 * 1000);  // the copy's bytes are on their way meanwhile
  static_cast<std::atomic<int>*>(arg)->fetch_add(1);
}

void HostNodeThenLargeCopy() {
  const size_t n = 64u << 20;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char* d;
  CHECK(cudaMalloc(&d, n));
  std::vector<unsigned char> host(n), back(n);
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaHostNodeParams hp = {};
  hp.fn = SlowCall;
  hp.userData = &g_slow_calls;
  cudaGraphNode_t node;
  CHECK(cudaGraphAddHostNode(&node, g, nullptr, 0, &hp));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < n; i += 4093) host[i] = static_cast<unsigned char>(i + round);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(d, host.data(), n, cudaMemcpyHostToDevice, s));
  }
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(g_slow_calls.load() == 3, "the graph's host function ran %d times in 3 launches", g_slow_calls.load());
  CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
  REQUIRE(back == host, "the copy behind the host function came back different");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(d));  // waits for the device: the host function is answered by now
  CHECK(cudaStreamDestroy(s));
}

// NVIDIA's simpleCudaGraphs' shape: a graph copies 64 MiB from pinned memory in (which a
// server over tcp cannot reach: the client sends it before each launch), copies a result out
// to the stack, then a host node reads it; launched three times back to back. The result's
// copy out waits behind the host node, and the next launch's 64 MiB must still get through
// meanwhile (over tcp it hung: the worker kept every request behind that small copy).
double g_seen = 0;
void ReadResult(void* arg) {
  ::usleep(50 * 1000);
  g_seen = *static_cast<double*>(arg);
  g_slow_calls.fetch_add(1);
}

void PinnedInputsBehindHostNode() {
  const size_t n = 64u << 20;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char* in;
  CHECK(cudaMallocHost(&in, n));
  for (size_t i = 0; i < n; i++) in[i] = static_cast<unsigned char>(i * 31);
  double want = 0;
  std::memcpy(&want, in + 4096, sizeof(want));
  unsigned char* d;
  CHECK(cudaMalloc(&d, n));
  double result = -1;
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(in, n, n, 1);
  up.dstPtr = make_cudaPitchedPtr(d, n, n, 1);
  up.extent = make_cudaExtent(n, 1, 1);
  up.kind = cudaMemcpyHostToDevice;
  cudaGraphNode_t copy_in, copy_out, host;
  CHECK(cudaGraphAddMemcpyNode(&copy_in, g, nullptr, 0, &up));
  CHECK(cudaGraphAddMemcpyNode1D(&copy_out, g, &copy_in, 1, &result, d + 4096, sizeof(result), cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp = {};
  hp.fn = ReadResult;
  hp.userData = &result;
  CHECK(cudaGraphAddHostNode(&host, g, &copy_out, 1, &hp));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  int before = g_slow_calls.load();
  for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  REQUIRE(g_slow_calls.load() - before == 3, "the host node ran %d times in 3 launches", g_slow_calls.load() - before);
  REQUIRE(std::memcmp(&result, &want, sizeof(want)) == 0 && std::memcmp(&g_seen, &want, sizeof(want)) == 0,
          "the graph's result did not reach the stack (or the host node) as copied");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(d));
  CHECK(cudaFreeHost(in));
  CHECK(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  int launches = argc > 1 ? std::atoi(argv[1]) : 100;
  CaptureAndReplay(false, launches);
  CaptureAndReplay(true, launches);
  CaptureErrors();
  ExplicitGraphs();
  ArrayCopyNodes();
  HostNodeThenLargeCopy();
  PinnedInputsBehindHostNode();
  std::printf("PASS graphs: captured copies, memsets and a host function replayed %d times (pageable and pinned), "
              "capture errors, explicit graphs, copy nodes with arrays, large copies behind a graph's host node\n",
              launches);
  return 0;
}

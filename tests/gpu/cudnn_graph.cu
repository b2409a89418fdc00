// cuDNN's backend API as cudnn-frontend drives it for a fused graph: Y = (A x B) * scale, a
// batched FP32 matrix product and a pointwise multiplication by a by-value scalar (a host
// pointer in the variant pack, read at each execute - PyTorch's attention passes its scale so).
// Checks the result against the CPU for three scales, one of them changed in place between two
// executes of the same variant pack; rebuilds heuristics and a plan for the graph at each
// steady step and asks what cudnn-frontend asks of them; that a tensor set with the wrong attribute type fails at
// the setter or, where setters are posted (Remora), at the next answered call on what refers
// to it - the graph's finalize; and, under Remora, that an execute of a pack with a host
// pointer that is no by-value tensor is refused.
// Runs natively and through Remora on a GPU, and in CI through the host-emulated backend
// (REMORA_TEST_HOST_BACKEND=1), which emulates this graph. A GPU whose cuDNN offers no engine
// for it: SKIP (exit 77).
#define GPU_TEST_NAME "cudnn_graph"
#include <cuda_profiler_api.h>
#include <cudnn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

namespace {

using gpu_test::fail;

constexpr int64_t M = 8, K = 16, N = 12;
constexpr int kSteady = 10;
enum Uid : int64_t { kA = 1, kB = 2, kT = 3, kScale = 4, kY = 5 };

cudnnBackendDescriptor_t Make(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d;
  CB(cudnnBackendCreateDescriptor(type, &d));
  return d;
}
template <typename T>
void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* v, int64_t n = 1) {
  CB(cudnnBackendSetAttribute(d, name, type, n, v));
}

cudnnBackendDescriptor_t Tensor(int64_t uid, int64_t rows, int64_t cols, bool is_virtual = false, bool by_value = false) {
  auto t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int64_t dims[3] = {1, rows, cols}, strides[3] = {rows * cols, cols, 1}, align = 16;
  bool virt = is_virtual, value = by_value;
  Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type);
  Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims, 3);
  Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides, 3);
  Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
  Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align);
  if (virt) Set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &virt);
  if (value) Set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &value);
  CB(cudnnBackendFinalize(t));
  return t;
}

struct Graph {
  std::vector<cudnnBackendDescriptor_t> owned;  // destroyed at the end, newest first
  cudnnBackendDescriptor_t plan = nullptr, heur = nullptr, graph = nullptr;
  int64_t workspace = 0;
};

// The graph's plan: the first configuration of the heuristics' that finalizes (nullptr plan
// if none does).
Graph Build(cudnnHandle_t h) {
  Graph g;
  auto a = Tensor(kA, M, K), b = Tensor(kB, K, N), t = Tensor(kT, M, N, true), s = Tensor(kScale, 1, 1, false, true),
       y = Tensor(kY, M, N);
  auto mm = Make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  Set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp);
  CB(cudnnBackendFinalize(mm));
  auto mop = Make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  Set(mop, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &a);
  Set(mop, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &b);
  Set(mop, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &t);
  Set(mop, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &mm);
  CB(cudnnBackendFinalize(mop));
  auto pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_MUL;
  Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
  Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &comp);
  CB(cudnnBackendFinalize(pw));
  auto pop = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  Set(pop, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, &pw);
  Set(pop, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &t);
  Set(pop, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &s);
  Set(pop, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y);
  CB(cudnnBackendFinalize(pop));
  auto graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t ops[2] = {mop, pop};
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops, 2);
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &h);
  g.owned = {a, b, t, s, y, mm, mop, pw, pop, graph};
  g.graph = graph;
  if (cudnnBackendFinalize(graph) != CUDNN_STATUS_SUCCESS) return g;
  auto heur = g.heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  g.owned.push_back(heur);
  cudnnBackendHeurMode_t hmode = CUDNN_HEUR_MODE_A;
  Set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph);
  Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &hmode);
  CB(cudnnBackendFinalize(heur));
  int64_t count = 0;
  CB(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<cudnnBackendDescriptor_t> cfgs(static_cast<size_t>(count));
  for (auto& c : cfgs) g.owned.push_back(c = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  int64_t filled = 0;
  if (count > 0)
    CB(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &filled, cfgs.data()));
  for (int64_t i = 0; i < filled && g.plan == nullptr; i++) {
    auto p = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    Set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h);
    Set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfgs[static_cast<size_t>(i)]);
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) g.plan = p;
    g.owned.push_back(p);
  }
  if (g.plan != nullptr) {
    int64_t n = 0;
    CB(cudnnBackendGetAttribute(g.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &g.workspace));
  }
  return g;
}

// What cudnn-frontend asks of a configuration after the heuristics (query_properties, the
// plan's tag and notes, check_support's workspace): its engine's notes and global index, its
// knob choices, its workspace. Returns the engine's global index.
int64_t QueryConfig(cudnnBackendDescriptor_t cfg, std::vector<cudnnBackendDescriptor_t>* made) {
  auto engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  made->push_back(engine);
  int64_t n = 0, index = -1, ws = -1;
  CB(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  if (n != 1) fail("a configuration has %lld engines", (long long)n);
  std::vector<cudnnBackendNumericalNote_t> numeric(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  CB(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                              nullptr));
  if (n < 0 || n > CUDNN_NUMERICAL_NOTE_TYPE_COUNT) fail("an engine has %lld numerical notes", (long long)n);
  CB(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, n, &n, numeric.data()));
  std::vector<cudnnBackendBehaviorNote_t> behavior(CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
  CB(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n,
                              behavior.data()));
  CB(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
  std::vector<cudnnBackendDescriptor_t> knobs(CUDNN_KNOB_TYPE_COUNTS);
  for (auto& k : knobs) made->push_back(k = Make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
  int64_t nknobs = 0;
  CB(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, &nknobs,
                              knobs.data()));
  for (int64_t i = 0; i < nknobs && i < CUDNN_KNOB_TYPE_COUNTS; i++) {
    cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
    int64_t choice = -2;
    CB(cudnnBackendGetAttribute(knobs[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, nullptr, &type));
    CB(cudnnBackendGetAttribute(knobs[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, nullptr, &choice));
    if (type >= CUDNN_KNOB_TYPE_COUNTS) fail("knob %lld has type %d", (long long)i, static_cast<int>(type));
  }
  CB(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
  if (ws < 0) fail("a configuration needs a workspace of %lld bytes", (long long)ws);
  return index;
}

// The build cudnn-frontend makes for each new shape of a graph (PyTorch's attention while
// decoding: one per token): heuristics, every configuration queried, a plan from the first,
// and the plan's own configuration read back. Under Remora only the answered finalizes wait for
// the server (what they computed comes back with them); the queries are answered in the
// client. Checks that the plan's engine is the configuration's.
void FrontendBuild(cudnnHandle_t h, cudnnBackendDescriptor_t graph) {
  std::vector<cudnnBackendDescriptor_t> made;
  auto heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  made.push_back(heur);
  cudnnBackendHeurMode_t hmode = CUDNN_HEUR_MODE_A;
  Set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph);
  Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &hmode);
  CB(cudnnBackendFinalize(heur));
  int64_t count = 0, filled = 0;
  CB(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  if (count < 1) fail("the heuristics found no configuration this time");
  std::vector<cudnnBackendDescriptor_t> cfgs(static_cast<size_t>(count));
  for (auto& c : cfgs) made.push_back(c = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  CB(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &filled, cfgs.data()));
  // (cuDNN's heuristics may fill fewer than they count: 9 of 18 on an H200.)
  if (filled < 1 || filled > count) fail("the heuristics filled %lld of %lld configurations", (long long)filled, (long long)count);
  std::vector<int64_t> index;
  for (int64_t i = 0; i < filled; i++) index.push_back(QueryConfig(cfgs[static_cast<size_t>(i)], &made));
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t chosen = 0;
  for (; chosen < filled && plan == nullptr; chosen++) {  // the first configuration that makes a plan, as Build found
    auto p = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    made.push_back(p);
    Set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h);
    Set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfgs[static_cast<size_t>(chosen)]);
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) plan = p;
  }
  if (plan == nullptr) fail("no configuration of the heuristics made a plan this time");
  chosen--;
  int64_t n = 0, ws = -1;
  CB(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
  if (ws < 0) fail("the plan needs a workspace of %lld bytes", (long long)ws);
  auto back = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  made.push_back(back);
  CB(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &back));
  int64_t again = QueryConfig(back, &made);
  if (again != index[static_cast<size_t>(chosen)])
    fail("the plan's engine is %lld, its configuration's %lld", (long long)again, (long long)index[static_cast<size_t>(chosen)]);
  for (auto it = made.rbegin(); it != made.rend(); ++it) CB(cudnnBackendDestroyDescriptor(*it));
}

// An engine the application builds by index (cudnn-frontend's fallback lists): its notes asked
// for as cudnn-frontend asks (CUDNN_NUMERICAL_NOTE_TYPE_COUNT requested into an array of as many
// as a first query counted) - the array ends where an inaccessible page begins, so a read or
// write past what the library counted fails the test.
void NotesOfAnEngineBuiltByIndex(cudnnBackendDescriptor_t graph, int64_t index) {
  auto engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  Set(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph);
  Set(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, &index);
  CB(cudnnBackendFinalize(engine));
  int64_t n = -1;
  CB(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                              nullptr));
  if (n < 0 || n > CUDNN_NUMERICAL_NOTE_TYPE_COUNT) fail("an engine built by index has %lld numerical notes", (long long)n);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* m = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED || mprotect(static_cast<char*>(m) + page, page, PROT_NONE) != 0) fail("mmap/mprotect: %s", strerror(errno));
  auto* notes = reinterpret_cast<cudnnBackendNumericalNote_t*>(static_cast<char*>(m) + page) - n;
  int64_t again = -1;
  CB(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &again,
                              notes));
  if (again != n) fail("an engine's notes counted %lld, then %lld", (long long)n, (long long)again);
  // "All of them" asked with a huge count: still only what the library counted is written.
  again = -1;
  CB(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, int64_t{1} << 40, &again, notes));
  if (again != n) fail("an engine's notes counted %lld, then %lld when asked for 2^40", (long long)n, (long long)again);
  munmap(m, 2 * page);
  CB(cudnnBackendDestroyDescriptor(engine));
}

cudnnBackendDescriptor_t Pack(void* a, void* b, void* scale, void* y, void* ws) {
  auto pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  void* ptrs[4] = {a, b, scale, y};
  int64_t uids[4] = {kA, kB, kScale, kY};
  Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs, 4);
  Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, 4);
  Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &ws);
  CB(cudnnBackendFinalize(pack));
  return pack;
}

void Check(const char* what, const std::vector<float>& got, const std::vector<double>& a, const std::vector<double>& b, float scale) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double want = 0;
      for (int64_t k = 0; k < K; k++) want += a[i * K + k] * b[k * N + j];
      want *= scale;
      double g = got[i * N + j];
      if (std::fabs(g - want) > 1e-3 * (1 + std::fabs(want)))
        fail("%s: Y[%lld][%lld] = %g, the CPU says %g (scale %g)", what, (long long)i, (long long)j, g, want, scale);
    }
}

// A tensor whose dimensions are set with the wrong attribute type: natively the setter fails;
// where setters are posted, the graph's finalize (the first answered call) does.
void WrongTypeFailsByTheGraph(cudnnHandle_t h) {
  bool failed = false;
  auto t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int32_t dims[3] = {1, 2, 2};
  failed |= cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT32, 3, dims) != CUDNN_STATUS_SUCCESS;
  failed |= cudnnBackendFinalize(t) != CUDNN_STATUS_SUCCESS;
  auto pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_IDENTITY;
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
  Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &prec);
  CB(cudnnBackendFinalize(pw));
  auto y = Tensor(kY, 2, 2);
  auto op = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  failed |= cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw) != 0;
  failed |= cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t) != 0;
  failed |= cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) != 0;
  failed |= cudnnBackendFinalize(op) != CUDNN_STATUS_SUCCESS;
  auto graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  failed |= cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op) != 0;
  failed |= cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) != 0;
  failed |= cudnnBackendFinalize(graph) != CUDNN_STATUS_SUCCESS;
  if (!failed) fail("a tensor with INT32 dimensions made a graph that finalizes");
  CK(cudaDeviceSynchronize());  // reported by the call that answered, not again
  for (auto d : {graph, op, y, pw, t}) CB(cudnnBackendDestroyDescriptor(d));
}

}  // namespace

int main() {
  cudnnHandle_t h = nullptr;
  CB(cudnnCreate(&h));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  CB(cudnnSetStream(h, stream));
  Graph g = Build(h);
  if (g.plan == nullptr) {
    std::printf("SKIP %s: this cuDNN offers no engine for a matmul + by-value scale graph in FP32\n", GPU_TEST_NAME);
    return 77;
  }
  std::vector<double> a(M * K), b(K * N);
  for (size_t i = 0; i < a.size(); i++) a[i] = std::sin(0.37 * static_cast<double>(i)) * 0.5;
  for (size_t i = 0; i < b.size(); i++) b[i] = std::cos(0.11 * static_cast<double>(i)) * 0.5;
  DeviceBuffer<float> da(Convert<float>(a)), db(Convert<float>(b)), dy(M * N);
  DeviceBuffer<char> ws(static_cast<size_t>(g.workspace));
  float scale = 2.0f;
  auto pack = Pack(da.get(), db.get(), &scale, dy.get(), ws.get());
  CB(cudnnBackendExecute(h, g.plan, pack));
  CK(cudaStreamSynchronize(stream));
  Check("scale 2", dy.Read(), a, b, 2.0f);
  scale = -0.5f;  // the same pack: the scalar is read at the execute, not when the pack was made
  CB(cudnnBackendExecute(h, g.plan, pack));
  CK(cudaStreamSynchronize(stream));
  Check("scale -0.5, changed in place", dy.Read(), a, b, -0.5f);
  CB(cudnnBackendDestroyDescriptor(pack));
  double big = 3.0;  // another variable, another pack
  float third = static_cast<float>(big);
  auto pack2 = Pack(da.get(), db.get(), &third, dy.get(), ws.get());
  CB(cudnnBackendExecute(h, g.plan, pack2));
  CK(cudaStreamSynchronize(stream));
  Check("scale 3, a new pack", dy.Read(), a, b, 3.0f);
  CB(cudnnBackendDestroyDescriptor(pack2));
  // The steady state of a training step: a pack made, executed and destroyed per execute, as
  // cudnn-frontend does. Marked for Remora's call census (REMORA_CALL_STATS=FILE), whose
  // interval must show no round trip but the synchronisation at its end (cudnn-census.sh).
  CK(cudaProfilerStart());
  for (int i = 0; i < kSteady; i++) {
    // What the application set is read back as set (under Remora, from the client's mirror).
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_B;
    int64_t n = 0;
    CB(cudnnBackendGetAttribute(g.heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &n, &mode));
    if (n != 1 || mode != CUDNN_HEUR_MODE_A) fail("the heuristics' mode reads back as %d (%lld values)", static_cast<int>(mode), (long long)n);
    FrontendBuild(h, g.graph);
    auto p = Pack(da.get(), db.get(), &scale, dy.get(), ws.get());
    CB(cudnnBackendExecute(h, g.plan, p));
    CB(cudnnBackendDestroyDescriptor(p));
  }
  CK(cudaStreamSynchronize(stream));
  CK(cudaProfilerStop());
  Check("steady executes", dy.Read(), a, b, scale);
  if (OnRemora()) {
    // A host pointer where the graph has a device tensor: never read, never handed to cuDNN.
    std::vector<float> host(M * N, 7.0f);
    auto bad = Pack(da.get(), db.get(), &scale, host.data(), ws.get());
    cudnnStatus_t st = cudnnBackendExecute(h, g.plan, bad);
    if (st != CUDNN_STATUS_BAD_PARAM) fail("an execute with a host pointer for Y answered %s", cudnnGetErrorString(st));
    CK(cudaStreamSynchronize(stream));
    for (float v : host)
      if (v != 7.0f) fail("the host buffer named as Y was written");
    CB(cudnnBackendDestroyDescriptor(bad));
  }
  {
    // The plan's engine index, asked as cudnn-frontend asks it.
    auto cfg = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR), engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0, index = -1;
    CB(cudnnBackendGetAttribute(g.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &cfg));
    CB(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
    CB(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
    NotesOfAnEngineBuiltByIndex(g.graph, index);
    CB(cudnnBackendDestroyDescriptor(engine));
    CB(cudnnBackendDestroyDescriptor(cfg));
  }
  WrongTypeFailsByTheGraph(h);
  for (auto it = g.owned.rbegin(); it != g.owned.rend(); ++it) CB(cudnnBackendDestroyDescriptor(*it));
  CB(cudnnDestroy(h));
  CK(cudaStreamDestroy(stream));
  gpu_test::pass("matmul x by-value scale graph matches the CPU for three scales (one changed in place); a wrongly typed "
                 "attribute fails by the graph's finalize%s", OnRemora() ? "; a host pointer for a device tensor refused" : "");
  return 0;
}

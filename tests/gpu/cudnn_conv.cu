// cuDNN convolutions against a CPU reference (fp32, NCHW, 2x3x9x8 input, 4 filters of 3x3,
// padding 1, stride 1): forward, backward data and backward filter through the legacy API
// (descriptors, cudnnGetConvolution*Algorithm_v7, cudnnFind*, workspaces sized by the
// library, on a stream of the application's) and through the backend (graph) API as
// cudnn-frontend drives it (tensor, convolution and operation descriptors, an operation
// graph, engine heuristics whose results fill engine configurations the application made,
// execution plans, variant packs with a workspace); spatial batch normalization (training, as
// PyTorch's BatchNorm2d calls it). Under Remora, a variant pack holding a
// pointer the application never allocated is refused.
// On Remora's host-emulated backend (REMORA_TEST_HOST_BACKEND=1, CI), which does not emulate
// convolutions, it checks that they answer CUDNN_STATUS_NOT_SUPPORTED, a graph's at its
// (answered) finalize though its parts were finalized posted.
#define GPU_TEST_NAME "cudnn_conv"
#include <cudnn.h>

#include <cmath>
#include <functional>
#include <vector>

#include "gpu_test.h"
#include "lib_test.h"

namespace {

using gpu_test::fail;

constexpr int N = 2, C = 3, H = 9, W = 8, K = 4, R = 3, S = 3, PAD = 1;
constexpr int P = H, Q = W;  // output height and width (stride 1, padding 1, 3x3)

int Xi(int n, int c, int h, int w) { return ((n * C + c) * H + h) * W + w; }
int Wi(int k, int c, int r, int s) { return ((k * C + c) * R + r) * S + s; }
int Yi(int n, int k, int p, int q) { return ((n * K + k) * P + p) * Q + q; }

// The three convolutions on the CPU (cross-correlation, as cuDNN's CUDNN_CROSS_CORRELATION).
std::vector<double> Forward(const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(N * K * P * Q, 0.0);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          double acc = 0;
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < S; s++) {
                int h = p + r - PAD, ww = q + s - PAD;
                if (h >= 0 && h < H && ww >= 0 && ww < W) acc += x[Xi(n, c, h, ww)] * w[Wi(k, c, r, s)];
              }
          y[Yi(n, k, p, q)] = acc;
        }
  return y;
}
std::vector<double> BackwardData(const std::vector<double>& dy, const std::vector<double>& w) {
  std::vector<double> dx(N * C * H * W, 0.0);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++)
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < S; s++) {
                int h = p + r - PAD, ww = q + s - PAD;
                if (h >= 0 && h < H && ww >= 0 && ww < W) dx[Xi(n, c, h, ww)] += dy[Yi(n, k, p, q)] * w[Wi(k, c, r, s)];
              }
  return dx;
}
std::vector<double> BackwardFilter(const std::vector<double>& x, const std::vector<double>& dy) {
  std::vector<double> dw(K * C * R * S, 0.0);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++)
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < S; s++) {
                int h = p + r - PAD, ww = q + s - PAD;
                if (h >= 0 && h < H && ww >= 0 && ww < W) dw[Wi(k, c, r, s)] += dy[Yi(n, k, p, q)] * x[Xi(n, c, h, ww)];
              }
  return dw;
}

std::vector<double> Random(size_t n, unsigned seed) {
  std::vector<double> v(n);
  unsigned s = seed;
  for (auto& e : v) {
    s = s * 1664525u + 1013904223u;
    e = static_cast<double>((s >> 8) % 2001) / 1000.0 - 1.0;
  }
  return v;
}

void Compare(const char* what, const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) fail("%s: %zu results, expected %zu", what, got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++)
    if (std::fabs(got[i] - want[i]) > 1e-3 * (1 + std::fabs(want[i])))  // TF32 is off: fp32 math
      fail("%s: element %zu is %g, expected %g", what, i, got[i], want[i]);
}

// ---- the legacy API -------------------------------------------------------------------------
struct Legacy {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
};

Legacy MakeLegacy() {
  Legacy d;
  CB(cudnnCreateTensorDescriptor(&d.x));
  CB(cudnnCreateTensorDescriptor(&d.y));
  CB(cudnnCreateFilterDescriptor(&d.w));
  CB(cudnnCreateConvolutionDescriptor(&d.conv));
  CB(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  CB(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, S));
  CB(cudnnSetConvolution2dDescriptor(d.conv, PAD, PAD, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CB(cudnnSetConvolutionMathType(d.conv, CUDNN_FMA_MATH));
  int n, c, h, w;
  CB(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &c, &h, &w));
  if (n != N || c != K || h != P || w != Q) fail("output dimensions %dx%dx%dx%d, expected %dx%dx%dx%d", n, c, h, w, N, K, P, Q);
  int dims[4] = {N, K, P, Q}, strides[4] = {K * P * Q, P * Q, Q, 1};
  CB(cudnnSetTensorNdDescriptor(d.y, CUDNN_DATA_FLOAT, 4, dims, strides));
  size_t bytes = 0;
  CB(cudnnGetTensorSizeInBytes(d.y, &bytes));
  if (bytes != sizeof(float) * N * K * P * Q) fail("cudnnGetTensorSizeInBytes: %zu", bytes);
  return d;
}

void FreeLegacy(const Legacy& d) {
  CB(cudnnDestroyConvolutionDescriptor(d.conv));
  CB(cudnnDestroyFilterDescriptor(d.w));
  CB(cudnnDestroyTensorDescriptor(d.y));
  CB(cudnnDestroyTensorDescriptor(d.x));
}

void RunLegacy(cudnnHandle_t h, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy) {
  Legacy d = MakeLegacy();
  DeviceBuffer<float> dx_in(Convert<float>(x)), dw_in(Convert<float>(w)), ddy(Convert<float>(dy));
  DeviceBuffer<float> y_out(N * K * P * Q), dx_out(N * C * H * W), dw_out(K * C * R * S);
  const float one = 1.0f, zero = 0.0f;

  int max = 0, got = 0;
  CB(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
  if (max < 1) fail("cudnnGetConvolutionForwardAlgorithmMaxCount: %d", max);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(max);
  CB(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, max, &got, fwd.data()));
  if (got < 1) fail("cudnnGetConvolutionForwardAlgorithm_v7 found no algorithm");
  size_t ws_bytes = 0;
  CB(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, fwd[0].algo, &ws_bytes));
  DeviceBuffer<char> ws(ws_bytes);
  CB(cudnnConvolutionForward(h, &one, d.x, dx_in.get(), d.w, dw_in.get(), d.conv, fwd[0].algo, ws.get(), ws_bytes, &zero, d.y,
                             y_out.get()));
  Compare("legacy forward", y_out.Read(), Forward(x, w));

  // Measured choice: cudnnFind runs the algorithms (allocating its own workspace).
  std::vector<cudnnConvolutionFwdAlgoPerf_t> found(max);
  CB(cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, max, &got, found.data()));
  if (got < 1 || found[0].status != CUDNN_STATUS_SUCCESS) fail("cudnnFindConvolutionForwardAlgorithm found nothing");

  CB(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> bwd(max);
  CB(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, max, &got, bwd.data()));
  if (got < 1) fail("no backward-data algorithm");
  CB(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, bwd[0].algo, &ws_bytes));
  DeviceBuffer<char> ws2(ws_bytes);
  CB(cudnnConvolutionBackwardData(h, &one, d.w, dw_in.get(), d.y, ddy.get(), d.conv, bwd[0].algo, ws2.get(), ws_bytes, &zero, d.x,
                                  dx_out.get()));
  Compare("legacy backward data", dx_out.Read(), BackwardData(dy, w));

  CB(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> bwf(max);
  CB(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, max, &got, bwf.data()));
  if (got < 1) fail("no backward-filter algorithm");
  CB(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, bwf[0].algo, &ws_bytes));
  DeviceBuffer<char> ws3(ws_bytes);
  CB(cudnnConvolutionBackwardFilter(h, &one, d.x, dx_in.get(), d.y, ddy.get(), d.conv, bwf[0].algo, ws3.get(), ws_bytes, &zero,
                                    d.w, dw_out.get()));
  Compare("legacy backward filter", dw_out.Read(), BackwardFilter(x, dy));
  FreeLegacy(d);
}

// Spatial batch normalization, training (cudnnBatchNormalizationForwardTrainingEx, as
// PyTorch's BatchNorm2d): y = (x - mean) / sqrt(var + eps) * scale + bias per channel.
void RunBatchNorm(cudnnHandle_t h, const std::vector<double>& x) {
  cudnnTensorDescriptor_t xd, bn;
  CB(cudnnCreateTensorDescriptor(&xd));
  CB(cudnnCreateTensorDescriptor(&bn));
  CB(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  CB(cudnnDeriveBNTensorDescriptor(bn, xd, CUDNN_BATCHNORM_SPATIAL));
  std::vector<double> scale = Random(C, 4), bias = Random(C, 5);
  DeviceBuffer<float> dx(Convert<float>(x)), dy(N * C * H * W), dscale(Convert<float>(scale)), dbias(Convert<float>(bias));
  DeviceBuffer<float> run_mean(C), run_var(C), save_mean(C), save_inv(C);
  size_t ws_bytes = 0, reserve_bytes = 0;
  CB(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, xd, nullptr, xd, bn,
                                                              nullptr, &ws_bytes));
  CB(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, nullptr, xd,
                                                          &reserve_bytes));
  DeviceBuffer<char> ws(ws_bytes), reserve(reserve_bytes);
  const float one = 1.0f, zero = 0.0f;
  const double eps = 1e-5;
  CB(cudnnBatchNormalizationForwardTrainingEx(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &one, &zero, xd, dx.get(), nullptr,
                                              nullptr, xd, dy.get(), bn, dscale.get(), dbias.get(), 1.0, run_mean.get(),
                                              run_var.get(), eps, save_mean.get(), save_inv.get(), nullptr, ws.get(), ws_bytes,
                                              reserve.get(), reserve_bytes));
  std::vector<double> want(x.size()), mean(C, 0.0), var(C, 0.0);
  const int per = N * H * W;
  for (int c = 0; c < C; c++) {
    for (int n = 0; n < N; n++)
      for (int i = 0; i < H * W; i++) mean[c] += x[(n * C + c) * H * W + i] / per;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < H * W; i++) var[c] += (x[(n * C + c) * H * W + i] - mean[c]) * (x[(n * C + c) * H * W + i] - mean[c]) / per;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < H * W; i++)
        want[(n * C + c) * H * W + i] = (x[(n * C + c) * H * W + i] - mean[c]) / std::sqrt(var[c] + eps) * scale[c] + bias[c];
  }
  Compare("batch norm (training) output", dy.Read(), want);
  Compare("batch norm saved mean", save_mean.Read(), mean);
  CB(cudnnDestroyTensorDescriptor(bn));
  CB(cudnnDestroyTensorDescriptor(xd));
}

// ---- the backend API ------------------------------------------------------------------------
cudnnBackendDescriptor_t Make(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d;
  CB(cudnnBackendCreateDescriptor(type, &d));
  return d;
}
template <typename T>
void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* v, int64_t n = 1) {
  CB(cudnnBackendSetAttribute(d, name, type, n, v));
}

enum Uid : int64_t { kX = 'x', kW = 'w', kY = 'y' };

cudnnBackendDescriptor_t Tensor(int64_t uid, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  auto t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int64_t dims[4] = {d0, d1, d2, d3}, strides[4] = {d1 * d2 * d3, d2 * d3, d3, 1}, align = 16;
  Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type);
  Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims, 4);
  Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides, 4);
  Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
  Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align);
  CB(cudnnBackendFinalize(t));
  return t;
}

// One convolution of `op_type` through a graph: `bind` sets the operation's attributes; the
// first engine configuration the heuristics offer that finalizes into a plan runs it.
void RunGraph(cudnnHandle_t h, cudnnBackendDescriptorType_t op_type,
              const std::function<void(cudnnBackendDescriptor_t op, cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t x,
                                       cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y)>& bind,
              void* px, void* pw, void* py, bool expect_refusal = false) {
  auto x = Tensor(kX, N, C, H, W), w = Tensor(kW, K, C, R, S), y = Tensor(kY, N, K, P, Q);
  auto conv = Make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t dims = 2, ones[2] = {1, 1}, pads[2] = {PAD, PAD};
  Set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp);
  Set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode);
  Set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &dims);
  Set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, ones, 2);
  Set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, ones, 2);
  Set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pads, 2);
  Set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pads, 2);
  CB(cudnnBackendFinalize(conv));

  auto op = Make(op_type);
  bind(op, conv, x, w, y);
  CB(cudnnBackendFinalize(op));
  auto graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, &op);
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &h);
  CB(cudnnBackendFinalize(graph));

  auto heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t hmode = CUDNN_HEUR_MODE_A;
  Set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph);
  Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &hmode);
  CB(cudnnBackendFinalize(heur));
  int64_t count = 0;
  CB(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  if (count < 1) fail("the engine heuristics offer no configuration");
  std::vector<cudnnBackendDescriptor_t> cfgs(count);
  for (auto& c : cfgs) c = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t filled = 0;
  CB(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &filled, cfgs.data()));
  if (filled < 1 || filled > count) fail("the heuristics filled %lld of %lld configurations", (long long)filled, (long long)count);

  cudnnBackendDescriptor_t plan = nullptr;
  for (int64_t i = 0; i < filled && plan == nullptr; i++) {
    auto p = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    Set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h);
    Set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfgs[i]);
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) plan = p;
    else CB(cudnnBackendDestroyDescriptor(p));
  }
  if (plan == nullptr) fail("no engine configuration of %lld finalizes into a plan", (long long)filled);
  int64_t ws_bytes = -1, n = 0;
  CB(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws_bytes));
  if (n != 1 || ws_bytes < 0) fail("the plan's workspace size reads as %lld (%lld values)", (long long)ws_bytes, (long long)n);
  DeviceBuffer<char> ws(ws_bytes);

  auto pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  void* ptrs[3] = {px, pw, py};
  int64_t uids[3] = {kX, kW, kY};
  void* wsp = ws.get();
  Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs, 3);
  Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, 3);
  Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &wsp);
  CB(cudnnBackendFinalize(pack));
  if (expect_refusal) {
    // Under Remora the pack's setters, finalize and execute are posted: the client refuses the
    // execute at once (the foreign pointer is neither the session's device memory nor a
    // by-value tensor of the plan), or the worker does and the next synchronising call says so.
    cudnnStatus_t st = cudnnBackendExecute(h, plan, pack);
    cudaError_t sync = cudaDeviceSynchronize();
    if (st == CUDNN_STATUS_SUCCESS && sync == cudaSuccess)
      fail("an execute of a variant pack with a foreign pointer was accepted and its stream synchronised cleanly");
  } else {
    CB(cudnnBackendExecute(h, plan, pack));
  }
  for (auto d : {pack, plan}) CB(cudnnBackendDestroyDescriptor(d));
  for (auto c : cfgs) CB(cudnnBackendDestroyDescriptor(c));
  for (auto d : {heur, graph, op, conv, y, w, x}) CB(cudnnBackendDestroyDescriptor(d));
}

void RunBackend(cudnnHandle_t h, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy) {
  DeviceBuffer<float> dx_in(Convert<float>(x)), dw_in(Convert<float>(w)), ddy(Convert<float>(dy));
  DeviceBuffer<float> y_out(N * K * P * Q), dx_out(N * C * H * W), dw_out(K * C * R * S);
  const float one = 1.0f, zero = 0.0f;
  RunGraph(h, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, [&](auto op, auto conv, auto xd, auto wd, auto yd) {
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, &xd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, &wd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, &yd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &conv);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &one);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &zero);
  }, dx_in.get(), dw_in.get(), y_out.get());
  Compare("backend forward", y_out.Read(), Forward(x, w));
  RunGraph(h, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, [&](auto op, auto conv, auto xd, auto wd, auto yd) {
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, &xd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, &wd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, &yd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &conv);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, &one);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, &zero);
  }, dx_out.get(), dw_in.get(), ddy.get());
  Compare("backend backward data", dx_out.Read(), BackwardData(dy, w));
  RunGraph(h, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, [&](auto op, auto conv, auto xd, auto wd, auto yd) {
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, &xd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, &wd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, &yd);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &conv);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, &one);
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, &zero);
  }, dx_in.get(), dw_out.get(), ddy.get());
  Compare("backend backward filter", dw_out.Read(), BackwardFilter(x, dy));
  if (OnRemora()) {
    // A pointer the application never allocated (host memory) never reaches the library.
    std::vector<float> host(N * K * P * Q);
    RunGraph(h, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, [&](auto op, auto conv, auto xd, auto wd, auto yd) {
      Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, &xd);
      Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, &wd);
      Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, &yd);
      Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &conv);
      Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &one);
      Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &zero);
    }, dx_in.get(), dw_in.get(), host.data(), true);
  }
}

}  // namespace

int main() {
  cudnnHandle_t h = nullptr;
  cudnnStatus_t created = cudnnCreate(&h);
  if (std::getenv("REMORA_TEST_HOST_BACKEND") != nullptr) {
    // Remora's host-emulated backend emulates cuDNN's handles and the backend API's pointwise
    // and matmul graphs (cudnn_graph.cu), not convolutions: they say so, at the first call
    // that answers.
    CB(created);
    int count = 0;
    cudnnStatus_t st = cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count);
    if (st != CUDNN_STATUS_NOT_SUPPORTED) fail("a legacy convolution query on the host backend answered %s", cudnnGetErrorString(st));
    auto conv = Make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    auto op = Make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    CB(cudnnBackendFinalize(conv));  // posted: its failure moves to what refers to it
    Set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &conv);
    CB(cudnnBackendFinalize(op));
    auto graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, &op);
    st = cudnnBackendFinalize(graph);  // answered
    if (st != CUDNN_STATUS_NOT_SUPPORTED) fail("a convolution graph on the host backend finalized as %s", cudnnGetErrorString(st));
    CK(cudaDeviceSynchronize());  // reported once, by the graph
    for (auto d : {graph, op, conv}) CB(cudnnBackendDestroyDescriptor(d));
    CB(cudnnDestroy(h));
    gpu_test::pass("host backend: cuDNN convolutions answer CUDNN_STATUS_NOT_SUPPORTED (the legacy API; a graph, at its finalize)");
    return 0;
  }
  CB(created);
  size_t version = cudnnGetVersion();
  int major = 0;
  CB(cudnnGetProperty(MAJOR_VERSION, &major));
  if (version < 90000 || major != 9) fail("cuDNN version %zu, major %d: expected 9.x", version, major);
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  CB(cudnnSetStream(h, stream));
  cudaStream_t got = nullptr;
  CB(cudnnGetStream(h, &got));
  if (got != stream) fail("cudnnGetStream answered another stream");

  auto x = Random(N * C * H * W, 1), w = Random(K * C * R * S, 2), dy = Random(N * K * P * Q, 3);
  RunLegacy(h, x, w, dy);
  RunBatchNorm(h, x);
  RunBackend(h, x, w, dy);
  CB(cudnnDestroy(h));
  CK(cudaStreamDestroy(stream));
  gpu_test::pass("cuDNN %zu: legacy and backend-API convolution forward, backward data and backward filter, and batch norm match the CPU%s",
                 version, OnRemora() ? "; a foreign variant-pack pointer refused" : "");
  return 0;
}

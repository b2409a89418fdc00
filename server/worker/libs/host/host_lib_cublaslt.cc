// The host backend's cuBLASLt: handles, matmul descriptors, matrix layouts and preferences
// keep their attributes as the real library does; one heuristic answer; and cublasLtMatmul -
// D = alpha op(A) op(B) + beta C over real 16/32/64-bit floats, column- or row-major, batched,
// with the bias, ReLU and GELU epilogues - computed on the CPU in stream order, in all pointer
// modes. For CI's tests of the whole path; everything else answers CUBLAS_STATUS_NOT_SUPPORTED.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "blas_hooks.h"
#include "cublasLt_api.h"
#include "worker/backend/host/host_device.h"
#include "worker/libs/host/host_libraries.h"
#include "worker/backend/host/host_numeric.h"

namespace remora::worker {
namespace {

using api::blas::TypeBytes;

// Attribute values as the application set them (bytes by attribute).
struct Attributes {
  std::map<int, std::vector<std::byte>> values;
  template <typename T>
  T Get(int a, T fallback) const {
    auto it = values.find(a);
    if (it == values.end() || it->second.size() < sizeof(T)) return fallback;
    T v;
    std::memcpy(&v, it->second.data(), sizeof(T));
    return v;
  }
  template <typename T>
  void Set(int a, T v) {
    values[a].assign(reinterpret_cast<const std::byte*>(&v), reinterpret_cast<const std::byte*>(&v) + sizeof(T));
  }
  cublasStatus_t Read(int a, void* buf, size_t size, size_t* written) const {
    auto it = values.find(a);
    if (it == values.end()) return CUBLAS_STATUS_INVALID_VALUE;
    if (written) *written = it->second.size();
    if (size == 0 && buf == nullptr) return CUBLAS_STATUS_SUCCESS;
    if (buf == nullptr || size < it->second.size()) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, it->second.data(), it->second.size());
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t Write(int a, const void* buf, size_t size) {
    if (buf == nullptr || size == 0 || size > 64) return CUBLAS_STATUS_INVALID_VALUE;
    values[a].assign(static_cast<const std::byte*>(buf), static_cast<const std::byte*>(buf) + size);
    return CUBLAS_STATUS_SUCCESS;
  }
};

struct EmuLt {};
struct EmuDesc {
  Attributes a;
};
struct EmuLayout {
  Attributes a;
};
struct EmuPref {
  Attributes a;
};

// A matrix of a layout, as host memory: element (i, j) of op(M) for one batch.
struct LayoutView {
  std::byte* base = nullptr;
  cudaDataType type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;
  bool row_major = false;
  double At(int64_t b, int64_t i, int64_t j, bool transposed) const {
    if (transposed) std::swap(i, j);
    int64_t at = b * stride + (row_major ? i * ld + j : i + j * ld);
    return numeric::Load(type, base, at);
  }
  void Set(int64_t b, int64_t i, int64_t j, double v) const {
    int64_t at = b * stride + (row_major ? i * ld + j : i + j * ld);
    numeric::Store(type, base, at, v);
  }
};

double Gelu(double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

class HostCublasLt final : public gen::cublasLt::Api {
 public:
  explicit HostCublasLt(EmulatedDevice& d) : d_(d) {}
  ~HostCublasLt() override {
    for (auto* o : handles_) delete o;
    for (auto* o : descs_) delete o;
    for (auto* o : layouts_) delete o;
    for (auto* o : prefs_) delete o;
  }

  cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) override { return Make(handles_, h); }
  cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) override { return Drop(handles_, h); }
  cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) override {
    switch (type) {
      case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
      case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
      case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // cuBLASLt ships with cuBLAS, under its version.
  size_t cublasLtGetVersion() override { return CUBLAS_VERSION; }

  cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) override {
    auto* desc = new EmuDesc;
    desc->a.Set<int32_t>(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute);
    desc->a.Set<int32_t>(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale);
    desc->a.Set<int32_t>(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_HOST);
    desc->a.Set<int32_t>(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
    desc->a.Set<int32_t>(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    desc->a.Set<uint32_t>(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
    desc->a.Set<uint64_t>(CUBLASLT_MATMUL_DESC_BIAS_POINTER, 0);
    desc->a.Set<int32_t>(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, -1);
    descs_.insert(desc);
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(desc);
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) override { return Drop(descs_, d); }
  cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                size_t size) override {
    auto* desc = Of<EmuDesc>(descs_, d);
    return desc ? desc->a.Write(attr, buf, size) : CUBLAS_STATUS_NOT_INITIALIZED;
  }
  cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, void* buf,
                                                size_t size, size_t* written) override {
    auto* desc = Of<EmuDesc>(descs_, d);
    if (!desc) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc->a.values.count(attr) && IsPointerOrModeAttribute(attr)) desc->a.Set<uint64_t>(attr, 0);
    return desc->a.Read(attr, buf, size, written);
  }

  cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                            int64_t ld) override {
    auto* layout = new EmuLayout;
    layout->a.Set<uint32_t>(CUBLASLT_MATRIX_LAYOUT_TYPE, type);
    layout->a.Set<int32_t>(CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_COL);
    layout->a.Set<uint64_t>(CUBLASLT_MATRIX_LAYOUT_ROWS, rows);
    layout->a.Set<uint64_t>(CUBLASLT_MATRIX_LAYOUT_COLS, cols);
    layout->a.Set<int64_t>(CUBLASLT_MATRIX_LAYOUT_LD, ld);
    layout->a.Set<int32_t>(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1);
    layout->a.Set<int64_t>(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
    layouts_.insert(layout);
    *l = reinterpret_cast<cublasLtMatrixLayout_t>(layout);
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) override { return Drop(layouts_, l); }
  cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                  const void* buf, size_t size) override {
    auto* layout = Of<EmuLayout>(layouts_, l);
    return layout ? layout->a.Write(attr, buf, size) : CUBLAS_STATUS_NOT_INITIALIZED;
  }
  cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                  size_t size, size_t* written) override {
    auto* layout = Of<EmuLayout>(layouts_, l);
    return layout ? layout->a.Read(attr, buf, size, written) : CUBLAS_STATUS_NOT_INITIALIZED;
  }

  cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) override {
    auto* pref = new EmuPref;
    pref->a.Set<uint64_t>(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, 0);
    prefs_.insert(pref);
    *p = reinterpret_cast<cublasLtMatmulPreference_t>(pref);
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) override { return Drop(prefs_, p); }
  cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                                                      const void* buf, size_t size) override {
    auto* pref = Of<EmuPref>(prefs_, p);
    return pref ? pref->a.Write(attr, buf, size) : CUBLAS_STATUS_NOT_INITIALIZED;
  }
  cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                                                      void* buf, size_t size, size_t* written) override {
    auto* pref = Of<EmuPref>(prefs_, p);
    return pref ? pref->a.Read(attr, buf, size, written) : CUBLAS_STATUS_NOT_INITIALIZED;
  }

  // One algorithm, which needs no workspace: the emulation's.
  cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                                cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                                cublasLtMatmulPreference_t p, int requested,
                                                cublasLtMatmulHeuristicResult_t* results, int* returned) override {
    if (!Handle(h) || !Of<EmuDesc>(descs_, d) || !Of<EmuLayout>(layouts_, a) || !Of<EmuLayout>(layouts_, b) ||
        !Of<EmuLayout>(layouts_, c) || !Of<EmuLayout>(layouts_, dd) || !Of<EmuPref>(prefs_, p))
      return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    std::memset(&results[0], 0, sizeof(results[0]));
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
  }

  cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dsc, const void* alpha, const void* A,
                                cublasLtMatrixLayout_t Al, const void* B, cublasLtMatrixLayout_t Bl, const void* beta,
                                const void* C, cublasLtMatrixLayout_t Cl, void* D, cublasLtMatrixLayout_t Dl,
                                const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) override {
    auto* desc = Of<EmuDesc>(descs_, dsc);
    auto *al = Of<EmuLayout>(layouts_, Al), *bl = Of<EmuLayout>(layouts_, Bl), *cl = Of<EmuLayout>(layouts_, Cl),
         *dl = Of<EmuLayout>(layouts_, Dl);
    if (!Handle(h) || !desc || !al || !bl || !cl || !dl) return CUBLAS_STATUS_NOT_INITIALIZED;
    auto scale = static_cast<cudaDataType>(desc->a.Get<int32_t>(CUBLASLT_MATMUL_DESC_SCALE_TYPE, CUDA_R_32F));
    int32_t mode = desc->a.Get<int32_t>(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_HOST);
    bool ta = desc->a.Get<int32_t>(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N) != CUBLAS_OP_N;
    bool tb = desc->a.Get<int32_t>(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N) != CUBLAS_OP_N;
    uint32_t epilogue = desc->a.Get<uint32_t>(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
    uint64_t bias = desc->a.Get<uint64_t>(CUBLASLT_MATMUL_DESC_BIAS_POINTER, 0);
    if (mode != CUBLASLT_POINTER_MODE_HOST && mode != CUBLASLT_POINTER_MODE_DEVICE) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_BIAS && epilogue != CUBLASLT_EPILOGUE_RELU &&
        epilogue != CUBLASLT_EPILOGUE_RELU_BIAS && epilogue != CUBLASLT_EPILOGUE_GELU && epilogue != CUBLASLT_EPILOGUE_GELU_BIAS)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!numeric::Supported(scale)) return CUBLAS_STATUS_NOT_SUPPORTED;
    LayoutView va, vb, vc, vd;
    // C may be NULL where it is not read (beta 0); the real library then reads none of it.
    const bool no_c = C == nullptr;
    if (!View(*al, A, &va) || !View(*bl, B, &vb) || (!no_c && !View(*cl, C, &vc)) || !View(*dl, D, &vd))
      return CUBLAS_STATUS_INVALID_VALUE;
    int64_t m = vd.rows, n = vd.cols, k = ta ? va.rows : va.cols;
    if ((ta ? va.cols : va.rows) != m || (tb ? vb.cols : vb.rows) != k || (tb ? vb.rows : vb.cols) != n ||
        (!no_c && (vc.rows != m || vc.cols != n)))
      return CUBLAS_STATUS_INVALID_VALUE;
    int64_t batch = dl->a.Get<int32_t>(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1);
    // Scalars: read now (host mode) or in stream order (device mode); bias in stream order.
    const std::byte *alpha_dev = nullptr, *beta_dev = nullptr, *bias_host = nullptr;
    double alpha_v = 0, beta_v = 0;
    if (mode == CUBLASLT_POINTER_MODE_DEVICE) {
      auto pa = d_.Translate(reinterpret_cast<DevPtr>(alpha), TypeBytes(scale));
      auto pb = d_.Translate(reinterpret_cast<DevPtr>(beta), TypeBytes(scale));
      if (!pa.ok() || !pb.ok()) return CUBLAS_STATUS_INVALID_VALUE;
      alpha_dev = *pa;
      beta_dev = *pb;
    } else {
      alpha_v = numeric::Load(scale, alpha, 0);
      beta_v = numeric::Load(scale, beta, 0);
      if (no_c && beta_v != 0) return CUBLAS_STATUS_INVALID_VALUE;  // the emulation's own refusal
    }
    cudaDataType bias_type = vd.type;
    if (bias != 0) {
      auto pbias = d_.Translate(bias, static_cast<uint64_t>(m) * TypeBytes(bias_type));
      if (!pbias.ok()) return CUBLAS_STATUS_INVALID_VALUE;
      bias_host = *pbias;
    }
    bool use_bias = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
                    epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
    if (use_bias && bias_host == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    bool relu = epilogue == CUBLASLT_EPILOGUE_RELU || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
    bool gelu = epilogue == CUBLASLT_EPILOGUE_GELU || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
    Status st = d_.InOrder(static_cast<DStream>(stream), [=] {
      double av = alpha_dev ? numeric::Load(scale, alpha_dev, 0) : alpha_v;
      double bv = beta_dev ? numeric::Load(scale, beta_dev, 0) : beta_v;
      for (int64_t b = 0; b < batch; b++)
        for (int64_t j = 0; j < n; j++)
          for (int64_t i = 0; i < m; i++) {
            double acc = 0;
            for (int64_t l = 0; l < k; l++) acc += va.At(b, i, l, ta) * vb.At(b, l, j, tb);
            double v = av * acc + (bv == 0 || no_c ? 0 : bv * vc.At(b, i, j, false));
            if (use_bias) v += numeric::Load(bias_type, bias_host, i);
            if (relu) v = v > 0 ? v : 0;
            if (gelu) v = Gelu(v);
            vd.Set(b, i, j, v);
          }
    });
    return st.ok() ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
  }

 private:
  static bool IsPointerOrModeAttribute(int a) {
    return a == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER || a == CUBLASLT_MATMUL_DESC_B_SCALE_POINTER ||
           a == CUBLASLT_MATMUL_DESC_C_SCALE_POINTER || a == CUBLASLT_MATMUL_DESC_D_SCALE_POINTER ||
           a == CUBLASLT_MATMUL_DESC_AMAX_D_POINTER || a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER ||
           a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER || a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER ||
           a == CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER || a == CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE;
  }
  template <typename T, typename H>
  cublasStatus_t Make(std::set<T*>& set, H* out) {
    auto* o = new T;
    set.insert(o);
    *out = reinterpret_cast<H>(o);
    return CUBLAS_STATUS_SUCCESS;
  }
  template <typename T, typename H>
  cublasStatus_t Drop(std::set<T*>& set, H h) {
    auto* o = reinterpret_cast<T*>(h);
    if (set.erase(o) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete o;
    return CUBLAS_STATUS_SUCCESS;
  }
  // Its own handles, and the emulated cuBLAS's (a cublasHandle_t serves as a cublasLtHandle_t).
  bool Handle(cublasLtHandle_t h) { return Of<EmuLt>(handles_, h) != nullptr || d_.IsBlasHandle(h); }
  template <typename T, typename H>
  T* Of(std::set<T*>& set, H h) {
    auto* o = reinterpret_cast<T*>(h);
    return set.count(o) ? o : nullptr;
  }
  bool View(const EmuLayout& l, const void* p, LayoutView* v) {
    v->type = static_cast<cudaDataType>(l.a.Get<uint32_t>(CUBLASLT_MATRIX_LAYOUT_TYPE, CUDA_R_32F));
    if (!numeric::Supported(v->type)) return false;
    v->rows = static_cast<int64_t>(l.a.Get<uint64_t>(CUBLASLT_MATRIX_LAYOUT_ROWS, 0));
    v->cols = static_cast<int64_t>(l.a.Get<uint64_t>(CUBLASLT_MATRIX_LAYOUT_COLS, 0));
    v->ld = l.a.Get<int64_t>(CUBLASLT_MATRIX_LAYOUT_LD, 0);
    v->stride = l.a.Get<int64_t>(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
    int32_t order = l.a.Get<int32_t>(CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_COL);
    if (order != CUBLASLT_ORDER_COL && order != CUBLASLT_ORDER_ROW) return false;
    v->row_major = order == CUBLASLT_ORDER_ROW;
    int64_t batch = l.a.Get<int32_t>(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1);
    int64_t span = v->row_major ? (v->rows - 1) * v->ld + v->cols : (v->cols - 1) * v->ld + v->rows;
    span += (batch - 1) * v->stride;
    if (v->rows <= 0 || v->cols <= 0 || span <= 0) return false;
    auto h = d_.Translate(reinterpret_cast<DevPtr>(p), static_cast<uint64_t>(span) * TypeBytes(v->type));
    if (!h.ok()) return false;
    v->base = *h;
    return true;
  }

  EmulatedDevice& d_;
  std::set<EmuLt*> handles_;
  std::set<EmuDesc*> descs_;
  std::set<EmuLayout*> layouts_;
  std::set<EmuPref*> prefs_;
};

}  // namespace

std::shared_ptr<void> MakeHostCublasLt(EmulatedDevice& device) {
  auto api = std::make_shared<HostCublasLt>(device);
  return std::shared_ptr<void>(api, static_cast<gen::cublasLt::Api*>(api.get()));
}

}  // namespace remora::worker

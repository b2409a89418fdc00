// The host backend's cuSPARSE: enough of the generic and the legacy API, computed on the CPU
// over emulated device memory, for CI to test the whole path of its calls and of the
// parameter roles they use (descriptors whose arrays are kept and checked again, the
// multi-phase buffers of SpGEMM and SpSV, pointer modes, legacy descriptors) with real
// processes. Handles with their stream and pointer mode; CSR matrices (32-bit indices, base
// zero, real 32/64-bit values), dense vectors and matrices (both orders) with their getters
// and setters; SpMV and SpMM (not transposed); SpGEMM (C = alpha A B, its three phases and
// their buffers); SpSV (a triangular CSR matrix, its fill mode and diagonal type attributes);
// legacy matrix descriptors. The buffer sizes it answers are its own. Everything else answers
// CUSPARSE_STATUS_NOT_SUPPORTED (the generated default). Work runs in the handle's stream
// order.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "cusparse_api.h"
#include "cusparse_hooks.h"
#include "worker/backend/host/host_device.h"
#include "worker/libs/host/host_libraries.h"
#include "worker/backend/host/host_numeric.h"

namespace remora::worker {
namespace {

using api::sparse::DnMatBytes;
using api::sparse::Elems;
using api::sparse::TypeBytes;

struct EmuSparse {
  DStream stream = nullptr;
  cusparsePointerMode_t mode = CUSPARSE_POINTER_MODE_HOST;
};
struct EmuCsr {
  int64_t rows = 0, cols = 0, nnz = 0;
  DevPtr offsets = 0, columns = 0, values = 0;
  cudaDataType type = CUDA_R_32F;
  cusparseFillMode_t fill = CUSPARSE_FILL_MODE_LOWER;
  cusparseDiagType_t diag = CUSPARSE_DIAG_TYPE_NON_UNIT;
};
struct EmuDense {
  int64_t rows = 0, cols = 0, ld = 0;  // a vector: rows = size, cols = 1
  DevPtr values = 0;
  cudaDataType type = CUDA_R_32F;
  cusparseOrder_t order = CUSPARSE_ORDER_COL;
};
struct EmuSpGemm {  // C's structure and values, computed by the compute phase
  std::vector<int> offsets, columns;
  std::vector<double> values;
  bool estimated = false, computed = false;
};
struct EmuMatDescr {
  cusparseMatrixType_t type = CUSPARSE_MATRIX_TYPE_GENERAL;
  cusparseFillMode_t fill = CUSPARSE_FILL_MODE_LOWER;
  cusparseDiagType_t diag = CUSPARSE_DIAG_TYPE_NON_UNIT;
  cusparseIndexBase_t base = CUSPARSE_INDEX_BASE_ZERO;
};

constexpr size_t kBufferBytes = 64;  // what every emulated buffer query answers

template <typename T>
T* Cast(void* p) {
  return static_cast<T*>(p);
}

class HostCusparse final : public gen::cusparse::Api {
 public:
  explicit HostCusparse(EmulatedDevice& d) : d_(d) {}

  cusparseStatus_t cusparseCreate(cusparseHandle_t* h) override { return Make(&handles_, h); }
  cusparseStatus_t cusparseDestroy(cusparseHandle_t h) override { return Drop(&handles_, h); }
  cusparseStatus_t cusparseSetStream(cusparseHandle_t h, cudaStream_t s) override {
    auto* e = Find(handles_, h);
    if (e == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
    e->stream = static_cast<DStream>(s);
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseSetPointerMode(cusparseHandle_t h, cusparsePointerMode_t mode) override {
    auto* e = Find(handles_, h);
    if (e == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
    e->mode = mode;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseGetVersion(cusparseHandle_t h, int* v) override {
    if (Find(handles_, h) == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
    *v = CUSPARSE_VERSION;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseGetProperty(libraryPropertyType type, int* value) override {
    switch (type) {
      case MAJOR_VERSION: *value = CUSPARSE_VER_MAJOR; return CUSPARSE_STATUS_SUCCESS;
      case MINOR_VERSION: *value = CUSPARSE_VER_MINOR; return CUSPARSE_STATUS_SUCCESS;
      case PATCH_LEVEL: *value = CUSPARSE_VER_PATCH; return CUSPARSE_STATUS_SUCCESS;
    }
    return CUSPARSE_STATUS_INVALID_VALUE;
  }

  // ---- descriptors --------------------------------------------------------------------------
  cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t* d, int64_t rows, int64_t cols, int64_t nnz, void* off, void* col, void* val,
                                     cusparseIndexType_t ot, cusparseIndexType_t ct, cusparseIndexBase_t base, cudaDataType type) override {
    if (ot != CUSPARSE_INDEX_32I || ct != CUSPARSE_INDEX_32I || base != CUSPARSE_INDEX_BASE_ZERO) return CUSPARSE_STATUS_NOT_SUPPORTED;
    if (type != CUDA_R_32F && type != CUDA_R_64F) return CUSPARSE_STATUS_NOT_SUPPORTED;
    auto e = std::make_shared<EmuCsr>();
    *e = EmuCsr{rows, cols, nnz, Dev(off), Dev(col), Dev(val), type};
    *d = reinterpret_cast<cusparseSpMatDescr_t>(e.get());
    csr_.emplace(e.get(), std::move(e));
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t d) override {
    return csr_.erase(reinterpret_cast<const EmuCsr*>(d)) ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_INVALID_VALUE;
  }
  cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t d, int64_t* rows, int64_t* cols, int64_t* nnz) override {
    EmuCsr* e = Csr(d);
    if (e == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
    *rows = e->rows, *cols = e->cols, *nnz = e->nnz;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseSpMatGetFormat(cusparseConstSpMatDescr_t d, cusparseFormat_t* f) override {
    if (Csr(d) == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
    *f = CUSPARSE_FORMAT_CSR;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseConstCsrGet(cusparseConstSpMatDescr_t d, int64_t* rows, int64_t* cols, int64_t* nnz, const void** off,
                                       const void** col, const void** val, cusparseIndexType_t* ot, cusparseIndexType_t* ct,
                                       cusparseIndexBase_t* base, cudaDataType* type) override {
    EmuCsr* e = Csr(d);
    if (e == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
    *rows = e->rows, *cols = e->cols, *nnz = e->nnz;
    *off = reinterpret_cast<const void*>(e->offsets), *col = reinterpret_cast<const void*>(e->columns);
    *val = reinterpret_cast<const void*>(e->values);
    *ot = *ct = CUSPARSE_INDEX_32I, *base = CUSPARSE_INDEX_BASE_ZERO, *type = e->type;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseCsrSetPointers(cusparseSpMatDescr_t d, void* off, void* col, void* val) override {
    EmuCsr* e = Csr(d);
    if (e == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
    e->offsets = Dev(off), e->columns = Dev(col), e->values = Dev(val);
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseSpMatSetAttribute(cusparseSpMatDescr_t d, cusparseSpMatAttribute_t attr, void* data, size_t size) override {
    EmuCsr* e = Csr(d);
    if (e == nullptr || data == nullptr || size < sizeof(int)) return CUSPARSE_STATUS_INVALID_VALUE;
    int v;
    std::memcpy(&v, data, sizeof(v));
    if (attr == CUSPARSE_SPMAT_FILL_MODE) e->fill = static_cast<cusparseFillMode_t>(v);
    else if (attr == CUSPARSE_SPMAT_DIAG_TYPE) e->diag = static_cast<cusparseDiagType_t>(v);
    else return CUSPARSE_STATUS_INVALID_VALUE;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t* d, int64_t size, void* values, cudaDataType type) override {
    return MakeDense(reinterpret_cast<void**>(d), EmuDense{size, 1, size, Dev(values), type, CUSPARSE_ORDER_COL});
  }
  cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t d) override { return DropDense(d); }
  cusparseStatus_t cusparseConstDnVecGet(cusparseConstDnVecDescr_t d, int64_t* size, const void** values, cudaDataType* type) override {
    EmuDense* e = Dense(d);
    if (e == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
    *size = e->rows, *values = reinterpret_cast<const void*>(e->values), *type = e->type;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld, void* values, cudaDataType type,
                                       cusparseOrder_t order) override {
    return MakeDense(reinterpret_cast<void**>(d), EmuDense{rows, cols, ld, Dev(values), type, order});
  }
  cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t d) override { return DropDense(d); }
  cusparseStatus_t cusparseConstDnMatGet(cusparseConstDnMatDescr_t d, int64_t* rows, int64_t* cols, int64_t* ld, const void** values,
                                         cudaDataType* type, cusparseOrder_t* order) override {
    EmuDense* e = Dense(d);
    if (e == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
    *rows = e->rows, *cols = e->cols, *ld = e->ld, *values = reinterpret_cast<const void*>(e->values), *type = e->type, *order = e->order;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseCreateMatDescr(cusparseMatDescr_t* d) override { return Make(&mat_descrs_, d); }
  cusparseStatus_t cusparseDestroyMatDescr(cusparseMatDescr_t d) override { return Drop(&mat_descrs_, d); }
  cusparseStatus_t cusparseSetMatType(cusparseMatDescr_t d, cusparseMatrixType_t v) override { return SetMat(d, [v](EmuMatDescr& m) { m.type = v; }); }
  cusparseStatus_t cusparseSetMatFillMode(cusparseMatDescr_t d, cusparseFillMode_t v) override { return SetMat(d, [v](EmuMatDescr& m) { m.fill = v; }); }
  cusparseStatus_t cusparseSetMatDiagType(cusparseMatDescr_t d, cusparseDiagType_t v) override { return SetMat(d, [v](EmuMatDescr& m) { m.diag = v; }); }
  cusparseStatus_t cusparseSetMatIndexBase(cusparseMatDescr_t d, cusparseIndexBase_t v) override {
    if (v != CUSPARSE_INDEX_BASE_ZERO && v != CUSPARSE_INDEX_BASE_ONE) return CUSPARSE_STATUS_INVALID_VALUE;
    return SetMat(d, [v](EmuMatDescr& m) { m.base = v; });
  }

  // ---- SpMV, SpMM ---------------------------------------------------------------------------
  cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t h, cusparseOperation_t, const void*, cusparseConstSpMatDescr_t a,
                                           cusparseConstDnVecDescr_t x, const void*, cusparseDnVecDescr_t y, cudaDataType, cusparseSpMVAlg_t,
                                           size_t* bytes) override {
    return BufferAnswer(h, {Csr(a) != nullptr, Dense(x) != nullptr, Dense(y) != nullptr}, bytes);
  }
  cusparseStatus_t cusparseSpMV(cusparseHandle_t h, cusparseOperation_t op, const void* alpha, cusparseConstSpMatDescr_t a,
                                cusparseConstDnVecDescr_t x, const void* beta, cusparseDnVecDescr_t y, cudaDataType compute,
                                cusparseSpMVAlg_t, void*) override {
    return Multiply(h, op, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha, a, x, beta, y, compute);
  }
  cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t, const void*,
                                           cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void*, cusparseDnMatDescr_t c,
                                           cudaDataType, cusparseSpMMAlg_t, size_t* bytes) override {
    return BufferAnswer(h, {Csr(a) != nullptr, Dense(b) != nullptr, Dense(c) != nullptr}, bytes);
  }
  cusparseStatus_t cusparseSpMM(cusparseHandle_t h, cusparseOperation_t oa, cusparseOperation_t ob, const void* alpha,
                                cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta, cusparseDnMatDescr_t c,
                                cudaDataType compute, cusparseSpMMAlg_t, void*) override {
    return Multiply(h, oa, ob, alpha, a, b, beta, c, compute);
  }

  // ---- SpGEMM: C = alpha op(A) op(B) (C's old values are not read: beta is 0 in cuSPARSE) ---
  cusparseStatus_t cusparseSpGEMM_createDescr(cusparseSpGEMMDescr_t* d) override { return Make(&spgemm_, d); }
  cusparseStatus_t cusparseSpGEMM_destroyDescr(cusparseSpGEMMDescr_t d) override { return Drop(&spgemm_, d); }
  cusparseStatus_t cusparseSpGEMM_workEstimation(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t, const void*,
                                                 cusparseConstSpMatDescr_t a, cusparseConstSpMatDescr_t b, const void*,
                                                 cusparseSpMatDescr_t c, cudaDataType, cusparseSpGEMMAlg_t, cusparseSpGEMMDescr_t d,
                                                 size_t* size, void* buffer) override {
    EmuSpGemm* g = Find(spgemm_, d);
    if (Find(handles_, h) == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (g == nullptr || Csr(a) == nullptr || Csr(b) == nullptr || Csr(c) == nullptr || size == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
    if (buffer == nullptr) {
      *size = kBufferBytes;
      return CUSPARSE_STATUS_SUCCESS;
    }
    if (*size < kBufferBytes) return CUSPARSE_STATUS_INSUFFICIENT_RESOURCES;
    g->estimated = true;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseSpGEMM_compute(cusparseHandle_t h, cusparseOperation_t oa, cusparseOperation_t ob, const void* alpha,
                                          cusparseConstSpMatDescr_t a, cusparseConstSpMatDescr_t b, const void*, cusparseSpMatDescr_t c,
                                          cudaDataType compute, cusparseSpGEMMAlg_t, cusparseSpGEMMDescr_t d, size_t* size,
                                          void* buffer) override;
  cusparseStatus_t cusparseSpGEMM_copy(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t, const void*, cusparseConstSpMatDescr_t,
                                       cusparseConstSpMatDescr_t, const void*, cusparseSpMatDescr_t c, cudaDataType, cusparseSpGEMMAlg_t,
                                       cusparseSpGEMMDescr_t d) override;

  // ---- SpSV: op(A) y = alpha x, A triangular -------------------------------------------------
  cusparseStatus_t cusparseSpSV_createDescr(cusparseSpSVDescr_t* d) override { return Make(&spsv_, d); }
  cusparseStatus_t cusparseSpSV_destroyDescr(cusparseSpSVDescr_t d) override { return Drop(&spsv_, d); }
  cusparseStatus_t cusparseSpSV_bufferSize(cusparseHandle_t h, cusparseOperation_t, const void*, cusparseConstSpMatDescr_t a,
                                           cusparseConstDnVecDescr_t x, cusparseDnVecDescr_t y, cudaDataType, cusparseSpSVAlg_t,
                                           cusparseSpSVDescr_t d, size_t* bytes) override {
    return BufferAnswer(h, {Csr(a) != nullptr, Dense(x) != nullptr, Dense(y) != nullptr, Find(spsv_, d) != nullptr}, bytes);
  }
  cusparseStatus_t cusparseSpSV_analysis(cusparseHandle_t h, cusparseOperation_t op, const void*, cusparseConstSpMatDescr_t a,
                                         cusparseConstDnVecDescr_t x, cusparseDnVecDescr_t y, cudaDataType, cusparseSpSVAlg_t,
                                         cusparseSpSVDescr_t d, void* buffer) override {
    int* analysed = Find(spsv_, d);
    if (Find(handles_, h) == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (analysed == nullptr || Csr(a) == nullptr || Dense(x) == nullptr || Dense(y) == nullptr || buffer == nullptr)
      return CUSPARSE_STATUS_INVALID_VALUE;
    if (op != CUSPARSE_OPERATION_NON_TRANSPOSE) return CUSPARSE_STATUS_NOT_SUPPORTED;
    *analysed = 1;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t cusparseSpSV_solve(cusparseHandle_t h, cusparseOperation_t op, const void* alpha, cusparseConstSpMatDescr_t a,
                                      cusparseConstDnVecDescr_t x, cusparseDnVecDescr_t y, cudaDataType compute, cusparseSpSVAlg_t,
                                      cusparseSpSVDescr_t d) override;

 private:
  template <typename T>
  using Table = std::map<const T*, std::shared_ptr<T>>;
  template <typename T, typename H>
  cusparseStatus_t Make(Table<T>* t, H* out) {
    auto e = std::make_shared<T>();
    *out = reinterpret_cast<H>(e.get());
    t->emplace(e.get(), std::move(e));
    return CUSPARSE_STATUS_SUCCESS;
  }
  template <typename T, typename H>
  cusparseStatus_t Drop(Table<T>* t, H h) {
    return t->erase(reinterpret_cast<const T*>(h)) ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_INVALID_VALUE;
  }
  template <typename T, typename H>
  static T* Find(const Table<T>& t, H h) {
    auto it = t.find(reinterpret_cast<const T*>(h));
    return it == t.end() ? nullptr : it->second.get();
  }
  EmuCsr* Csr(const void* d) { return Find(csr_, d); }
  EmuDense* Dense(const void* d) { return Find(dense_, d); }
  static DevPtr Dev(const void* p) { return reinterpret_cast<DevPtr>(p); }
  cusparseStatus_t MakeDense(void** out, EmuDense v) {
    if (v.type != CUDA_R_32F && v.type != CUDA_R_64F) return CUSPARSE_STATUS_NOT_SUPPORTED;
    auto e = std::make_shared<EmuDense>(v);
    *out = e.get();
    dense_.emplace(e.get(), std::move(e));
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t DropDense(const void* d) { return Drop(&dense_, d); }
  template <typename F>
  cusparseStatus_t SetMat(cusparseMatDescr_t d, F&& set) {
    EmuMatDescr* m = Find(mat_descrs_, d);
    if (m == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
    set(*m);
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t BufferAnswer(cusparseHandle_t h, std::initializer_list<bool> known, size_t* bytes) {
    if (Find(handles_, h) == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
    for (bool k : known)
      if (!k) return CUSPARSE_STATUS_INVALID_VALUE;
    *bytes = kBufferBytes;
    return CUSPARSE_STATUS_SUCCESS;
  }
  // A scalar of the handle's pointer mode: its value now (host) or where the stream gets (device).
  bool Scalar(EmuSparse* s, const void* p, cudaDataType type, std::function<double()>* get) {
    if (s->mode == CUSPARSE_POINTER_MODE_HOST) {
      const double v = numeric::Load(type, static_cast<const std::byte*>(p), 0);
      *get = [v] { return v; };
      return true;
    }
    auto h = d_.Translate(Dev(p), TypeBytes(type));
    if (!h.ok()) return false;
    const std::byte* at = *h;
    *get = [at, type] { return numeric::Load(type, at, 0); };
    return true;
  }
  // The host view of a CSR matrix's arrays (empty when they do not translate).
  struct CsrView {
    const int32_t *off = nullptr, *col = nullptr;
    std::byte* val = nullptr;
  };
  bool View(const EmuCsr& m, CsrView* v) {
    auto off = d_.Translate(m.offsets, Elems(m.rows + 1, 4));
    auto col = m.nnz > 0 ? d_.Translate(m.columns, Elems(m.nnz, 4)) : Result<std::byte*>(nullptr);
    auto val = m.nnz > 0 ? d_.Translate(m.values, Elems(m.nnz, TypeBytes(m.type))) : Result<std::byte*>(nullptr);
    if (!off.ok() || !col.ok() || !val.ok()) return false;
    *v = CsrView{reinterpret_cast<const int32_t*>(*off), reinterpret_cast<const int32_t*>(*col), *val};
    return true;
  }
  cusparseStatus_t Multiply(cusparseHandle_t h, cusparseOperation_t oa, cusparseOperation_t ob, const void* alpha, const void* a,
                            const void* b, const void* beta, const void* c, cudaDataType compute);

  EmulatedDevice& d_;
  Table<EmuSparse> handles_;
  Table<EmuCsr> csr_;
  Table<EmuDense> dense_;
  Table<EmuMatDescr> mat_descrs_;
  Table<EmuSpGemm> spgemm_;
  Table<int> spsv_;  // 1 once analysed
};

// y = alpha A x + beta y, or C = alpha A B + beta C (dense operands of either order).
cusparseStatus_t HostCusparse::Multiply(cusparseHandle_t h, cusparseOperation_t oa, cusparseOperation_t ob, const void* alpha,
                                        const void* a, const void* b, const void* beta, const void* c, cudaDataType compute) {
  EmuSparse* s = Find(handles_, h);
  if (s == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
  EmuCsr* m = Csr(a);
  EmuDense *x = Dense(b), *y = Dense(c);
  if (m == nullptr || x == nullptr || y == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
  if (oa != CUSPARSE_OPERATION_NON_TRANSPOSE || ob != CUSPARSE_OPERATION_NON_TRANSPOSE) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (x->rows != m->cols || y->rows != m->rows || x->cols != y->cols) return CUSPARSE_STATUS_INVALID_VALUE;
  std::function<double()> al, be;
  CsrView v;
  if (!Scalar(s, alpha, compute, &al) || !Scalar(s, beta, compute, &be) || !View(*m, &v)) return CUSPARSE_STATUS_INVALID_VALUE;
  auto hx = d_.Translate(x->values, DnMatBytes(x->rows, x->cols, x->ld, x->type, x->order));
  auto hy = d_.Translate(y->values, DnMatBytes(y->rows, y->cols, y->ld, y->type, y->order));
  if (!hx.ok() || !hy.ok()) return CUSPARSE_STATUS_INVALID_VALUE;
  const EmuCsr mm = *m;
  const EmuDense xx = *x, yy = *y;
  std::byte *px = *hx, *py = *hy;
  auto at = [](const EmuDense& d, int64_t r, int64_t k) { return d.order == CUSPARSE_ORDER_COL ? r + k * d.ld : r * d.ld + k; };
  Status st = d_.InOrder(s->stream, [=] {
    const double av = al(), bv = be();
    for (int64_t k = 0; k < yy.cols; k++)
      for (int64_t r = 0; r < mm.rows; r++) {
        double acc = 0;
        for (int32_t e = v.off[r]; e < v.off[r + 1]; e++) acc += numeric::Load(mm.type, v.val, e) * numeric::Load(xx.type, px, at(xx, v.col[e], k));
        const int64_t i = at(yy, r, k);
        const double old = bv == 0 ? 0 : bv * numeric::Load(yy.type, py, i);
        numeric::Store(yy.type, py, i, av * acc + old);
      }
  });
  return st.ok() ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}

cusparseStatus_t HostCusparse::cusparseSpGEMM_compute(cusparseHandle_t h, cusparseOperation_t oa, cusparseOperation_t ob, const void* alpha,
                                                      cusparseConstSpMatDescr_t a, cusparseConstSpMatDescr_t b, const void*,
                                                      cusparseSpMatDescr_t c, cudaDataType compute, cusparseSpGEMMAlg_t,
                                                      cusparseSpGEMMDescr_t d, size_t* size, void* buffer) {
  EmuSparse* s = Find(handles_, h);
  EmuSpGemm* g = Find(spgemm_, d);
  EmuCsr *ma = Csr(a), *mb = Csr(b), *mc = Csr(c);
  if (s == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (g == nullptr || ma == nullptr || mb == nullptr || mc == nullptr || size == nullptr || !g->estimated) return CUSPARSE_STATUS_INVALID_VALUE;
  if (oa != CUSPARSE_OPERATION_NON_TRANSPOSE || ob != CUSPARSE_OPERATION_NON_TRANSPOSE) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (buffer == nullptr) {
    *size = kBufferBytes;
    return CUSPARSE_STATUS_SUCCESS;
  }
  if (*size < kBufferBytes) return CUSPARSE_STATUS_INSUFFICIENT_RESOURCES;
  std::function<double()> al;
  CsrView va, vb;
  if (!Scalar(s, alpha, compute, &al) || !View(*ma, &va) || !View(*mb, &vb)) return CUSPARSE_STATUS_INVALID_VALUE;
  // cuSPARSE answers C's size here (cusparseSpMatGetSize after compute): computed now, in order.
  if (!d_.Synchronize(s->stream).ok()) return CUSPARSE_STATUS_EXECUTION_FAILED;
  const double av = al();
  g->offsets.assign(1, 0);
  g->columns.clear();
  g->values.clear();
  std::vector<double> row(static_cast<size_t>(mb->cols));
  std::vector<char> used(static_cast<size_t>(mb->cols));
  for (int64_t r = 0; r < ma->rows; r++) {
    std::vector<int> cols;
    for (int32_t e = va.off[r]; e < va.off[r + 1]; e++) {
      const double x = numeric::Load(ma->type, va.val, e);
      for (int32_t f = vb.off[va.col[e]]; f < vb.off[va.col[e] + 1]; f++) {
        if (!used[vb.col[f]]) used[vb.col[f]] = 1, cols.push_back(vb.col[f]);
        row[vb.col[f]] += x * numeric::Load(mb->type, vb.val, f);
      }
    }
    std::sort(cols.begin(), cols.end());
    for (int k : cols) g->columns.push_back(k), g->values.push_back(av * row[k]), row[k] = 0, used[k] = 0;
    g->offsets.push_back(static_cast<int>(g->columns.size()));
  }
  mc->rows = ma->rows, mc->cols = mb->cols, mc->nnz = static_cast<int64_t>(g->columns.size());
  g->computed = true;
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t HostCusparse::cusparseSpGEMM_copy(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t, const void*,
                                                   cusparseConstSpMatDescr_t, cusparseConstSpMatDescr_t, const void*, cusparseSpMatDescr_t c,
                                                   cudaDataType, cusparseSpGEMMAlg_t, cusparseSpGEMMDescr_t d) {
  EmuSparse* s = Find(handles_, h);
  EmuSpGemm* g = Find(spgemm_, d);
  EmuCsr* mc = Csr(c);
  if (s == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (g == nullptr || mc == nullptr || !g->computed) return CUSPARSE_STATUS_INVALID_VALUE;
  CsrView vc;
  if (!View(*mc, &vc)) return CUSPARSE_STATUS_INVALID_VALUE;
  auto* off = const_cast<int32_t*>(vc.off);
  auto* col = const_cast<int32_t*>(vc.col);
  std::byte* val = vc.val;
  const cudaDataType type = mc->type;
  auto result = std::make_shared<EmuSpGemm>(*g);
  Status st = d_.InOrder(s->stream, [=] {
    std::copy(result->offsets.begin(), result->offsets.end(), off);
    std::copy(result->columns.begin(), result->columns.end(), col);
    for (size_t e = 0; e < result->values.size(); e++) numeric::Store(type, val, static_cast<int64_t>(e), result->values[e]);
  });
  return st.ok() ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}

cusparseStatus_t HostCusparse::cusparseSpSV_solve(cusparseHandle_t h, cusparseOperation_t op, const void* alpha, cusparseConstSpMatDescr_t a,
                                                  cusparseConstDnVecDescr_t x, cusparseDnVecDescr_t y, cudaDataType compute,
                                                  cusparseSpSVAlg_t, cusparseSpSVDescr_t d) {
  EmuSparse* s = Find(handles_, h);
  int* analysed = Find(spsv_, d);
  EmuCsr* m = Csr(a);
  EmuDense *vx = Dense(x), *vy = Dense(y);
  if (s == nullptr) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (analysed == nullptr || *analysed != 1 || m == nullptr || vx == nullptr || vy == nullptr) return CUSPARSE_STATUS_INVALID_VALUE;
  if (op != CUSPARSE_OPERATION_NON_TRANSPOSE) return CUSPARSE_STATUS_NOT_SUPPORTED;
  std::function<double()> al;
  CsrView v;
  if (!Scalar(s, alpha, compute, &al) || !View(*m, &v)) return CUSPARSE_STATUS_INVALID_VALUE;
  auto hx = d_.Translate(vx->values, Elems(vx->rows, TypeBytes(vx->type)));
  auto hy = d_.Translate(vy->values, Elems(vy->rows, TypeBytes(vy->type)));
  if (!hx.ok() || !hy.ok()) return CUSPARSE_STATUS_INVALID_VALUE;
  const EmuCsr mm = *m;
  const cudaDataType tx = vx->type, ty = vy->type;
  std::byte *px = *hx, *py = *hy;
  Status st = d_.InOrder(s->stream, [=] {
    const double av = al();
    const bool lower = mm.fill == CUSPARSE_FILL_MODE_LOWER, unit = mm.diag == CUSPARSE_DIAG_TYPE_UNIT;
    for (int64_t k = 0; k < mm.rows; k++) {
      const int64_t r = lower ? k : mm.rows - 1 - k;
      double acc = av * numeric::Load(tx, px, r), diag = 1;
      for (int32_t e = v.off[r]; e < v.off[r + 1]; e++) {
        const int32_t c = v.col[e];
        if (c == r) diag = unit ? 1 : numeric::Load(mm.type, v.val, e);
        else if (lower ? c < r : c > r) acc -= numeric::Load(mm.type, v.val, e) * numeric::Load(ty, py, c);
      }
      numeric::Store(ty, py, r, acc / diag);
    }
  });
  return st.ok() ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}

}  // namespace

std::shared_ptr<void> MakeHostCusparse(EmulatedDevice& device) {
  auto api = std::make_shared<HostCusparse>(device);
  return std::shared_ptr<void>(api, static_cast<gen::cusparse::Api*>(api.get()));
}

}  // namespace remora::worker

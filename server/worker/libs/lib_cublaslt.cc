#include "worker/libs/lib_cublaslt.h"

#include <cstring>

#include "blas_hooks.h"
#include "cublasLt_api.h"
#include "worker/calls/generated_call.h"

namespace remora::worker::gen::cublasLt {
namespace {

using api::blas::Mat;
using api::blas::Strided;
using api::blas::TypeBytes;

Status Failed(OpContext& x, cublasStatus_t r, const char* call) {
  return x.LibraryError(Domain::kCublasLt, static_cast<uint32_t>(r), Api::StatusName(r), call);
}

template <typename T>
bool LayoutAttr(OpContext& x, const LibObject* l, cublasLtMatrixLayoutAttribute_t a, T* v) {
  size_t written = 0;
  *v = T{};
  return x.Library<Api>().cublasLtMatrixLayoutGetAttribute(l->As<cublasLtMatrixLayout_t>(), a, v, sizeof(T), &written) ==
         CUBLAS_STATUS_SUCCESS;
}

template <typename T>
bool DescAttr(OpContext& x, const LibObject* d, cublasLtMatmulDescAttributes_t a, T* v) {
  size_t written = 0;
  *v = T{};
  return x.Library<Api>().cublasLtMatmulDescGetAttribute(d->As<cublasLtMatmulDesc_t>(), a, v, sizeof(T), &written) ==
         CUBLAS_STATUS_SUCCESS;
}

struct Shape {
  uint64_t rows = 0, cols = 0;
  uint32_t type = 0;
};

Shape ShapeOf(OpContext& x, const LibObject* l) {
  Shape s;
  if (l == nullptr) return s;
  LayoutAttr(x, l, CUBLASLT_MATRIX_LAYOUT_ROWS, &s.rows);
  LayoutAttr(x, l, CUBLASLT_MATRIX_LAYOUT_COLS, &s.cols);
  LayoutAttr(x, l, CUBLASLT_MATRIX_LAYOUT_TYPE, &s.type);
  return s;
}

// The matmul descriptor's attributes that hold device pointers.
bool IsPointerAttribute(cublasLtMatmulDescAttributes_t a) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER:
    case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER:
      return true;
    default:
      return false;
  }
}

Status CheckPointer(OpContext& x, uint64_t p, uint64_t bytes, const char* what) {
  if (p == 0) return Status::Ok();
  uint64_t checked = 0;
  Status st = x.DevPtr(p, bytes, &checked);
  if (!st.ok()) return Error(Err::kInvalidValue, "the matmul descriptor's {}: {}", what, st.message());
  return Status::Ok();
}

}  // namespace

uint64_t LayoutBytes(OpContext& x, const LibObject* layout) {
  if (layout == nullptr) return 0;
  Shape s = ShapeOf(x, layout);
  int64_t ld = 0, stride = 0;
  int32_t order = CUBLASLT_ORDER_COL, batch = 1;
  LayoutAttr(x, layout, CUBLASLT_MATRIX_LAYOUT_LD, &ld);
  LayoutAttr(x, layout, CUBLASLT_MATRIX_LAYOUT_ORDER, &order);
  LayoutAttr(x, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch);
  LayoutAttr(x, layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride);
  size_t elem = TypeBytes(static_cast<int>(s.type));
  if (elem == 0) elem = 1;
  auto rows = static_cast<int64_t>(s.rows), cols = static_cast<int64_t>(s.cols);
  uint64_t one;
  if (order == CUBLASLT_ORDER_COL) one = Mat(rows, cols, ld, elem);
  else if (order == CUBLASLT_ORDER_ROW) one = Mat(cols, rows, ld, elem);
  else one = static_cast<uint64_t>(ld > 0 ? ld : 1) * static_cast<uint64_t>(std::max(rows, cols)) * elem;  // tiled orders
  return batch > 1 ? Strided(one, stride, batch, elem) : one;
}

uint64_t LtScalarBytes(OpContext& x, const LibObject* desc, const LibObject* d_layout, int slot) {
  if (desc == nullptr) return 4;
  int32_t scale = CUDA_R_32F, mode = CUBLASLT_POINTER_MODE_HOST;
  DescAttr(x, desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale);
  DescAttr(x, desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode);
  size_t elem = TypeBytes(scale);
  if (elem == 0) elem = 4;
  bool vector = mode == CUBLASLT_POINTER_MODE_DEVICE_VECTOR ||
                (slot == 0 && (mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO ||
                               mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST));
  return vector ? ShapeOf(x, d_layout).rows * elem : elem;
}

Status TransformAttributeSet(OpContext&, LibObject* desc, cublasLtMatrixTransformDescAttributes_t attr, const void* buf, size_t size) {
  if (attr == CUBLASLT_MATRIX_TRANSFORM_DESC_POINTER_MODE && buf != nullptr && size >= sizeof(int32_t)) {
    int32_t mode;
    std::memcpy(&mode, buf, sizeof(mode));
    desc->mode = mode == CUBLASLT_POINTER_MODE_HOST ? 0u : 3u;
  }
  return Status::Ok();
}

uint64_t TransformScaleBytesW(OpContext& x, const LibObject* desc) {
  if (desc == nullptr) return 4;
  int32_t scale = CUDA_R_32F;
  size_t written = 0;
  (void)x.Library<Api>().cublasLtMatrixTransformDescGetAttribute(desc->As<cublasLtMatrixTransformDesc_t>(),
                                                                 CUBLASLT_MATRIX_TRANSFORM_DESC_SCALE_TYPE, &scale, sizeof(scale), &written);
  const size_t n = TypeBytes(scale);
  return n == 0 ? 4 : n;
}

Status LtVersion(OpContext& x, size_t* version) {
  *version = x.Library<Api>().cublasLtGetVersion();
  return Status::Ok();
}

Status LtDescCreated(OpContext&, LibObject* desc, cublasComputeType_t, cudaDataType_t) {
  desc->mode = 0;  // CUBLASLT_POINTER_MODE_HOST
  return Status::Ok();
}

Status LtDescSetAttribute(OpContext& x, LibObject* desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size) {
  if (attr == CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR && buf != nullptr && size == sizeof(uint64_t)) {
    // The application's handle of an emulation descriptor of this session: the library's.
    // (Its kind has the top bit set, which the application's value has cleared.)
    uint64_t id;
    std::memcpy(&id, buf, sizeof(id));
    void* real = nullptr;
    if (id != 0) {
      id |= uint64_t{1} << 63;
      ASSIGN_OR_RETURN(LibObject * o, x.executor().session().lib_objects().Get(id, HandleKind::kCublasLtEmulationDesc));
      real = o->As<void*>();
    }
    cublasStatus_t r = x.Library<Api>().cublasLtMatmulDescSetAttribute(desc->As<cublasLtMatmulDesc_t>(), attr, &real, sizeof(real));
    if (r != CUBLAS_STATUS_SUCCESS) return Failed(x, r, "cublasLtMatmulDescSetAttribute");
    return Status::Ok();
  }
  if (IsPointerAttribute(attr) && buf != nullptr && size == sizeof(uint64_t)) {
    uint64_t p;
    std::memcpy(&p, buf, sizeof(p));
    RETURN_IF_ERROR(CheckPointer(x, p, 1, "device pointer"));
  }
  cublasStatus_t r = x.Library<Api>().cublasLtMatmulDescSetAttribute(desc->As<cublasLtMatmulDesc_t>(), attr, buf, size);
  if (r != CUBLAS_STATUS_SUCCESS) return Failed(x, r, "cublasLtMatmulDescSetAttribute");
  if (attr == CUBLASLT_MATMUL_DESC_POINTER_MODE && buf != nullptr && size >= sizeof(int32_t)) {
    int32_t mode;
    std::memcpy(&mode, buf, sizeof(mode));
    switch (mode) {
      case CUBLASLT_POINTER_MODE_DEVICE:
      case CUBLASLT_POINTER_MODE_DEVICE_VECTOR: desc->mode = 3u; break;
      case CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO:
      case CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST: desc->mode = 1u; break;
      default: desc->mode = 0u; break;
    }
  }
  return Status::Ok();
}

Status LtMatmul(OpContext& x, LibObject* handle, LibObject* desc, const void* alpha, const void* a, LibObject* a_layout,
                const void* b, LibObject* b_layout, const void* beta, const void* c, LibObject* c_layout, void* d,
                LibObject* d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                cudaStream_t stream) {
  // The descriptor's device pointers, with the extents this matmul gives them.
  Shape ds = ShapeOf(x, d_layout);
  int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT, bias_type = -1, batch = 1;
  int64_t bias_stride = 0;
  DescAttr(x, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue);
  DescAttr(x, desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type);
  DescAttr(x, desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride);
  LayoutAttr(x, d_layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch);
  uint64_t bias = 0;
  DescAttr(x, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias);
  if (bias != 0) {
    size_t elem = TypeBytes(bias_type >= 0 ? bias_type : static_cast<int>(ds.type));
    uint64_t n = epilogue == CUBLASLT_EPILOGUE_BGRADB ? ds.cols : ds.rows;
    uint64_t one = n * (elem == 0 ? 1 : elem);
    RETURN_IF_ERROR(CheckPointer(x, bias, batch > 1 && bias_stride > 0 ? Strided(one, bias_stride, batch, elem) : one, "bias"));
  }
  const cublasLtMatmulDescAttributes_t scalars[] = {
      CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
      CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
      CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER,
      CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER,
      CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER};
  for (auto attr : scalars) {
    uint64_t p = 0;
    DescAttr(x, desc, attr, &p);
    // A float each in the default (per-tensor) scaling; arrays in the block-scaling modes,
    // whose extents are the library's to derive: there, and for the epilogue's aux matrix,
    // the pointer must be the session's.
    uint64_t bytes = attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER ? 1 : 4;
    RETURN_IF_ERROR(CheckPointer(x, p, bytes, "scale, amax or aux pointer"));
  }
  cublasStatus_t r = x.Library<Api>().cublasLtMatmul(
      handle->As<cublasLtHandle_t>(), desc->As<cublasLtMatmulDesc_t>(), alpha, a, a_layout->As<cublasLtMatrixLayout_t>(), b,
      b_layout->As<cublasLtMatrixLayout_t>(), beta, c, c_layout->As<cublasLtMatrixLayout_t>(), d,
      d_layout->As<cublasLtMatrixLayout_t>(), algo, workspace, workspace_bytes, stream);
  if (r != CUBLAS_STATUS_SUCCESS) return Failed(x, r, "cublasLtMatmul");
  return Status::Ok();
}

}  // namespace remora::worker::gen::cublasLt

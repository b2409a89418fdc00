#include "worker/lib_cusparse.h"

#include <utility>
#include <vector>

#include "cusparse_api.h"
#include "cusparse_hooks.h"
#include "worker/api_op.h"

namespace remora::worker::gen::cusparse {
namespace {

using api::sparse::DnMatBytes;
using api::sparse::Elems;
using api::sparse::IndexBytes;
using api::sparse::TypeBytes;

// The device ranges a descriptor's arrays were checked with at its creation.
struct Arrays final : LibExtra {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
};

void Remember(LibObject* o, std::initializer_list<std::pair<void*, uint64_t>> arrays) {
  auto& a = o->Extra<Arrays>();
  a.ranges.clear();
  for (auto [p, n] : arrays)
    if (p != nullptr && n > 0) a.ranges.emplace_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)), n);
}

Status Recheck(OpContext& x, const LibObject* o) {
  const auto* a = o == nullptr ? nullptr : dynamic_cast<const Arrays*>(o->extra.get());
  if (a == nullptr) return Status::Ok();
  for (auto [p, n] : a->ranges) {
    uint64_t checked = 0;
    Status st = x.DevPtr(p, n, &checked);
    if (!st.ok())
      return Status(Domain::kCusparse, CUSPARSE_STATUS_INVALID_VALUE,
                    fmt::format("a descriptor's array is no longer device memory of this session: {}", st.message()));
  }
  return Status::Ok();
}

}  // namespace

Status PointerModeSet(OpContext&, LibObject* handle, cusparsePointerMode_t mode) {
  handle->mode = mode == CUSPARSE_POINTER_MODE_DEVICE ? 3u : 0u;
  return Status::Ok();
}

Status CsrCreated(OpContext&, LibObject* mat, int64_t rows, int64_t, int64_t nnz, void* offsets, void* columns, void* values,
                  cusparseIndexType_t offsets_type, cusparseIndexType_t columns_type, cusparseIndexBase_t, cudaDataType type) {
  Remember(mat, {{offsets, Elems(rows + 1, IndexBytes(offsets_type))},
                 {columns, Elems(nnz, IndexBytes(columns_type))},
                 {values, Elems(nnz, TypeBytes(type))}});
  return Status::Ok();
}

Status DnVecCreated(OpContext&, LibObject* vec, int64_t size, void* values, cudaDataType type) {
  Remember(vec, {{values, Elems(size, TypeBytes(type))}});
  return Status::Ok();
}

Status DnMatCreated(OpContext&, LibObject* mat, int64_t rows, int64_t cols, int64_t ld, void* values, cudaDataType type,
                    cusparseOrder_t order) {
  Remember(mat, {{values, DnMatBytes(rows, cols, ld, type, order)}});
  return Status::Ok();
}

uint64_t SpMVBufferBytes(OpContext& x, cusparseHandle_t handle, cusparseOperation_t op, const void* alpha,
                         cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t vx, const void* beta, cusparseDnVecDescr_t vy,
                         cudaDataType compute, cusparseSpMVAlg_t alg) {
  size_t n = 0;
  if (x.Library<Api>().cusparseSpMV_bufferSize(handle, op, alpha, a, vx, beta, vy, compute, alg, &n) != CUSPARSE_STATUS_SUCCESS) return 0;
  return n;
}

uint64_t SpMMBufferBytes(OpContext& x, cusparseHandle_t handle, cusparseOperation_t op_a, cusparseOperation_t op_b, const void* alpha,
                         cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta, cusparseDnMatDescr_t c,
                         cudaDataType compute, cusparseSpMMAlg_t alg) {
  size_t n = 0;
  if (x.Library<Api>().cusparseSpMM_bufferSize(handle, op_a, op_b, alpha, a, b, beta, c, compute, alg, &n) != CUSPARSE_STATUS_SUCCESS)
    return 0;
  return n;
}

Status SpMV(OpContext& x, LibObject* handle, cusparseOperation_t op, const void* alpha, LibObject* a, LibObject* vx, const void* beta,
            LibObject* vy, cudaDataType compute, cusparseSpMVAlg_t alg, void* buffer) {
  for (const LibObject* o : {a, vx, vy}) RETURN_IF_ERROR(Recheck(x, o));
  cusparseStatus_t r = x.Library<Api>().cusparseSpMV(handle->As<cusparseHandle_t>(), op, alpha, a->As<cusparseConstSpMatDescr_t>(),
                                                     vx->As<cusparseConstDnVecDescr_t>(), beta, vy->As<cusparseDnVecDescr_t>(),
                                                     compute, alg, buffer);
  if (r != CUSPARSE_STATUS_SUCCESS) return x.LibraryError(Domain::kCusparse, r, Api::StatusName(r), "cusparseSpMV");
  return Status::Ok();
}

Status SpMM(OpContext& x, LibObject* handle, cusparseOperation_t op_a, cusparseOperation_t op_b, const void* alpha, LibObject* a,
            LibObject* b, const void* beta, LibObject* c, cudaDataType compute, cusparseSpMMAlg_t alg, void* buffer) {
  for (const LibObject* o : {a, b, c}) RETURN_IF_ERROR(Recheck(x, o));
  cusparseStatus_t r = x.Library<Api>().cusparseSpMM(handle->As<cusparseHandle_t>(), op_a, op_b, alpha,
                                                     a->As<cusparseConstSpMatDescr_t>(), b->As<cusparseConstDnMatDescr_t>(), beta,
                                                     c->As<cusparseDnMatDescr_t>(), compute, alg, buffer);
  if (r != CUSPARSE_STATUS_SUCCESS) return x.LibraryError(Domain::kCusparse, r, Api::StatusName(r), "cusparseSpMM");
  return Status::Ok();
}

}  // namespace remora::worker::gen::cusparse

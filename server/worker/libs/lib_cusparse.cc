#include "worker/libs/lib_cusparse.h"

#include "cusparse_api.h"
#include "cusparse_hooks.h"
#include "worker/calls/generated_call.h"

namespace remora::worker::gen::cusparse {
namespace {

using api::sparse::DnMatBytes;
using api::sparse::Elems;
using api::sparse::IndexBytes;
using api::sparse::TypeBytes;

constexpr uint64_t kStart = 1;  // what cannot be sized is checked at its start

uint64_t AtLeastStart(uint64_t n) { return n == 0 ? kStart : n; }

}  // namespace

Status PointerModeSet(OpContext&, LibObject* handle, cusparsePointerMode_t mode) {
  handle->mode = mode == CUSPARSE_POINTER_MODE_DEVICE ? 3u : 0u;
  return Status::Ok();
}

uint64_t SpMatArray(OpContext& x, cusparseConstSpMatDescr_t mat, int which) {
  Api& a = x.Library<Api>();
  cusparseFormat_t format{};
  if (a.cusparseSpMatGetFormat(mat, &format) != CUSPARSE_STATUS_SUCCESS) return kStart;
  int64_t rows = 0, cols = 0, nnz = 0;
  const void *p0 = nullptr, *p1 = nullptr, *p2 = nullptr;
  cusparseIndexType_t t0{}, t1{};
  cusparseIndexBase_t base{};
  cudaDataType type{};
  switch (format) {
    case CUSPARSE_FORMAT_CSR:
      if (a.cusparseConstCsrGet(mat, &rows, &cols, &nnz, &p0, &p1, &p2, &t0, &t1, &base, &type) != CUSPARSE_STATUS_SUCCESS) return kStart;
      return AtLeastStart(which == 0 ? Elems(rows + 1, IndexBytes(t0)) : which == 1 ? Elems(nnz, IndexBytes(t1)) : Elems(nnz, TypeBytes(type)));
    case CUSPARSE_FORMAT_CSC:
      if (a.cusparseConstCscGet(mat, &rows, &cols, &nnz, &p0, &p1, &p2, &t0, &t1, &base, &type) != CUSPARSE_STATUS_SUCCESS) return kStart;
      return AtLeastStart(which == 0 ? Elems(cols + 1, IndexBytes(t0)) : which == 1 ? Elems(nnz, IndexBytes(t1)) : Elems(nnz, TypeBytes(type)));
    case CUSPARSE_FORMAT_COO:
      if (a.cusparseConstCooGet(mat, &rows, &cols, &nnz, &p0, &p1, &p2, &t0, &base, &type) != CUSPARSE_STATUS_SUCCESS) return kStart;
      return AtLeastStart(which < 2 ? Elems(nnz, IndexBytes(t0)) : Elems(nnz, TypeBytes(type)));
    default:
      return kStart;
  }
}

uint64_t DnMatArray(OpContext& x, cusparseConstDnMatDescr_t mat) {
  int64_t rows = 0, cols = 0, ld = 0;
  const void* values = nullptr;
  cudaDataType type{};
  cusparseOrder_t order{};
  if (x.Library<Api>().cusparseConstDnMatGet(mat, &rows, &cols, &ld, &values, &type, &order) != CUSPARSE_STATUS_SUCCESS) return kStart;
  return AtLeastStart(DnMatBytes(rows, cols, ld, type, order));
}

uint64_t DnVecArray(OpContext& x, cusparseConstDnVecDescr_t vec) {
  int64_t size = 0;
  const void* values = nullptr;
  cudaDataType type{};
  if (x.Library<Api>().cusparseConstDnVecGet(vec, &size, &values, &type) != CUSPARSE_STATUS_SUCCESS) return kStart;
  return AtLeastStart(Elems(size, TypeBytes(type)));
}

uint64_t SpVecArray(OpContext& x, cusparseConstSpVecDescr_t vec) {
  int64_t size = 0, nnz = 0;
  const void *indices = nullptr, *values = nullptr;
  cusparseIndexType_t it{};
  cusparseIndexBase_t base{};
  cudaDataType type{};
  if (x.Library<Api>().cusparseConstSpVecGet(vec, &size, &nnz, &indices, &values, &it, &base, &type) != CUSPARSE_STATUS_SUCCESS) return kStart;
  return AtLeastStart(Elems(nnz, TypeBytes(type)));
}

uint64_t SpVecBytesW(OpContext& x, cusparseConstSpVecDescr_t vec) {
  int64_t size = 0, nnz = 0;
  const void *indices = nullptr, *values = nullptr;
  cusparseIndexType_t it{};
  cusparseIndexBase_t base{};
  cudaDataType type{};
  if (x.Library<Api>().cusparseConstSpVecGet(vec, &size, &nnz, &indices, &values, &it, &base, &type) != CUSPARSE_STATUS_SUCCESS) return 16;
  return TypeBytes(type) == 0 ? 16 : TypeBytes(type);
}

}  // namespace remora::worker::gen::cusparse

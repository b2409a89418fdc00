// cuSPARSE in the client: the mirror hooks protocol/api/cusparse.api names - a handle's stream
// (LibObjectView::aux[0]) for cusparseGetStream, and its pointer mode, which decides whether
// alpha and beta travel as values or as device addresses (mode bits 0 and 1). Thread-safe.
#pragma once

#include <cusparse.h>

namespace remora::gen::cusparse {

void MirrorStream(cusparseHandle_t handle, cudaStream_t stream);
void MirrorPointerMode(cusparseHandle_t handle, cusparsePointerMode_t mode);

}  // namespace remora::gen::cusparse

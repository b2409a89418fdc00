// cuBLAS in the client: the mirror hooks protocol/api/cublas.api names (`mirror=`), which keep
// what later calls must know of a handle before they are sent - above all its pointer mode,
// which decides whether alpha and beta travel as values or as device addresses - and what the
// getters answer without a round trip (LibObjectView::aux: 0 stream, 1 math mode, 2 atomics
// mode, 3 SM count target). Run after the setter went out. Thread-safe.
#pragma once

#include <cublas.h>  // (NVIDIA's cublas_api.h through it: "cublas_api.h" is the generated table)

namespace remora::gen::cublas {

void MirrorStream(cublasHandle_t handle, cudaStream_t stream);
void MirrorPointerMode(cublasHandle_t handle, cublasPointerMode_t mode);
void MirrorMathMode(cublasHandle_t handle, cublasMath_t mode);
void MirrorAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode);
void MirrorSmCountTarget(cublasHandle_t handle, int target);

// The legacy API (lib_cublas_legacy.cc): the implicit handle (nullptr before cublasInit), the
// status of a legacy call kept for cublasGetError, and the legacy characters as enums (an
// unknown one as a value the library refuses).
cublasHandle_t LegacyHandle();
void LegacyStatus(cublasStatus_t status);
cublasOperation_t LegacyOp(char c);
cublasFillMode_t LegacyFill(char c);
cublasDiagType_t LegacyDiag(char c);
cublasSideMode_t LegacySide(char c);

}  // namespace remora::gen::cublas

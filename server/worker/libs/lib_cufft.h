// cuFFT on the worker: the hooks protocol/api/cufft.api names. When a plan is made the worker
// keeps its shape (FftShape, the plan's LibExtra): how many bytes a transform reads from its
// input and writes to its output, from the plan's dimensions, embeddings, strides, distances,
// batch and element types (a real-to-complex plan's complex side is n/2+1 long in its last
// dimension). Each execution's pointers are checked with those extents, and a work area the
// application sets with the plan's work size (cufftGetSize). Used by the executor's single
// thread.
#pragma once

#include <cufftXt.h>

#include <cstddef>
#include <cstdint>

#include "remora/base/status.h"

namespace remora::worker {
class OpContext;
struct LibObject;
}  // namespace remora::worker

namespace remora::worker::gen::cufft {

// Bytes a transform of `plan` reads (In) and writes (Out); 0 for a plan not made yet (its
// execution then fails on the plan, after the pointers' starts were checked).
uint64_t PlanInBytes(OpContext& x, const LibObject* plan);
uint64_t PlanOutBytes(OpContext& x, const LibObject* plan);
// The plan's work size as the library reports it.
uint64_t PlanWorkBytes(OpContext& x, const LibObject* plan);

Status Shape1d(OpContext& x, LibObject* plan, int nx, cufftType type, int batch, size_t* work);
Status Shape2d(OpContext& x, LibObject* plan, int nx, int ny, cufftType type, size_t* work);
Status Shape3d(OpContext& x, LibObject* plan, int nx, int ny, int nz, cufftType type, size_t* work);
Status ShapeMany(OpContext& x, LibObject* plan, int rank, int* n, int* inembed, int istride, int idist, int* onembed, int ostride,
                 int odist, cufftType type, int batch, size_t* work);
Status ShapeMany64(OpContext& x, LibObject* plan, int rank, long long* n, long long* inembed, long long istride, long long idist,
                   long long* onembed, long long ostride, long long odist, cufftType type, long long batch, size_t* work);
Status ShapeXtMany(OpContext& x, LibObject* plan, int rank, long long* n, long long* inembed, long long istride, long long idist,
                   cudaDataType itype, long long* onembed, long long ostride, long long odist, cudaDataType otype, long long batch,
                   size_t* work, cudaDataType etype);
Status Shape1dNew(OpContext& x, LibObject* plan, int nx, cufftType type, int batch);
Status Shape2dNew(OpContext& x, LibObject* plan, int nx, int ny, cufftType type);
Status Shape3dNew(OpContext& x, LibObject* plan, int nx, int ny, int nz, cufftType type);
Status ShapeManyNew(OpContext& x, LibObject* plan, int rank, int* n, int* inembed, int istride, int idist, int* onembed, int ostride,
                    int odist, cufftType type, int batch);

// Multi-GPU settings and callbacks: an application's device ordinal made the server's GPU; a
// pointer the library keeps for a plan (caller data, a work area) checked against the
// session's allocations; the GPUs a plan was given (a callback's arrays hold one element per
// GPU: callbacks of a plan on several GPUs are refused with CUFFT_NOT_SUPPORTED).
Status FftGpu(OpContext& x, int* ordinal);
Status FftDevicePointer(OpContext& x, void** p);
Status GpusSet(OpContext& x, LibObject* plan, int n, int* gpus);
// cufftXtMalloc's sizes for a plan on one GPU (the client builds the descriptor): the bytes of
// its data for `format`, of the plan's input and of its output.
Status FftXtSizes(OpContext& x, LibObject* plan, int format, long long* sizes);
Status XtSetCallback(OpContext& x, LibObject* plan, void** routines, cufftXtCallbackType type, void** info);
Status XtSetJITCallback(OpContext& x, LibObject* plan, const char* symbol, const void* fatbin, size_t bytes, cufftXtCallbackType type,
                        void** info);

}  // namespace remora::worker::gen::cufft

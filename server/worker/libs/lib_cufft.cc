#include "worker/libs/lib_cufft.h"

#include <algorithm>
#include <vector>

#include "blas_hooks.h"
#include "cufft_api.h"
#include "worker/calls/generated_call.h"

namespace remora::worker::gen::cufft {
namespace {

struct FftShape final : LibExtra {
  uint64_t in = 0, out = 0;
  int gpus = 1;  // the GPUs cufftXtSetGPUs gave the plan
};

constexpr uint64_t kHuge = ~0ull >> 1;  // an extent no allocation has: the check refuses it

// Bytes one side of a transform spans: `batch` arrays of the logical dimensions `m` laid out
// in `embed` (contiguous when there is none: cuFFT then ignores stride and distance).
uint64_t Extent(const std::vector<long long>& m, const long long* embed, long long stride, long long dist, long long batch,
                size_t elem) {
  if (m.empty() || batch <= 0 || elem == 0) return 0;
  unsigned __int128 last = 0;  // the highest element index touched
  if (embed == nullptr) {
    unsigned __int128 per = 1;
    for (long long d : m) {
      if (d <= 0) return 0;
      per *= static_cast<unsigned long long>(d);
      if (per > kHuge) return kHuge;
    }
    last = per * static_cast<unsigned long long>(batch) - 1;
  } else {
    if (stride <= 0 || dist < 0) return kHuge;
    unsigned __int128 inner = 0, scale = 1;
    for (size_t d = m.size(); d-- > 0;) {
      if (m[d] <= 0) return 0;
      inner += static_cast<unsigned __int128>(m[d] - 1) * scale;
      long long e = embed[d];
      scale *= static_cast<unsigned long long>(e > 0 ? e : 1);
      if (inner > kHuge || scale > kHuge) return kHuge;
    }
    last = static_cast<unsigned __int128>(batch - 1) * static_cast<unsigned long long>(dist) +
           inner * static_cast<unsigned long long>(stride);
  }
  unsigned __int128 bytes = (last + 1) * elem;
  return bytes > kHuge ? kHuge : static_cast<uint64_t>(bytes);
}

// in/out element bytes and which side is the halved complex one (-1 none, 0 input, 1 output).
struct Types {
  size_t in = 0, out = 0;
  int halved = -1;
};

Types Of(cufftType t) {
  switch (t) {
    case CUFFT_C2C: return {8, 8, -1};
    case CUFFT_Z2Z: return {16, 16, -1};
    case CUFFT_R2C: return {4, 8, 1};
    case CUFFT_D2Z: return {8, 16, 1};
    case CUFFT_C2R: return {8, 4, 0};
    case CUFFT_Z2D: return {16, 8, 0};
    default: return {};
  }
}

Types Of(cudaDataType in, cudaDataType out) {
  Types t{api::blas::TypeBytes(in), api::blas::TypeBytes(out), -1};
  bool ci = api::blas::IsComplex(in), co = api::blas::IsComplex(out);
  if (!ci && co) t.halved = 1;
  if (ci && !co) t.halved = 0;
  return t;
}

Status Record(LibObject* plan, const std::vector<long long>& n, const long long* inembed, long long istride, long long idist,
              const long long* onembed, long long ostride, long long odist, long long batch, Types t) {
  auto side = [&](int which) {
    std::vector<long long> m = n;
    if (t.halved == which && !m.empty()) m.back() = m.back() / 2 + 1;
    return which == 0 ? Extent(m, inembed, istride, idist, batch, t.in) : Extent(m, onembed, ostride, odist, batch, t.out);
  };
  auto& s = plan->Extra<FftShape>();
  s.in = side(0);
  s.out = side(1);
  return Status::Ok();
}

template <typename I>
std::vector<long long> Wide(const I* p, int rank) {
  std::vector<long long> v;
  for (int i = 0; p != nullptr && i < rank; i++) v.push_back(static_cast<long long>(p[i]));
  return v;
}

template <typename I>
Status RecordMany(LibObject* plan, int rank, const I* n, const I* inembed, long long istride, long long idist, const I* onembed,
                  long long ostride, long long odist, long long batch, Types t) {
  auto ie = Wide(inembed, rank), oe = Wide(onembed, rank);
  return Record(plan, Wide(n, rank), inembed ? ie.data() : nullptr, istride, idist, onembed ? oe.data() : nullptr, ostride, odist,
                batch, t);
}

const FftShape* ShapeOf(const LibObject* plan) {
  return plan == nullptr ? nullptr : dynamic_cast<const FftShape*>(plan->extra.get());
}

}  // namespace

uint64_t PlanInBytes(OpContext&, const LibObject* plan) {
  const FftShape* s = ShapeOf(plan);
  return s ? s->in : 0;
}
uint64_t PlanOutBytes(OpContext&, const LibObject* plan) {
  const FftShape* s = ShapeOf(plan);
  return s ? s->out : 0;
}
uint64_t PlanWorkBytes(OpContext& x, const LibObject* plan) {
  size_t n = 0;
  if (plan == nullptr || x.Library<Api>().cufftGetSize(plan->As<cufftHandle>(), &n) != CUFFT_SUCCESS) return 0;
  return n;
}

Status Shape1d(OpContext&, LibObject* plan, int nx, cufftType type, int batch, size_t*) {
  return Record(plan, {nx}, nullptr, 1, 0, nullptr, 1, 0, batch, Of(type));
}
Status Shape2d(OpContext&, LibObject* plan, int nx, int ny, cufftType type, size_t*) {
  return Record(plan, {nx, ny}, nullptr, 1, 0, nullptr, 1, 0, 1, Of(type));
}
Status Shape3d(OpContext&, LibObject* plan, int nx, int ny, int nz, cufftType type, size_t*) {
  return Record(plan, {nx, ny, nz}, nullptr, 1, 0, nullptr, 1, 0, 1, Of(type));
}
Status ShapeMany(OpContext&, LibObject* plan, int rank, int* n, int* inembed, int istride, int idist, int* onembed, int ostride,
                 int odist, cufftType type, int batch, size_t*) {
  return RecordMany(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, batch, Of(type));
}
Status ShapeMany64(OpContext&, LibObject* plan, int rank, long long* n, long long* inembed, long long istride, long long idist,
                   long long* onembed, long long ostride, long long odist, cufftType type, long long batch, size_t*) {
  return RecordMany(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, batch, Of(type));
}
Status ShapeXtMany(OpContext&, LibObject* plan, int rank, long long* n, long long* inembed, long long istride, long long idist,
                   cudaDataType itype, long long* onembed, long long ostride, long long odist, cudaDataType otype, long long batch,
                   size_t*, cudaDataType) {
  return RecordMany(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, batch, Of(itype, otype));
}
Status Shape1dNew(OpContext& x, LibObject* plan, int nx, cufftType type, int batch) { return Shape1d(x, plan, nx, type, batch, nullptr); }
Status Shape2dNew(OpContext& x, LibObject* plan, int nx, int ny, cufftType type) { return Shape2d(x, plan, nx, ny, type, nullptr); }
Status Shape3dNew(OpContext& x, LibObject* plan, int nx, int ny, int nz, cufftType type) {
  return Shape3d(x, plan, nx, ny, nz, type, nullptr);
}
Status ShapeManyNew(OpContext& x, LibObject* plan, int rank, int* n, int* inembed, int istride, int idist, int* onembed, int ostride,
                    int odist, cufftType type, int batch) {
  return ShapeMany(x, plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, nullptr);
}

Status FftGpu(OpContext& x, int* ordinal) {
  ASSIGN_OR_RETURN(int gpu, x.executor().GpuOf(*ordinal));
  *ordinal = gpu;
  return Status::Ok();
}

Status FftDevicePointer(OpContext& x, void** p) {
  if (*p == nullptr) return Status::Ok();
  uint64_t checked = 0;
  return x.DevPtr(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*p)), 1, &checked);
}

Status FftXtSizes(OpContext&, LibObject* plan, int format, long long* sizes) {
  const FftShape* s = ShapeOf(plan);
  if (s == nullptr || s->in == 0 || s->out == 0) return Status(Domain::kCufft, CUFFT_INVALID_PLAN, "cufftXtMalloc: the plan is not made");
  if (s->gpus > 1)
    return Status(Domain::kCufft, CUFFT_NOT_SUPPORTED,
                  fmt::format("cufftXtMalloc: descriptors of a plan on {} GPUs are not remoted", s->gpus));
  if (s->in >= kHuge || s->out >= kHuge) return Status(Domain::kCufft, CUFFT_INVALID_SIZE, "cufftXtMalloc: the plan's data is too large");
  uint64_t bytes = 0;
  switch (format) {
    case CUFFT_XT_FORMAT_INPUT:
    case CUFFT_XT_FORMAT_1D_INPUT_SHUFFLED: bytes = s->in; break;
    case CUFFT_XT_FORMAT_OUTPUT: bytes = s->out; break;
    case CUFFT_XT_FORMAT_INPLACE:
    case CUFFT_XT_FORMAT_INPLACE_SHUFFLED: bytes = std::max(s->in, s->out); break;
    default: return Status(Domain::kCufft, CUFFT_INVALID_VALUE, fmt::format("cufftXtMalloc: unknown format {}", format));
  }
  sizes[0] = static_cast<long long>(bytes);
  sizes[1] = static_cast<long long>(s->in);
  sizes[2] = static_cast<long long>(s->out);
  return Status::Ok();
}

Status GpusSet(OpContext&, LibObject* plan, int n, int*) {
  plan->Extra<FftShape>().gpus = n;
  return Status::Ok();
}

namespace {

// A callback's arrays hold one element per GPU of the plan; Remora sends one.
Status SingleGpu(const LibObject* plan, const char* call) {
  const auto* s = dynamic_cast<const FftShape*>(plan->extra.get());
  if (s != nullptr && s->gpus > 1)
    return Status(Domain::kCufft, CUFFT_NOT_SUPPORTED, fmt::format("{}: callbacks of a plan on {} GPUs are not remoted", call, s->gpus));
  return Status::Ok();
}

}  // namespace

Status XtSetCallback(OpContext& x, LibObject* plan, void** routines, cufftXtCallbackType type, void** info) {
  RETURN_IF_ERROR(SingleGpu(plan, "cufftXtSetCallback"));
  cufftResult r = x.Library<Api>().cufftXtSetCallback(plan->As<cufftHandle>(), routines, type, info);
  if (r != CUFFT_SUCCESS) return x.LibraryError(Domain::kCufft, r, Api::StatusName(r), "cufftXtSetCallback");
  return Status::Ok();
}

Status XtSetJITCallback(OpContext& x, LibObject* plan, const char* symbol, const void* fatbin, size_t bytes, cufftXtCallbackType type,
                        void** info) {
  RETURN_IF_ERROR(SingleGpu(plan, "cufftXtSetJITCallback"));
  cufftResult r = x.Library<Api>().cufftXtSetJITCallback(plan->As<cufftHandle>(), symbol, fatbin, bytes, type, info);
  if (r != CUFFT_SUCCESS) return x.LibraryError(Domain::kCufft, r, Api::StatusName(r), "cufftXtSetJITCallback");
  return Status::Ok();
}

}  // namespace remora::worker::gen::cufft

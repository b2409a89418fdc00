// The math libraries the worker serves: their dispatch tables and real-library tables, by
// remora::Domain (the library's wire number). Adding a library adds a line to each switch.
#include "cublasLt_api.h"
#include "cublas_api.h"  // the generated table (NVIDIA's cublas_api.h comes through cublas.h)
#include "cudnn_api.h"
#include "cufft_api.h"
#include "cusparse_api.h"
#include "curand_api.h"
#include "nccl_api.h"  // NCCL (issue 44)
#include "worker/calls/generated_call.h"
#include "worker/calls/gen_tables.h"
#include "worker/backend/library_apis.h"

namespace remora::worker {

namespace gen::cublas {
const OpTable& Ops();
}
namespace gen::cublasLt {
const OpTable& Ops();
}
namespace gen::curand {
const OpTable& Ops();
}
namespace gen::cudnn {
const OpTable& Ops();
}
namespace gen::cufft {
const OpTable& Ops();
}
namespace gen::cusparse {
const OpTable& Ops();
}
namespace gen::nccl {  // NCCL (issue 44)
const OpTable& Ops();
}
namespace gen::cusolver {
const OpTable& Ops();
// (library_table_cusolver.cc: cusolverDn.h includes cublas_v2.h, which cannot share a
// translation unit with cublas.h)
std::shared_ptr<void> LoadDlApi(const std::function<void*(const char*)>& resolve, std::vector<std::string>* missing);
}

const OpTable* MathLibraryOps(uint16_t library) {
  switch (static_cast<Domain>(library)) {
    case Domain::kCublas: return &gen::cublas::Ops();
    case Domain::kCublasLt: return &gen::cublasLt::Ops();
    case Domain::kCurand: return &gen::curand::Ops();
    case Domain::kCudnn: return &gen::cudnn::Ops();
    case Domain::kCufft: return &gen::cufft::Ops();
    case Domain::kCusolver: return &gen::cusolver::Ops();
    case Domain::kCusparse: return &gen::cusparse::Ops();
    case Domain::kNccl: return &gen::nccl::Ops();  // (issue 44)
    default: return nullptr;
  }
}

namespace {
template <typename Api, typename DlApi>
std::shared_ptr<void> Load(const std::function<void*(const char*)>& resolve, std::vector<std::string>* missing) {
  auto api = std::make_shared<DlApi>();
  *missing = api->Load(resolve);
  // The dispatch casts the binding's void* to the library's Api: hand out that base.
  return std::shared_ptr<void>(api, static_cast<Api*>(api.get()));
}
}  // namespace

std::shared_ptr<void> LoadDlApi(Domain library, const std::function<void*(const char*)>& resolve,
                                std::vector<std::string>* missing) {
  switch (library) {
    case Domain::kCublas: return Load<gen::cublas::Api, gen::cublas::DlApi>(resolve, missing);
    case Domain::kCublasLt: return Load<gen::cublasLt::Api, gen::cublasLt::DlApi>(resolve, missing);
    case Domain::kCurand: return Load<gen::curand::Api, gen::curand::DlApi>(resolve, missing);
    case Domain::kCudnn: return Load<gen::cudnn::Api, gen::cudnn::DlApi>(resolve, missing);
    case Domain::kCufft: return Load<gen::cufft::Api, gen::cufft::DlApi>(resolve, missing);
    case Domain::kCusolver: return gen::cusolver::LoadDlApi(resolve, missing);
    case Domain::kCusparse: return Load<gen::cusparse::Api, gen::cusparse::DlApi>(resolve, missing);
    case Domain::kNccl: return Load<gen::nccl::Api, gen::nccl::DlApi>(resolve, missing);  // (issue 44)
    default: return nullptr;
  }
}

}  // namespace remora::worker

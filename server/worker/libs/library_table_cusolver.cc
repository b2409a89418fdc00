// cuSOLVER's real-library table (library_tables.cc, which cannot include it: cusolverDn.h
// includes cublas_v2.h, and cuBLAS's table includes cublas.h).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cusolver_api.h"

namespace remora::worker::gen::cusolver {

std::shared_ptr<void> LoadDlApi(const std::function<void*(const char*)>& resolve, std::vector<std::string>* missing) {
  auto api = std::make_shared<DlApi>();
  *missing = api->Load(resolve);
  return std::shared_ptr<void>(api, static_cast<Api*>(api.get()));
}

}  // namespace remora::worker::gen::cusolver

#include "worker/libs/lib_curand.h"

#include <cstring>

#include "curand_api.h"
#include "curand_hooks.h"
#include "worker/calls/generated_call.h"
#include "worker/session/lib_objects.h"

namespace remora::worker::gen::curand {

Status DeviceGeneratorCreated(OpContext&, LibObject* generator, curandRngType_t) {
  generator->mode = 1u;  // output in device memory
  return Status::Ok();
}

namespace {

// The library's table (cuRAND 10 answers success with NULL on the first request for some
// tables in a process: asked again then).
template <typename Get>
const void* Table(Get&& get) {
  const void* p = get();
  return p != nullptr ? p : get();
}

}  // namespace

Status TableBytes(OpContext& x, int which, int set, unsigned long long offset, unsigned long long bytes, void* out) {
  const uint64_t size = api::rand::TableBytes(which);
  if (size == 0 || offset > size || bytes > size - offset) return Status(Domain::kCurand, CURAND_STATUS_OUT_OF_RANGE, "no such table range");
  Api& a = x.Library<Api>();
  curandStatus_t r = CURAND_STATUS_SUCCESS;
  const void* table = Table([&]() -> const void* {
    switch (which) {
      case api::rand::kDirections32: {
        curandDirectionVectors32_t* v = nullptr;
        r = a.curandGetDirectionVectors32(&v, static_cast<curandDirectionVectorSet_t>(set));
        return v;
      }
      case api::rand::kDirections64: {
        curandDirectionVectors64_t* v = nullptr;
        r = a.curandGetDirectionVectors64(&v, static_cast<curandDirectionVectorSet_t>(set));
        return v;
      }
      case api::rand::kScramble32: {
        unsigned int* v = nullptr;
        r = a.curandGetScrambleConstants32(&v);
        return v;
      }
      default: {
        unsigned long long* v = nullptr;
        r = a.curandGetScrambleConstants64(&v);
        return v;
      }
    }
  });
  if (r != CURAND_STATUS_SUCCESS) return x.LibraryError(Domain::kCurand, r, Api::StatusName(r), "curandGet* (table)");
  if (table == nullptr) return Status(Domain::kCurand, CURAND_STATUS_INTERNAL_ERROR, "the library answered no table");
  std::memcpy(out, static_cast<const std::byte*>(table) + offset, bytes);
  return Status::Ok();
}

Status CreatePoisson(OpContext& x, double lambda, uint64_t id, unsigned long long* address) {
  curandDiscreteDistribution_t d = nullptr;
  curandStatus_t r = x.Library<Api>().curandCreatePoissonDistribution(lambda, &d);
  if (r != CURAND_STATUS_SUCCESS) return x.LibraryError(Domain::kCurand, r, Api::StatusName(r), "curandCreatePoissonDistribution");
  x.AdoptObject(HandleKind::kCurandDistribution, id, d);
  *address = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(d));
  return Status::Ok();
}

}  // namespace remora::worker::gen::curand

// cuRAND's mirror hooks, its generate calls (in pieces for host generators), its tables and
// discrete distributions (lib_curand.h, protocol/api/curand.api).
#include "lib_curand.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "curand_client.h"
#include "curand_hooks.h"
#include "lib_objects.h"
#include "process.h"
#include "remote_call.h"

namespace remora::gen::curand {
namespace {

enum Aux : size_t { kType = 0, kDims = 1 };

uint64_t Id(curandGenerator_t g) { return shim::HandleBits(HandleKind::kCurandGenerator, g); }

}  // namespace

void MirrorDeviceGenerator(curandGenerator_t* generator, curandRngType_t type) {
  shim::Process::Get().lib_objects().SetMode(Id(*generator), 1u);
  shim::Process::Get().lib_objects().SetAux(Id(*generator), kType, type);
}

void MirrorHostGenerator(curandGenerator_t* generator, curandRngType_t type) {
  shim::Process::Get().lib_objects().SetAux(Id(*generator), kType, type);
}

void MirrorDimensions(curandGenerator_t generator, unsigned int dimensions) {
  shim::Process::Get().lib_objects().SetAux(Id(generator), kDims, dimensions);
}

}  // namespace remora::gen::curand

namespace {

using remora::Status;
namespace shim = remora::shim;

constexpr shim::LibCodes kCodes{CURAND_STATUS_SUCCESS,        CURAND_STATUS_OUT_OF_RANGE,      CURAND_STATUS_NOT_INITIALIZED,
                                CURAND_STATUS_INTERNAL_ERROR, CURAND_STATUS_ALLOCATION_FAILED, CURAND_STATUS_INTERNAL_ERROR};

bool IsQuasi(int64_t t) {
  return t == CURAND_RNG_QUASI_DEFAULT || t == CURAND_RNG_QUASI_SOBOL32 || t == CURAND_RNG_QUASI_SCRAMBLED_SOBOL32 ||
         t == CURAND_RNG_QUASI_SOBOL64 || t == CURAND_RNG_QUASI_SCRAMBLED_SOBOL64;
}

// The most bytes one reply carries: an shm reply, header included, must fit in half the
// session's ring (2 MiB by default; protocol/src/shm/segment.h), well below api::kMaxArgBytes.
constexpr uint64_t kPieceBytes = 512u << 10;

// One generate call of `n` numbers of `elem` bytes into `out`: whole where it can be (a device
// generator, or a reply that fits), else in pieces (lib_curand.h). `pairs`: a pseudo-random
// generator draws this distribution in pairs (normal, log-normal: n must be even). `call`
// makes one remoted call for (out, n).
template <typename Call>
curandStatus_t Generate(curandGenerator_t g, void* out, size_t n, size_t elem, bool pairs, const char* name, Call&& call) {
  auto finish = [&](const Status& st) { return static_cast<curandStatus_t>(shim::FinishLib(remora::Domain::kCurand, kCodes, st, name)); };
  const uint64_t piece_bytes = kPieceBytes;
  auto view = shim::Process::Get().lib_objects().Find(shim::HandleBits(remora::HandleKind::kCurandGenerator, g));
  if (!view || (view->mode & 1u) != 0 || out == nullptr || n <= piece_bytes / elem) return finish(call(out, n));
  const bool quasi = IsQuasi(view->aux[0]);
  const size_t dims = quasi ? static_cast<size_t>(std::max<int64_t>(1, view->aux[1])) : 1;
  // A count the library refuses (LENGTH_NOT_MULTIPLE) is asked as a small count it refuses
  // the same way, before anything is drawn.
  if (n % dims != 0) return finish(call(out, n % dims));
  // (Philox draws normals one by one: an odd count is legal there, as natively.)
  const bool even = pairs && !quasi && view->aux[0] != CURAND_RNG_PSEUDO_PHILOX4_32_10;
  if (even && n % 2 != 0) return finish(call(out, 1));
  const size_t points = n / dims;
  size_t per = std::max<size_t>(1, piece_bytes / (elem * dims));
  if (pairs) per &= ~size_t{1};
  std::vector<std::byte> tmp;
  if (dims > 1) tmp.resize(per * dims * elem);
  auto* dst = static_cast<std::byte*>(out);
  for (size_t at = 0; at < points;) {
    const size_t m = std::min(per, points - at);
    if (dims == 1) {
      Status st = call(dst + at * elem, m);
      if (!st.ok()) return finish(st);
    } else {
      Status st = call(tmp.data(), m * dims);
      if (!st.ok()) return finish(st);
      for (size_t d = 0; d < dims; d++) std::memcpy(dst + (d * points + at) * elem, tmp.data() + d * m * elem, m * elem);
    }
    at += m;
  }
  return CURAND_STATUS_SUCCESS;
}

shim::CallCtx Ctx(const char* name) { return shim::CallCtx{false, name}; }

}  // namespace

// (Hidden inside libremora-core.so; the generated core table reaches them.)
#define REMORA_EXPORT extern "C"

#define REMORA_CURAND_GENERATE(name, T, pairs, extra_params, extra_args)                                                   \
  REMORA_EXPORT curandStatus_t name(curandGenerator_t generator, T* outputPtr, size_t n extra_params) {                 \
    return Generate(generator, outputPtr, n, sizeof(T), pairs, #name, [&](void* out, size_t count) {                      \
      return remora::gen::curand::name(Ctx(#name), generator, static_cast<T*>(out), count extra_args);                   \
    });                                                                                                                   \
  }
#define REMORA_COMMA ,
REMORA_CURAND_GENERATE(curandGenerate, unsigned int, false, , )
REMORA_CURAND_GENERATE(curandGenerateLongLong, unsigned long long, false, , )
REMORA_CURAND_GENERATE(curandGenerateUniform, float, false, , )
REMORA_CURAND_GENERATE(curandGenerateUniformDouble, double, false, , )
REMORA_CURAND_GENERATE(curandGenerateNormal, float, true, REMORA_COMMA float mean REMORA_COMMA float stddev,
                       REMORA_COMMA mean REMORA_COMMA stddev)
REMORA_CURAND_GENERATE(curandGenerateNormalDouble, double, true, REMORA_COMMA double mean REMORA_COMMA double stddev,
                       REMORA_COMMA mean REMORA_COMMA stddev)
REMORA_CURAND_GENERATE(curandGenerateLogNormal, float, true, REMORA_COMMA float mean REMORA_COMMA float stddev,
                       REMORA_COMMA mean REMORA_COMMA stddev)
REMORA_CURAND_GENERATE(curandGenerateLogNormalDouble, double, true, REMORA_COMMA double mean REMORA_COMMA double stddev,
                       REMORA_COMMA mean REMORA_COMMA stddev)
REMORA_CURAND_GENERATE(curandGeneratePoisson, unsigned int, false, REMORA_COMMA double lambda, REMORA_COMMA lambda)
REMORA_CURAND_GENERATE(curandGeneratePoissonMethod, unsigned int, false,
                       REMORA_COMMA double lambda REMORA_COMMA curandMethod_t method, REMORA_COMMA lambda REMORA_COMMA method)
#undef REMORA_COMMA
#undef REMORA_CURAND_GENERATE

// ---- the library's tables and discrete distributions (lib_curand.h) --------------------------

namespace {

// A copy of one of the library's tables (curand_hooks.h), fetched from the server once per
// process in pieces a reply holds; never freed (the library's own live as long).
const void* FetchTable(int which, int set, curandStatus_t* status) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::vector<std::byte>> tables;
  std::lock_guard<std::mutex> lock(mu);
  auto& t = tables[{which, set}];
  if (!t.empty()) return t.data();
  const uint64_t size = remora::api::rand::TableBytes(which);
  std::vector<std::byte> bytes(size);
  for (uint64_t at = 0; at < size;) {
    const uint64_t n = std::min<uint64_t>(kPieceBytes, size - at);
    Status st = remora::gen::curand::remoraCurandTable(Ctx("curandGet* (table)"), which, set, at, n, bytes.data() + at);
    if (!st.ok()) {
      *status = static_cast<curandStatus_t>(shim::FinishLib(remora::Domain::kCurand, kCodes, st, "curandGet* (table)"));
      return nullptr;
    }
    at += n;
  }
  t = std::move(bytes);
  *status = CURAND_STATUS_SUCCESS;
  return t.data();
}

template <typename T>
curandStatus_t GetTable(T** out, int which, int set) {
  if (out == nullptr) return CURAND_STATUS_OUT_OF_RANGE;
  curandStatus_t st = CURAND_STATUS_SUCCESS;
  const void* t = FetchTable(which, set, &st);
  if (t != nullptr) *out = static_cast<T*>(const_cast<void*>(t));
  return st;
}

}  // namespace

REMORA_EXPORT curandStatus_t curandGetDirectionVectors32(curandDirectionVectors32_t** vectors, curandDirectionVectorSet_t set) {
  if (set != CURAND_DIRECTION_VECTORS_32_JOEKUO6 && set != CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6) return CURAND_STATUS_OUT_OF_RANGE;
  return GetTable(vectors, remora::api::rand::kDirections32, set);
}
REMORA_EXPORT curandStatus_t curandGetDirectionVectors64(curandDirectionVectors64_t** vectors, curandDirectionVectorSet_t set) {
  if (set != CURAND_DIRECTION_VECTORS_64_JOEKUO6 && set != CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6) return CURAND_STATUS_OUT_OF_RANGE;
  return GetTable(vectors, remora::api::rand::kDirections64, set);
}
REMORA_EXPORT curandStatus_t curandGetScrambleConstants32(unsigned int** constants) {
  return GetTable(constants, remora::api::rand::kScramble32, 0);
}
REMORA_EXPORT curandStatus_t curandGetScrambleConstants64(unsigned long long** constants) {
  return GetTable(constants, remora::api::rand::kScramble64, 0);
}

// The distribution's device address stands for its session object in this process.
REMORA_EXPORT curandStatus_t curandCreatePoissonDistribution(double lambda, curandDiscreteDistribution_t* discrete_distribution) {
  if (discrete_distribution == nullptr) return CURAND_STATUS_OUT_OF_RANGE;
  curandDiscreteDistribution_t made{};
  unsigned long long address = 0;
  const char* name = "curandCreatePoissonDistribution";
  Status st = remora::gen::curand::remoraCurandCreatePoisson(Ctx(name), lambda, &made, &address);
  if (!st.ok()) return static_cast<curandStatus_t>(shim::FinishLib(remora::Domain::kCurand, kCodes, st, name));
  shim::Process::Get().lib_objects().Alias(address, shim::HandleBits(remora::HandleKind::kCurandDistribution, made));
  *discrete_distribution = reinterpret_cast<curandDiscreteDistribution_t>(static_cast<uintptr_t>(address));
  return CURAND_STATUS_SUCCESS;
}

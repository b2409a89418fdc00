// The host backend's cuRAND: device and host generators of every pseudo-random type, their
// seed, offset and stream, and every distribution of the host API - from a 64-bit Mersenne
// twister, so the numbers are not NVIDIA's, only distributed as theirs are (CI checks
// statistics and determinism, not values). A device generator writes in its stream's order;
// a host one at once. Quasi-random generators answer CURAND_STATUS_TYPE_ERROR on generate.
// The status rules of the real library that applications meet are kept: normal and
// log-normal counts must be even, 64-bit integers need a 64-bit quasi-random generator.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "curand_api.h"
#include "worker/backend/host/host_device.h"
#include "worker/libs/host/host_libraries.h"

namespace remora::worker {
namespace {

struct EmuGenerator {
  curandRngType_t type;
  bool device;
  unsigned long long seed = 0, offset = 0;
  DStream stream = nullptr;
  uint64_t drawn = 0;  // numbers generated since the seed or offset was last set
};

bool IsQuasi(curandRngType_t t) {
  return t == CURAND_RNG_QUASI_DEFAULT || t == CURAND_RNG_QUASI_SOBOL32 || t == CURAND_RNG_QUASI_SCRAMBLED_SOBOL32 ||
         t == CURAND_RNG_QUASI_SOBOL64 || t == CURAND_RNG_QUASI_SCRAMBLED_SOBOL64;
}

class HostCurand final : public gen::curand::Api {
 public:
  explicit HostCurand(EmulatedDevice& d) : d_(d) {}
  ~HostCurand() override {
    for (auto* g : gens_) delete g;
  }

  curandStatus_t curandCreateGenerator(curandGenerator_t* g, curandRngType_t t) override { return Make(g, t, true); }
  curandStatus_t curandCreateGeneratorHost(curandGenerator_t* g, curandRngType_t t) override { return Make(g, t, false); }
  curandStatus_t curandDestroyGenerator(curandGenerator_t g) override {
    EmuGenerator* e = Of(g);
    if (e == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
    gens_.erase(e);
    delete e;
    return CURAND_STATUS_SUCCESS;
  }
  curandStatus_t curandSetStream(curandGenerator_t g, cudaStream_t s) override {
    EmuGenerator* e = Of(g);
    if (e == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
    e->stream = static_cast<DStream>(s);
    return CURAND_STATUS_SUCCESS;
  }
  curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t g, unsigned long long seed) override {
    EmuGenerator* e = Of(g);
    if (e == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
    if (IsQuasi(e->type)) return CURAND_STATUS_TYPE_ERROR;
    e->seed = seed;
    e->drawn = 0;
    return CURAND_STATUS_SUCCESS;
  }
  curandStatus_t curandSetGeneratorOffset(curandGenerator_t g, unsigned long long offset) override {
    EmuGenerator* e = Of(g);
    if (e == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
    e->offset = offset;
    e->drawn = 0;
    return CURAND_STATUS_SUCCESS;
  }
  curandStatus_t curandSetGeneratorOrdering(curandGenerator_t g, curandOrdering_t) override {
    return Of(g) ? CURAND_STATUS_SUCCESS : CURAND_STATUS_NOT_INITIALIZED;
  }
  curandStatus_t curandSetQuasiRandomGeneratorDimensions(curandGenerator_t g, unsigned int dims) override {
    EmuGenerator* e = Of(g);
    if (e == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
    if (!IsQuasi(e->type)) return CURAND_STATUS_TYPE_ERROR;
    return dims >= 1 && dims <= 20000 ? CURAND_STATUS_SUCCESS : CURAND_STATUS_OUT_OF_RANGE;
  }
  curandStatus_t curandGenerateSeeds(curandGenerator_t g) override { return Of(g) ? CURAND_STATUS_SUCCESS : CURAND_STATUS_NOT_INITIALIZED; }

  curandStatus_t curandGenerate(curandGenerator_t g, unsigned int* out, size_t n) override {
    return Fill<unsigned int>(g, out, n, false, [](std::mt19937_64& r) { return static_cast<unsigned int>(r() >> 32); });
  }
  curandStatus_t curandGenerateLongLong(curandGenerator_t g, unsigned long long*, size_t) override {
    return Of(g) ? CURAND_STATUS_TYPE_ERROR : CURAND_STATUS_NOT_INITIALIZED;  // 64-bit Sobol only
  }
  curandStatus_t curandGenerateUniform(curandGenerator_t g, float* out, size_t n) override {
    // (0, 1], as cuRAND's: 1 - [0, 1).
    return Fill<float>(g, out, n, false, [](std::mt19937_64& r) {
      return 1.0f - static_cast<float>(r() >> 40) * (1.0f / 16777216.0f);
    });
  }
  curandStatus_t curandGenerateUniformDouble(curandGenerator_t g, double* out, size_t n) override {
    return Fill<double>(g, out, n, false, [](std::mt19937_64& r) { return 1.0 - static_cast<double>(r() >> 11) * 0x1.0p-53; });
  }
  curandStatus_t curandGenerateNormal(curandGenerator_t g, float* out, size_t n, float mean, float sd) override {
    return Fill<float>(g, out, n, true, [mean, sd](std::mt19937_64& r) { return static_cast<float>(Normal(r, mean, sd)); });
  }
  curandStatus_t curandGenerateNormalDouble(curandGenerator_t g, double* out, size_t n, double mean, double sd) override {
    return Fill<double>(g, out, n, true, [mean, sd](std::mt19937_64& r) { return Normal(r, mean, sd); });
  }
  curandStatus_t curandGenerateLogNormal(curandGenerator_t g, float* out, size_t n, float mean, float sd) override {
    return Fill<float>(g, out, n, true, [mean, sd](std::mt19937_64& r) { return static_cast<float>(std::exp(Normal(r, mean, sd))); });
  }
  curandStatus_t curandGenerateLogNormalDouble(curandGenerator_t g, double* out, size_t n, double mean, double sd) override {
    return Fill<double>(g, out, n, true, [mean, sd](std::mt19937_64& r) { return std::exp(Normal(r, mean, sd)); });
  }
  curandStatus_t curandGeneratePoisson(curandGenerator_t g, unsigned int* out, size_t n, double lambda) override {
    if (!(lambda > 0)) return Of(g) ? CURAND_STATUS_OUT_OF_RANGE : CURAND_STATUS_NOT_INITIALIZED;
    return Fill<unsigned int>(g, out, n, false, [lambda](std::mt19937_64& r) {
      return std::poisson_distribution<unsigned int>(lambda)(r);
    });
  }
  curandStatus_t curandGeneratePoissonMethod(curandGenerator_t g, unsigned int* out, size_t n, double lambda, curandMethod_t) override {
    return curandGeneratePoisson(g, out, n, lambda);
  }

  curandStatus_t curandGetVersion(int* v) override {
    *v = CURAND_VERSION;
    return CURAND_STATUS_SUCCESS;
  }
  curandStatus_t curandGetProperty(libraryPropertyType type, int* value) override {
    switch (type) {
      case MAJOR_VERSION: *value = CURAND_VER_MAJOR; return CURAND_STATUS_SUCCESS;
      case MINOR_VERSION: *value = CURAND_VER_MINOR; return CURAND_STATUS_SUCCESS;
      case PATCH_LEVEL: *value = CURAND_VER_PATCH; return CURAND_STATUS_SUCCESS;
    }
    return CURAND_STATUS_OUT_OF_RANGE;
  }

 private:
  static double Normal(std::mt19937_64& r, double mean, double sd) {
    // Box-Muller on (0, 1] uniforms.
    double u1 = 1.0 - static_cast<double>(r() >> 11) * 0x1.0p-53, u2 = static_cast<double>(r() >> 11) * 0x1.0p-53;
    return mean + sd * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }
  curandStatus_t Make(curandGenerator_t* g, curandRngType_t t, bool device) {
    if (g == nullptr) return CURAND_STATUS_OUT_OF_RANGE;
    if (t < CURAND_RNG_PSEUDO_DEFAULT || t > CURAND_RNG_QUASI_SCRAMBLED_SOBOL64) return CURAND_STATUS_TYPE_ERROR;
    auto* e = new EmuGenerator{t, device};
    gens_.insert(e);
    *g = reinterpret_cast<curandGenerator_t>(e);
    return CURAND_STATUS_SUCCESS;
  }
  EmuGenerator* Of(curandGenerator_t g) {
    auto* e = reinterpret_cast<EmuGenerator*>(g);
    return gens_.count(e) ? e : nullptr;
  }
  // Fills n values from the generator's stream of numbers, continuing where the last call
  // stopped: in stream order into device memory, at once into host memory.
  template <typename T, typename F>
  curandStatus_t Fill(curandGenerator_t g, T* out, size_t n, bool pairs, F draw) {
    EmuGenerator* e = Of(g);
    if (e == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
    if (IsQuasi(e->type)) return CURAND_STATUS_TYPE_ERROR;
    // Normals come in pairs, except from Philox (the real library accepts odd counts there:
    // measured on cuRAND 10 with CUDA 13, docs/COMPATIBILITY.md).
    if (pairs && n % 2 != 0 && e->type != CURAND_RNG_PSEUDO_PHILOX4_32_10) return CURAND_STATUS_LENGTH_NOT_MULTIPLE;
    const uint64_t skip = e->drawn;
    e->drawn += n;
    const unsigned long long seed = e->seed ^ (e->offset * 0x9e3779b97f4a7c15ull);
    auto run = [seed, skip, n, draw](T* dst) {
      std::mt19937_64 r(seed);
      r.discard(skip * 2);  // at most two raw numbers per value
      for (size_t i = 0; i < n; i++) {
        std::mt19937_64 one(r());
        (void)r();
        dst[i] = draw(one);
      }
    };
    if (n == 0) return CURAND_STATUS_SUCCESS;  // (an empty array: NULL, as the real library takes it)
    if (!e->device) {
      run(out);
      return CURAND_STATUS_SUCCESS;
    }
    auto p = d_.Translate(reinterpret_cast<DevPtr>(out), n * sizeof(T));
    if (!p.ok()) return CURAND_STATUS_LAUNCH_FAILURE;
    T* dst = reinterpret_cast<T*>(*p);
    Status st = d_.InOrder(e->stream, [run, dst] { run(dst); });
    return st.ok() ? CURAND_STATUS_SUCCESS : CURAND_STATUS_LAUNCH_FAILURE;
  }

  EmulatedDevice& d_;
  std::set<EmuGenerator*> gens_;
};

}  // namespace

std::shared_ptr<void> MakeHostCurand(EmulatedDevice& device) {
  auto api = std::make_shared<HostCurand>(device);
  return std::shared_ptr<void>(api, static_cast<gen::curand::Api*>(api.get()));
}

}  // namespace remora::worker

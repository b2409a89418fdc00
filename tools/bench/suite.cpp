// The measurement suite (see suite.hpp for the contract).
#include "suite.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <vector>

#include "kernels.hpp"
#include "results.hpp"

namespace remora::bench {
namespace {

// A failed CUDA runtime call: `what()` is "call: cudaErrorName (description)".
class CudaFailure : public std::runtime_error {
 public:
  CudaFailure(cudaError_t code, const char* call)
      : std::runtime_error(std::string(call) + ": " + cudaGetErrorName(code) + " (" +
                           cudaGetErrorString(code) + ")"),
        code_(code) {}
  // Short form for a table cell: the error's name.
  std::string short_reason() const { return cudaGetErrorName(code_); }
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw CudaFailure(e, call);
}

// How a metric is repeated: `warmup` untimed operations, then `reps` timed loops of `iters`.
struct Repeat {
  long warmup;
  long iters;
  int reps;
};

Repeat repeat_for(const MetricDef& d, bool quick) {
  switch (d.family) {
    case Family::SyncRoundTrip: return quick ? Repeat{100, 1000, 3} : Repeat{1000, 10000, 7};
    case Family::LaunchSync: return quick ? Repeat{20, 200, 3} : Repeat{100, 2000, 7};
    case Family::LaunchAsync: return quick ? Repeat{1000, 10000, 3} : Repeat{1000, 100000, 5};
    case Family::Memcpy:
    case Family::Memset:
      if (d.bytes <= (size_t{64} << 10)) return quick ? Repeat{10, 200, 3} : Repeat{100, 2000, 7};
      if (d.bytes <= (size_t{4} << 20)) return quick ? Repeat{3, 20, 3} : Repeat{10, 200, 7};
      if (d.bytes <= (size_t{64} << 20)) return quick ? Repeat{1, 3, 3} : Repeat{2, 10, 7};
      return quick ? Repeat{1, 1, 3} : Repeat{1, 4, 5};
    case Family::AppWall: break;
  }
  return Repeat{0, 1, 1};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Device memory freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
};
// Pinned host memory freed on scope exit.
struct PinnedBuffer {
  void* ptr = nullptr;
  ~PinnedBuffer() {
    if (ptr) cudaFreeHost(ptr);
  }
};

class Suite {
 public:
  explicit Suite(const SuiteOptions& o) : opt_(o) { result_.label = o.label; }

  int run() {
    try {
      init_device();
    } catch (const CudaFailure& f) {
      result_.error = "CUDA unavailable: " + f.short_reason();
      result_.error_detail = f.what();
      if (f.code() == cudaErrorNoDevice || f.code() == cudaErrorInsufficientDriver) {
        result_.error_detail += " -- no GPU or no NVIDIA driver on this machine?";
      }
      std::fprintf(stderr, "remora-bench [%s]: CUDA unavailable: %s\n", opt_.label.c_str(),
                   f.what());
      return save() ? 1 : 2;
    }
    if (!save()) return 2;

    cudaStream_t stream = nullptr;
    if (cudaStreamCreate(&stream) != cudaSuccess) {
      stream = nullptr;
      cudaGetLastError();
    }
    for (const MetricDef& d : metric_catalog()) {
      if (!opt_.selection.selected(d.id)) continue;
      switch (d.family) {
        case Family::SyncRoundTrip: sync_round_trip(d, stream); break;
        case Family::LaunchSync: launch_sync(d); break;
        case Family::LaunchAsync: launch_async(d, stream); break;
        case Family::Memcpy: memcpy_metric(d); break;
        case Family::Memset: memset_metric(d); break;
        case Family::AppWall: continue;  // measured by the parent
      }
      if (!save()) return 2;
    }
    if (stream) cudaStreamDestroy(stream);
    result_.completed = true;
    return save() ? 0 : 2;
  }

 private:
  void init_device() {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    result_.device_count = count;
    if (count < 1) throw CudaFailure(cudaErrorNoDevice, "cudaGetDeviceCount");
    check(cudaSetDevice(0), "cudaSetDevice(0)");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties(0)");
    result_.device_name = prop.name;
    // Creates the context before anything is timed (warm-ups would also absorb it). Not
    // fatal: a shim may create it lazily and not support this idiom.
    if (cudaFree(nullptr) != cudaSuccess) cudaGetLastError();
    // Informational only: a failure leaves 0.
    if (cudaRuntimeGetVersion(&result_.runtime_version) != cudaSuccess) result_.runtime_version = 0;
    if (cudaDriverGetVersion(&result_.driver_version) != cudaSuccess) result_.driver_version = 0;
    cudaGetLastError();
  }

  bool save() {
    try {
      write_file_atomic(opt_.out_path, json::dump(to_json(result_)));
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "remora-bench [%s]: %s\n", opt_.label.c_str(), e.what());
      return false;
    }
  }

  void fail(const MetricDef& d, const std::string& short_reason, const std::string& detail) {
    Measurement& m = result_.metrics[d.id];
    m.value.reset();
    m.error = short_reason;
    m.error_detail = detail;
    std::fprintf(stderr, "remora-bench [%s]: %s failed: %s\n", opt_.label.c_str(), d.id.c_str(),
                 detail.c_str());
  }

  // Runs `timed(n)` (which performs n operations, closes with a synchronising call and returns
  // the elapsed seconds) as warm-up and repetitions, and records the median in d's unit.
  void measure(const MetricDef& d, const std::function<double(long)>& timed) {
    Repeat r = repeat_for(d, opt_.quick);
    Measurement m;
    m.iterations = r.iters;
    try {
      if (r.warmup > 0) timed(r.warmup);
      for (int i = 0; i < r.reps; ++i) {
        double s = timed(r.iters);
        double per_op = s / static_cast<double>(r.iters);
        switch (d.unit) {
          case Unit::Microseconds: m.samples.push_back(per_op * 1e6); break;
          case Unit::Seconds: m.samples.push_back(per_op); break;
          case Unit::GBps: m.samples.push_back(static_cast<double>(d.bytes) / per_op / 1e9); break;
        }
      }
    } catch (const CudaFailure& f) {
      cudaGetLastError();
      fail(d, f.short_reason(), f.what());
      return;
    }
    m.value = median(m.samples);
    std::fprintf(stderr, "remora-bench [%s]: %-28s %12.3f %s\n", opt_.label.c_str(), d.id.c_str(),
                 *m.value, unit_name(d.unit));
    result_.metrics[d.id] = std::move(m);
  }

  void sync_round_trip(const MetricDef& d, cudaStream_t stream) {
    if (!stream) return fail(d, "cudaStreamCreate failed", "no stream to query");
    measure(d, [&](long n) {
      auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e != cudaSuccess && e != cudaErrorNotReady) check(e, "cudaStreamQuery");
      }
      return seconds_since(t0);
    });
  }

  void launch_sync(const MetricDef& d) {
    measure(d, [&](long n) {
      auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) {
        launch_null_kernel(nullptr);
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      }
      double s = seconds_since(t0);
      check(cudaGetLastError(), "null kernel launch");
      return s;
    });
  }

  void launch_async(const MetricDef& d, cudaStream_t stream) {
    if (!stream) return fail(d, "cudaStreamCreate failed", "no stream to launch on");
    measure(d, [&](long n) {
      auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) launch_null_kernel(stream);
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      double s = seconds_since(t0);
      check(cudaGetLastError(), "null kernel launch");
      return s;
    });
  }

  // Buffers are allocated on first use, sized for the largest selected copy/memset, and kept
  // for the rest of the suite. A failed allocation fails every metric that needs it.
  size_t largest_selected(bool need_host, bool pinned) const {
    size_t largest = 0;
    for (const MetricDef& d : metric_catalog()) {
      if (!opt_.selection.selected(d.id)) continue;
      bool uses = need_host ? d.family == Family::Memcpy && d.pinned == pinned
                            : d.family == Family::Memcpy || d.family == Family::Memset;
      if (uses) largest = std::max(largest, d.bytes);
    }
    return largest;
  }

  void* device_buffer() {
    if (!device_.ptr && device_error_.empty()) {
      size_t bytes = largest_selected(false, false);
      cudaError_t e = cudaMalloc(&device_.ptr, bytes);
      if (e != cudaSuccess) {
        device_.ptr = nullptr;
        cudaGetLastError();
        device_error_ = cudaGetErrorName(e);
        device_error_detail_ =
            CudaFailure(e, ("cudaMalloc(" + format_bytes(bytes) + ")").c_str()).what();
      }
    }
    return device_.ptr;
  }

  void* host_buffer(bool pinned) {
    if (!pinned) {
      if (pageable_.empty()) {
        // Touched (filled) so that every page exists before any copy is timed.
        pageable_.assign(largest_selected(true, false), 0x5a);
      }
      return pageable_.data();
    }
    if (!pinned_.ptr && pinned_error_.empty()) {
      size_t bytes = largest_selected(true, true);
      cudaError_t e = cudaMallocHost(&pinned_.ptr, bytes);
      if (e != cudaSuccess) {
        pinned_.ptr = nullptr;
        cudaGetLastError();
        pinned_error_ = cudaGetErrorName(e);
        pinned_error_detail_ =
            CudaFailure(e, ("cudaMallocHost(" + format_bytes(bytes) + ")").c_str()).what();
      } else {
        std::memset(pinned_.ptr, 0x5a, bytes);
      }
    }
    return pinned_.ptr;
  }

  void memcpy_metric(const MetricDef& d) {
    void* dev = device_buffer();
    if (!dev) return fail(d, device_error_, device_error_detail_);
    void* host = host_buffer(d.pinned);
    if (!host) return fail(d, pinned_error_, pinned_error_detail_);
    void* dst = d.h2d ? dev : host;
    const void* src = d.h2d ? host : dev;
    cudaMemcpyKind kind = d.h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    measure(d, [&](long n) {
      auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) check(cudaMemcpy(dst, src, d.bytes, kind), "cudaMemcpy");
      // A pageable H2D cudaMemcpy may return before its DMA has finished.
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      return seconds_since(t0);
    });
  }

  void memset_metric(const MetricDef& d) {
    void* dev = device_buffer();
    if (!dev) return fail(d, device_error_, device_error_detail_);
    measure(d, [&](long n) {
      auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) check(cudaMemset(dev, 0, d.bytes), "cudaMemset");
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      return seconds_since(t0);
    });
  }

  const SuiteOptions& opt_;
  RunResult result_;
  DeviceBuffer device_;
  PinnedBuffer pinned_;
  std::vector<unsigned char> pageable_;
  std::string device_error_, device_error_detail_, pinned_error_, pinned_error_detail_;
};

}  // namespace

int run_suite(const SuiteOptions& options) { return Suite(options).run(); }

}  // namespace remora::bench

// Status and Result<T>: the one error vocabulary of Remora.
//
// A Status is a code in a domain: the API family whose status type the code belongs to.
// Codes of the cudart domain are the CUDA runtime's cudaError_t numbers (Err names the ones
// Remora produces itself), so an error produced anywhere (the worker's driver call, the
// ledger, a transport) reaches the application unchanged. A library call (cuBLAS, cuDNN, the
// driver API, ...) carries its library's own status value in that library's domain. Only the
// extern "C" boundaries turn a Status into the caller's type (cudaError_t, CUresult,
// cublasStatus_t, ...), with the conversion each API description names; memmgr/ and
// protocol/ never include CUDA headers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace remora {

enum class Err : uint32_t {
  kSuccess = 0,
  kInvalidValue = 1,
  kMemoryAllocation = 2,
  kInitializationError = 3,
  kCudartUnloading = 4,
  kInvalidConfiguration = 9,
  kInvalidPitchValue = 12,
  kInvalidSymbol = 13,
  kInvalidHostPointer = 16,
  kInvalidDevicePointer = 17,
  kInvalidMemcpyDirection = 21,
  kDevicesUnavailable = 46,
  kInvalidDeviceFunction = 98,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kInvalidKernelImage = 200,
  kNoKernelImageForDevice = 209,
  kInvalidResourceHandle = 400,
  kSymbolNotFound = 500,
  kNotReady = 600,
  kIllegalAddress = 700,
  kLaunchOutOfResources = 701,
  kPeerAccessAlreadyEnabled = 704,
  kPeerAccessNotEnabled = 705,
  kHostMemoryAlreadyRegistered = 712,
  kHostMemoryNotRegistered = 713,
  kLaunchFailure = 719,
  kNotPermitted = 800,
  kNotSupported = 801,
  kTimeout = 909,
  kUnknown = 999,
};

// Short symbolic name ("cudaErrorInvalidValue" style) for logs; never allocates.
std::string_view ErrName(Err e);

// The API family of a status code (numbers travel on the wire: never renumber).
enum class Domain : uint16_t {
  kCudart = 0,    // cudaError_t
  kCuda = 1,      // CUresult (driver API)
  kCublas = 2,    // cublasStatus_t
  kCublasLt = 3,  // cublasStatus_t of cuBLASLt
  kCudnn = 4,     // cudnnStatus_t
  kCufft = 5,     // cufftResult
  kCurand = 6,    // curandStatus_t
  kCusolver = 7,  // cusolverStatus_t
  kCusparse = 8,  // cusparseStatus_t
  kNccl = 9,      // ncclResult_t
  kNvrtc = 10,    // nvrtcResult
};
inline constexpr uint16_t kNumDomains = 11;
std::string_view DomainName(Domain d);

class [[nodiscard]] Status {
 public:
  Status() = default;
  // A code of the cudart domain.
  Status(Err code, std::string message) : code_(static_cast<uint32_t>(code)), message_(std::move(message)) {}
  // A library's own status value (0 is success in every domain).
  Status(Domain domain, uint32_t code, std::string message)
      : domain_(domain), code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == 0; }
  Domain domain() const { return domain_; }
  // The code in its own domain.
  uint32_t raw() const { return code_; }
  // The code in the runtime's vocabulary: itself in the cudart domain; in the driver's, the
  // same number (CUresult and cudaError_t coincide for every code the driver returns that
  // Remora acts on); kUnknown for a library's own status values.
  Err code() const {
    if (domain_ == Domain::kCudart || domain_ == Domain::kCuda || code_ == 0) return static_cast<Err>(code_);
    return Err::kUnknown;
  }
  const std::string& message() const { return message_; }
  // "cudaErrorInvalidValue: <message>" ("cublas status 7: <message>" in other domains)
  std::string ToString() const;

 private:
  Domain domain_ = Domain::kCudart;
  uint32_t code_ = 0;
  std::string message_;
};

template <typename... Args>
Status Error(Err code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(Err::kUnknown, "Result built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  Status take_status() { return ok() ? Status() : std::move(std::get<Status>(v_)); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace remora

#define REMORA_CONCAT_INNER(a, b) a##b
#define REMORA_CONCAT(a, b) REMORA_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not OK.
#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::remora::Status _st = (expr);                    \
    if (!_st.ok()) return _st;                        \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F())`: binds the value of a Result or returns its Status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(REMORA_CONCAT(_res_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.take_status();    \
  lhs = std::move(tmp).value()

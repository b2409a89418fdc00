// Status and Result<T>: the one error vocabulary of Remora.
//
// Error codes are the CUDA runtime's cudaError_t numbers, so an error produced anywhere
// (the worker's driver call, the ledger, a transport) reaches the application unchanged.
// Only the shim's extern "C" boundary turns a Status into cudaError_t (a cast, checked by
// static_asserts there); memmgr/ and protocol/ never include CUDA headers.
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

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Err code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Err::kSuccess; }
  Err code() const { return code_; }
  const std::string& message() const { return message_; }
  // "cudaErrorInvalidValue: <message>"
  std::string ToString() const;

 private:
  Err code_ = Err::kSuccess;
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

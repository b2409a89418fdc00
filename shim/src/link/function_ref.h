// Non-owning reference to a callable (no allocation, unlike std::function). The callable
// must outlive the reference; used for callbacks that run before the call returns.
#pragma once

#include <type_traits>
#include <utility>

namespace remora::shim {

template <typename Sig>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  // An empty reference (tests false); calling it is undefined.
  FunctionRef() : obj_(nullptr), call_(nullptr) {}
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...); }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }
  explicit operator bool() const { return call_ != nullptr; }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace remora::shim

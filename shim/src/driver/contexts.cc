#include "driver/contexts.h"

#include <utility>

#include "process.h"
#include "runtime.h"

namespace remora::shim::driver {

Contexts::PrimaryState& Contexts::State(int device) {
  PrimaryState& s = primary_[device];
  if (!s.ctx) {
    s.ctx = std::make_unique<Context>();
    s.ctx->device = device;
    s.ctx->primary = true;
    s.ctx->id = next_id_.fetch_add(1);
  }
  return s;
}

Context* Contexts::Primary(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return State(device).ctx.get();
}

Result<Context*> Contexts::Check(CUcontext c) {
  auto* ctx = reinterpret_cast<Context*>(c);
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx != nullptr && created_.count(ctx) && ctx->alive.load()) return ctx;
  for (auto& [dev, s] : primary_)
    if (s.ctx.get() == ctx) return ctx;
  return Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "not a live context of this process");
}

Context* Contexts::Create(int device, unsigned flags) {
  auto* c = new Context();  // freed never: a stale CUcontext must stay safe to look at
  c->device = device;
  c->flags = flags;
  c->id = next_id_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  created_.insert(c);
  return c;
}

Status Contexts::Destroy(Context* c) {
  if (c->primary) return Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "a primary context cannot be destroyed");
  std::lock_guard<std::mutex> lock(mu_);
  if (!created_.count(c) || !c->alive.load())
    return Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "not a live context of this process");
  c->alive.store(false);
  return Status::Ok();
}

int Contexts::Retain(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return ++State(device).refs;
}

Result<int> Contexts::Release(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  PrimaryState& s = State(device);
  if (s.refs == 0) return Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "the primary context was not retained");
  return --s.refs;
}

void Contexts::MarkRuntimeActive(int device) {
  if (device < 0 || device >= 64) return;
  uint64_t bit = uint64_t{1} << device;
  if (runtime_mask_.load(std::memory_order_relaxed) & bit) return;
  runtime_mask_.fetch_or(bit);
}

bool Contexts::Active(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  bool runtime = device >= 0 && device < 64 && (runtime_mask_.load() & (uint64_t{1} << device));
  return runtime || State(device).refs > 0;
}

unsigned Contexts::PrimaryFlags(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return State(device).flags;
}

void Contexts::SetPrimaryFlags(int device, unsigned flags) {
  std::lock_guard<std::mutex> lock(mu_);
  State(device).flags = flags;
  State(device).ctx->flags = flags;
}

void Contexts::Own(uint64_t handle, std::vector<uint64_t> Owned::*list) {
  Context* c = Current();
  if (c == nullptr || c->primary) return;
  std::lock_guard<std::mutex> lock(mu_);
  (c->owned.*list).push_back(handle);
}

void Contexts::Disown(uint64_t handle, std::vector<uint64_t> Owned::*list) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Context* c : created_)
    if (c->alive.load()) std::erase(c->owned.*list, handle);
}

Context* Contexts::OwnerOf(uint64_t handle, std::vector<uint64_t> Owned::*list) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Context* c : created_) {
    if (!c->alive.load()) continue;
    for (uint64_t h : c->owned.*list)
      if (h == handle) return c;
  }
  return nullptr;
}

Owned Contexts::TakeOwned(Context* c) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(c->owned, Owned{});
}

// ---- the thread's stack ---------------------------------------------------------------

namespace {
void Follow(Context* c) {
  // The runtime's current device follows the driver's current context.
  if (c == nullptr) return;
  ThreadState& t = Thread();
  t.device = c->device;
  t.device_set = true;
}
}  // namespace

Context* Current() {
  ThreadState& t = Thread();
  if (!t.ctx_stack.empty()) return t.ctx_stack.back();
  if (t.runtime_used) return Process::Get().contexts().Primary(t.device);
  return nullptr;
}

void SetCurrent(Context* c) {
  ThreadState& t = Thread();
  if (c == nullptr) {
    if (!t.ctx_stack.empty()) t.ctx_stack.pop_back();
    t.runtime_used = false;
    return;
  }
  if (t.ctx_stack.empty()) t.ctx_stack.push_back(c);
  else t.ctx_stack.back() = c;
  Follow(c);
}

void Push(Context* c) {
  Thread().ctx_stack.push_back(c);
  Follow(c);
}

Context* Pop() {
  ThreadState& t = Thread();
  if (t.ctx_stack.empty()) return nullptr;
  Context* c = t.ctx_stack.back();
  t.ctx_stack.pop_back();
  if (!t.ctx_stack.empty()) Follow(t.ctx_stack.back());
  return c;
}

Result<int> CurrentDevice() {
  Context* c = Current();
  if (c == nullptr) return Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "no context is current on this thread");
  if (!c->alive.load()) return Status(Domain::kCuda, CUDA_ERROR_CONTEXT_IS_DESTROYED, "the current context was destroyed");
  return c->device;
}

}  // namespace remora::shim::driver

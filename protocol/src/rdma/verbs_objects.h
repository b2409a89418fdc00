// RAII owners for verbs and rdma_cm objects, registered memory and CM events. Every object
// is released through the dlopen()ed table (verbs_api.h) when its owner dies; owners that
// are members of one class are declared in creation order, so they are released in reverse.
// Move-only, not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "rdma/verbs_api.h"
#include "remora/base/status.h"

namespace remora::rdma {

template <typename T, void (*Destroy)(T*)>
class Owned {
 public:
  Owned() = default;
  explicit Owned(T* p) : p_(p) {}
  Owned(Owned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) reset(std::exchange(o.p_, nullptr));
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  T* get() const { return p_; }
  T* operator->() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  T* release() { return std::exchange(p_, nullptr); }
  void reset(T* p = nullptr) {
    if (p_ != nullptr) Destroy(p_);
    p_ = p;
  }

 private:
  T* p_ = nullptr;
};

void DestroyEventChannel(rdma_event_channel* ec);
void DestroyCmId(rdma_cm_id* id);
void DestroyQpOf(rdma_cm_id* id);  // rdma_destroy_qp: the QP created on `id`
void DeallocPd(ibv_pd* pd);
void DestroyCompChannel(ibv_comp_channel* ch);
void DestroyCq(ibv_cq* cq);
void DeregMr(ibv_mr* mr);

using EventChannel = Owned<rdma_event_channel, DestroyEventChannel>;
using CmId = Owned<rdma_cm_id, DestroyCmId>;
using QpOf = Owned<rdma_cm_id, DestroyQpOf>;  // holds (does not own) the id whose QP it owns
using Pd = Owned<ibv_pd, DeallocPd>;
using CompChannel = Owned<ibv_comp_channel, DestroyCompChannel>;
using Cq = Owned<ibv_cq, DestroyCq>;
using Mr = Owned<ibv_mr, DeregMr>;

// Page-aligned anonymous memory, unmapped on destruction.
class Memory {
 public:
  Memory() = default;
  static Result<Memory> Map(size_t bytes);
  Memory(Memory&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Memory& operator=(Memory&& o) noexcept;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory();
  std::byte* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  std::byte* p_ = nullptr;
  size_t n_ = 0;
};

// Registers [p, p + n) with `pd`. Errors carry errno's text (kMemoryAllocation).
Result<Mr> Register(ibv_pd* pd, void* p, size_t n, int access);

// A CM event; acknowledged when the owner dies (its private data dies with it).
class CmEvent {
 public:
  CmEvent() = default;
  explicit CmEvent(rdma_cm_event* ev) : ev_(ev) {}
  CmEvent(CmEvent&& o) noexcept : ev_(std::exchange(o.ev_, nullptr)) {}
  CmEvent& operator=(CmEvent&& o) noexcept;
  CmEvent(const CmEvent&) = delete;
  CmEvent& operator=(const CmEvent&) = delete;
  ~CmEvent();
  rdma_cm_event* operator->() const { return ev_; }
  rdma_cm_event* get() const { return ev_; }
  const char* name() const;

 private:
  rdma_cm_event* ev_ = nullptr;
};

// Waits for the next CM event on `ec` (whose fd must be non-blocking) until `deadline_ns`
// (MonotonicNanos clock): kTimeout then, kDevicesUnavailable if `watch_fd` (>= 0, the TCP
// socket of the session) is closed by the peer meanwhile.
Result<CmEvent> NextCmEvent(rdma_event_channel* ec, int watch_fd, uint64_t deadline_ns, const char* what);

Status SetNonBlocking(int fd);

// True when the stream socket `fd` has been closed or reset by the peer (never blocks).
// Data the peer sent on it (it should send none) is read and dropped.
bool StreamClosed(int fd);

}  // namespace remora::rdma

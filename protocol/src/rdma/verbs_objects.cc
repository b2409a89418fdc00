#include "rdma/verbs_objects.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <cerrno>

#include "remora/base/util.h"

namespace remora::rdma {

void DestroyEventChannel(rdma_event_channel* ec) { Verbs().destroy_event_channel(ec); }
void DestroyCmId(rdma_cm_id* id) { Verbs().destroy_id(id); }
void DestroyQpOf(rdma_cm_id* id) { Verbs().destroy_qp(id); }
void DeallocPd(ibv_pd* pd) { Verbs().dealloc_pd(pd); }
void DestroyCompChannel(ibv_comp_channel* ch) { Verbs().destroy_comp_channel(ch); }
void DestroyCq(ibv_cq* cq) { Verbs().destroy_cq(cq); }
void DeregMr(ibv_mr* mr) { Verbs().dereg_mr(mr); }

Result<Memory> Memory::Map(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return ErrnoStatus(Err::kMemoryAllocation, fmt::format("mmap({})", bytes), errno);
  Memory m;
  m.p_ = static_cast<std::byte*>(p);
  m.n_ = bytes;
  return m;
}

Memory& Memory::operator=(Memory&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) ::munmap(p_, n_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

Memory::~Memory() {
  if (p_ != nullptr) ::munmap(p_, n_);
}

Result<Mr> Register(ibv_pd* pd, void* p, size_t n, int access) {
  errno = 0;
  ibv_mr* mr = Verbs().reg_mr(pd, p, n, access);
  if (mr == nullptr)
    return ErrnoStatus(Err::kMemoryAllocation, fmt::format("ibv_reg_mr({} bytes)", n), errno != 0 ? errno : ENOMEM);
  return Mr(mr);
}

CmEvent& CmEvent::operator=(CmEvent&& o) noexcept {
  if (this != &o) {
    if (ev_ != nullptr) Verbs().ack_cm_event(ev_);
    ev_ = std::exchange(o.ev_, nullptr);
  }
  return *this;
}

CmEvent::~CmEvent() {
  if (ev_ != nullptr) Verbs().ack_cm_event(ev_);
}

const char* CmEvent::name() const { return ev_ != nullptr ? Verbs().event_str(ev_->event) : "none"; }

Result<CmEvent> NextCmEvent(rdma_event_channel* ec, int watch_fd, uint64_t deadline_ns, const char* what) {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (Verbs().get_cm_event(ec, &ev) == 0) return CmEvent(ev);
    if (errno != EAGAIN && errno != EINTR) return ErrnoStatus(Err::kDevicesUnavailable, "rdma_get_cm_event", errno);
    uint64_t now = MonotonicNanos();
    if (now >= deadline_ns) return Error(Err::kTimeout, "timed out waiting for {}", what);
    struct pollfd p[2] = {{ec->fd, POLLIN, 0}, {watch_fd, POLLIN | POLLRDHUP, 0}};
    int ms = static_cast<int>(std::min<uint64_t>((deadline_ns - now) / 1000000 + 1, 1000));
    int r = ::poll(p, watch_fd >= 0 ? 2 : 1, ms);
    if (r < 0 && errno != EINTR) return ErrnoStatus(Err::kDevicesUnavailable, "poll", errno);
    if (watch_fd >= 0 && p[1].revents != 0 && StreamClosed(watch_fd))
      return Error(Err::kDevicesUnavailable, "the peer closed the session while waiting for {}", what);
  }
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return ErrnoStatus(Err::kUnknown, "fcntl(O_NONBLOCK)", errno);
  return Status::Ok();
}

bool StreamClosed(int fd) {
  char buf[4096];
  for (int i = 0; i < 16; i++) {
    ssize_t r = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r == 0) return true;
    if (r > 0) continue;  // unexpected bytes: drop them
    if (errno == EINTR) continue;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
  return false;
}

}  // namespace remora::rdma

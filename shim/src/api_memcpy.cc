// Copies and memsets in every direction (the runtime's cudaMemcpy*, cudaMemset* and the
// shared Memcpy/Memset behind them and the driver facade's): pointers are checked against this
// process's own tables first, so a bad argument fails at once, as with CUDA; the worker checks
// them again authoritatively. Any thread.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "callbacks.h"
#include "device_core.h"
#include "export.h"
#include "memops.h"
#include "multi_server.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "runtime.h"
#include "stream_core.h"
#include "wire_args.h"

namespace remora::shim {

Status SetMemory(void* dst, int value, size_t n, cudaStream_t stream, bool per_thread) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (st.ok() && n > 0) st = rt.CheckDeviceRange(U(dst), n);
  if (st.ok()) st = rt.managed().BeforeDeviceWork();
  if (!st.ok()) return st;
  if (n == 0) return Status::Ok();
  // Several servers: on the default stream, memory of another server than the current
  // device's is set on its own device's stream.
  if (auto a = rt.server_count() > 1 ? rt.FindDevice(U(dst)) : std::nullopt) {
    if (IsDefaultStream(stream) && !rt.SameServer(device, a->device))
      device = a->device;
  }
  // Asynchronous with respect to the host (for device memory), as in CUDA.
  return c->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initMemset();
    m.setDst(U(dst));
    m.setValue(static_cast<uint8_t>(value));
    m.setSize(n);
    SetStream(m.initStream(), stream, per_thread);
    m.setAsync(true);
  });
}

cudaError_t Memset(void* dst, int value, size_t n, cudaStream_t stream, bool per_thread, const char* call) {
  return Finish(SetMemory(dst, value, n, stream, per_thread), call);
}

Side Classify(const void* p) { return Runtime::Get().FindDevice(U(p)) ? Side::kDevice : Side::kHost; }

uint64_t RegionOf(const Allocation& a) { return a.cookie >> 32; }

namespace {

// Whether [p, p+n) lies in one shared pinned region (`a` is FindHost(p)); its id and the
// offset if so.
bool InSharedRegion(const std::optional<Allocation>& a, const void* p, size_t n, uint64_t* region, uint64_t* offset) {
  if (!a || RegionOf(*a) == 0 || U(p) + n > a->base + a->size) return false;
  *region = RegionOf(*a);
  *offset = U(p) - a->base;
  return true;
}

// Device-to-pageable copies up to this size go through the client's shared bounce buffer.
constexpr size_t kSmallDtoH = 64 << 10;

// The client's shared bounce buffer, created on first use; false if the transport cannot
// share memory. The caller holds b.mu.
bool BounceReady(Client* cl, Client::SharedBounce& b) {
  // Sharing it registers host memory with the driver, which CUDA refuses (and which
  // invalidates the capture) while a stream captures: the copy takes the other path then,
  // and the buffer is made at the first small copy after the capture.
  if (!b.tried && cl->captures_active() > 0) return false;
  if (!b.tried) {
    b.tried = true;
    b.region = ShareWithWorker(cl, &b.base, kSmallDtoH);
    if (b.region != 0) b.size = kSmallDtoH;
    else b.base = nullptr;
  }
  return b.base != nullptr;
}

}  // namespace

Status CopyMemory(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool per_thread,
                  bool async) {
  Runtime& rt = Runtime::Get();
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return Error(Err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind {}", static_cast<int>(kind));
  ASSIGN_OR_RETURN(Client * const session, rt.Session());
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return st;
  if (n == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) return Error(Err::kInvalidValue, "NULL pointer");

  // An explicit kind is trusted for the host side (a remote device address may equal a
  // local host address); cudaMemcpyDefault infers both sides from this process's tables.
  Side from = Classify(src), to = Classify(dst);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      from = Side::kHost;
      to = Side::kDevice;
      break;
    case cudaMemcpyDeviceToHost:
      from = Side::kDevice;
      to = Side::kHost;
      break;
    case cudaMemcpyDeviceToDevice:
      from = to = Side::kDevice;
      break;
    case cudaMemcpyHostToHost:
      from = to = Side::kHost;
      break;
    default:
      break;
  }
  // Managed memory is device memory whatever the kind says: its host copy is the shim's to
  // keep coherent (managed.h), never read or written by a transfer.
  ManagedMemory& managed = rt.managed();
  if (!managed.empty()) {
    if (managed.Contains(U(src))) from = Side::kDevice;
    if (managed.Contains(U(dst))) to = Side::kDevice;
  }
  // A device side must lie in the session's device memory. Failing that, pinned memory of
  // this process is a device address too (unified addressing: natively a device-to-device
  // copy takes it, and XLA copies so): that side is host. Looked up only when the check fails.
  auto device_side = [&](const void* p, Side* side) {
    Status checked = rt.CheckDeviceRange(U(p), n);
    if (checked.ok() || kind == cudaMemcpyDefault) return checked;
    auto a = rt.FindHost(p);
    if (!a || U(p) + n > a->base + a->size) return checked;
    *side = Side::kHost;
    return Status::Ok();
  };
  if (from == Side::kDevice) st = device_side(src, &from);
  if (st.ok() && to == Side::kDevice) st = device_side(dst, &to);
  if (st.ok() && (from == Side::kDevice || to == Side::kDevice)) st = managed.BeforeDeviceWork();
  if (!st.ok()) return st;
  Client* cl = session;
  if (rt.server_count() > 1) {
    // Several servers: the copy goes to the server of the device memory it names; between
    // two servers' devices it is staged through this process (multi_server.h).
    int src_dev = -1, dst_dev = -1;
    if (auto a = from == Side::kDevice ? rt.FindDevice(U(src)) : std::nullopt) src_dev = a->device;
    if (auto a = to == Side::kDevice ? rt.FindDevice(U(dst)) : std::nullopt) dst_dev = a->device;
    if (src_dev >= 0 && dst_dev >= 0 && !rt.SameServer(src_dev, dst_dev)) {
      st = CrossServerCopy(U(dst), dst_dev, U(src), src_dev, n, stream, per_thread);
      return async ? st : AfterSync(cl, st);
    }
    int target = dst_dev >= 0 ? dst_dev : src_dev >= 0 ? src_dev : device;
    if (IsDefaultStream(stream)) {
      if (!rt.SameServer(device, target)) device = target;  // else the current device's stream
    } else if (!rt.SameServer(device, target))
      return Error(Err::kInvalidValue, "a stream of device {} cannot copy memory of device {}: they are on two "
                   "Remora servers", device, target);
    cl = cl->LinkFor(device);
  }
  // Pinned memory shared with a worker is the first server's (AllocatePinned).
  const bool regions = cl == session;

  if (from == Side::kHost && to == Side::kHost) {
    // Between pinned buffers an asynchronous copy is stream work, as the GPU's DMA is (a copy
    // into one may be queued before it): it runs in this process when the stream gets there.
    if (async && (rt.FindHost(src) || rt.FindHost(dst))) {
      return QueueHostFunction(stream, [dst, src, n] { std::memmove(dst, src, n); }, per_thread);
    }
    std::memmove(dst, src, n);
    return Status::Ok();
  }
  if (from == Side::kHost) {
    auto host = rt.FindHost(src);
    uint64_t region = 0, offset = 0;
    if (regions && InSharedRegion(host, src, n, &region, &offset)) {
      // Zero copy: the worker DMAs from the pinned buffer itself, in stream order, as CUDA
      // does (the application must not change it before the copy completes).
      auto build = [&](wire::Request::Builder& r) {
        auto m = r.initMemcpyHtoD();
        m.setDst(U(dst));
        m.setSize(n);
        SetStream(m.initStream(), stream, per_thread);
        m.setAsync(async);
        m.setHostRegion(region);
        m.setHostOffset(offset);
      };
      if (async) return cl->Post(device, build);
      return AfterSync(cl, cl->Call(device, build, [](wire::Reply::Reader&) { return Status::Ok(); }));
    }
    // The source is shipped before this returns: the application may reuse it at once. From
    // pageable memory CUDA returns once the data is staged, before the DMA: so do we (the
    // copy runs in stream order; a failure surfaces at the next synchronising call).
    // Into managed memory a synchronous copy completes before it returns: the host may read
    // the destination next, and its copy is invalidated only by a call that waited.
    bool pageable = !host && (async || managed.empty() || !managed.Contains(U(dst)));
    // The bytes are read now, not when the stream gets there. That is CUDA's behaviour for
    // an asynchronous copy from pageable memory; otherwise a host function queued before the
    // copy may still write the source: let those run first.
    if (!(async && pageable)) HostCallbacks::Get().WaitForRegistered();
    // An asynchronous copy into this pinned memory queued before may not have landed yet.
    if (host) cl->AwaitLandingsInto(src, n);
    auto build = [&](wire::Request::Builder& r) {
      auto m = r.initMemcpyHtoD();
      m.setDst(U(dst));
      m.setSize(n);
      SetStream(m.initStream(), stream, per_thread);
      m.setAsync(async || pageable);
      m.setClientAddr(U(src));  // a capture binds it (the bytes are read again at each launch)
    };
    if (async || pageable) {
      if (Status sticky = cl->sticky(); !sticky.ok()) return sticky;
      return cl->Post(device, build, AsBytes(src, n));
    }
    st = cl->Call(device, build, [](wire::Reply::Reader&) { return Status::Ok(); }, AsBytes(src, n));
    return AfterSync(cl, st);
  }
  if (to == Side::kHost) {
    // A DMA straight into memory shared with the worker, posted or answered once done.
    // `captured`: the copy went into a graph (nothing was copied now).
    bool captured = false;
    // A copy the caller waited for drained its stream: a synchronisation of the stream next,
    // with nothing sent in between, is answered here (PyTorch's .item(): a copy, then
    // cudaStreamSynchronize). `seq`: read just before the copy is sent (Client::StreamIdle).
    uint64_t seq = 0;
    auto drained = [&](const Status& copied) {
      if (copied.ok() && !captured) cl->NoteStreamDrained(StreamKeyOf(stream, per_thread, device), seq);
      return copied;
    };
    auto into_region = [&](uint64_t region, uint64_t offset, bool post, bool bounce = false) {
      auto build = [&](wire::Request::Builder& r) {
        auto m = r.initMemcpyDtoH();
        m.setSrc(U(src));
        m.setSize(n);
        SetStream(m.initStream(), stream, per_thread);
        m.setHostRegion(region);
        m.setHostOffset(offset);
        m.setAsync(post);
        m.setClientAddr(U(dst));
        m.setViaBounce(bounce);
      };
      if (post) return cl->Post(device, build);
      seq = cl->work_sequence();
      return drained(cl->Call(device, build, [&](wire::Reply::Reader& r) {
        captured = r.isValue() && r.getValue() == kCapturedCopy;
        return Status::Ok();
      }));
    };
    auto pinned = rt.FindHost(dst);
    uint64_t region = 0, offset = 0;
    if (regions && InSharedRegion(pinned, dst, n, &region, &offset)) {
      // Zero copy into the pinned buffer; asynchronous really is asynchronous.
      st = into_region(region, offset, async);
      return async ? st : AfterSync(cl, st);
    }
    if (n <= kSmallDtoH && !pinned) {
      // Into pageable memory: DMA into the client's shared bounce buffer and copy out, which
      // is cheaper than carrying the bytes in the reply. One copy at a time uses it; a
      // concurrent one (or a transport that cannot share memory) takes the path below.
      Client::SharedBounce& b = cl->shared_bounce();
      std::unique_lock<std::mutex> lock(b.mu, std::try_to_lock);
      if (lock.owns_lock() && BounceReady(cl, b)) {
        st = into_region(b.region, 0, false, true);
        if (st.ok() && !captured) std::memcpy(dst, b.base, n);
        return async ? st : AfterSync(cl, st);
      }
    }
    auto build = [&](wire::Request::Builder& r) {
      auto m = r.initMemcpyDtoH();
      m.setSrc(U(src));
      m.setSize(n);
      SetStream(m.initStream(), stream, per_thread);
      m.setClientAddr(U(dst));
    };
    // Into pinned memory an asynchronous copy really is asynchronous: the data lands when
    // the stream reaches it, and its reply drains the stream (a synchronisation next waits for
    // that reply instead of a round trip of its own). Into pageable memory CUDA returns only
    // once it is there.
    if (async && pinned && U(dst) + n <= pinned->base + pinned->size) {
      const StreamKey key = StreamKeyOf(stream, per_thread, device);
      return cl->PostExpectingBulk(device, build, AsWritableBytes(dst, n), &key);
    }
    seq = cl->work_sequence();
    st = drained(cl->Call(device, build, [](wire::Reply::Reader&) { return Status::Ok(); }, {}, AsWritableBytes(dst, n)));
    return async ? st : AfterSync(cl, st);
  }
  // Device to device: asynchronous with respect to the host in both forms.
  st = cl->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initMemcpyDtoD();
    m.setDst(U(dst));
    m.setSrc(U(src));
    m.setSize(n);
    SetStream(m.initStream(), stream, per_thread);
    m.setAsync(true);
  });
  return st;
}

cudaError_t Memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool per_thread,
                   bool async, const char* call) {
  return Finish(CopyMemory(dst, src, n, kind, stream, per_thread, async), call);
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

// cudaMemset is asynchronous with respect to the host for device memory and fully synchronous
// for pinned host memory and managed memory (CUDA's API synchronisation behaviour).
static cudaError_t SynchronousMemset(void* devPtr, int value, size_t count, bool per_thread) {
  cudaError_t r = Memset(devPtr, value, count, nullptr, per_thread, "cudaMemset");
  Runtime& rt = Runtime::Get();
  if (r != cudaSuccess || count == 0 || (!rt.managed().Contains(U(devPtr)) && !rt.FindHost(devPtr))) return r;
  return cudaStreamSynchronize(per_thread ? cudaStreamPerThread : nullptr);
}
REMORA_API cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return SynchronousMemset(devPtr, value, count, false);
}
REMORA_API cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  return SynchronousMemset(devPtr, value, count, true);
}
REMORA_API cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return Memset(devPtr, value, count, stream, false, "cudaMemsetAsync");
}
REMORA_API cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return Memset(devPtr, value, count, stream, true, "cudaMemsetAsync");
}

REMORA_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Memcpy(dst, src, count, kind, nullptr, false, false, "cudaMemcpy");
}
REMORA_API cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Memcpy(dst, src, count, kind, nullptr, true, false, "cudaMemcpy");
}
REMORA_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return Memcpy(dst, src, count, kind, stream, false, true, "cudaMemcpyAsync");
}
REMORA_API cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                            cudaStream_t stream) {
  return Memcpy(dst, src, count, kind, stream, true, true, "cudaMemcpyAsync");
}

#include "worker/loop/compute_hook.h"

#include <algorithm>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/calls/generated_call.h"
#include "worker/session/executor.h"

namespace remora::worker {

// The gate's markers on one GPU: events of the executor's pool recorded behind the session's
// work, on streams the session still has and that are not capturing into a graph.
class ComputeHook::Markers final : public sched::MarkerOps {
 public:
  Markers(Executor& ex, int gpu) : ex_(ex), gpu_(gpu) {}

  Result<sched::Marker> Record(sched::StreamKey key) override {
    auto s = static_cast<DStream>(const_cast<void*>(key));
    if (!Alive(s)) return Error(Err::kInvalidResourceHandle, "the stream is gone");
    RETURN_IF_ERROR(ex_.SetDevice(gpu_));
    ASSIGN_OR_RETURN(bool capturing, ex_.driver().StreamCapturing(s));
    if (capturing) return Error(Err::kNotPermitted, "the stream is capturing into a graph");
    ASSIGN_OR_RETURN(DEvent e, ex_.AcquirePoolEvent(gpu_));
    Status st = ex_.driver().EventRecord(e, s);
    if (!st.ok()) {
      ex_.ReleasePoolEvent(gpu_, e);
      return st;
    }
    return static_cast<sched::Marker>(e);
  }
  bool Done(sched::Marker m) override {
    if (!ex_.SetDevice(gpu_).ok()) return true;
    return ex_.driver().EventQuery(static_cast<DEvent>(m)).code() != Err::kNotReady;
  }
  void Release(sched::Marker m) override { ex_.ReleasePoolEvent(gpu_, static_cast<DEvent>(m)); }

 private:
  // The legacy stream always; a created or per-thread stream while the session has it.
  bool Alive(DStream s) {
    if (s == nullptr) return true;
    bool found = false;
    ex_.session().streams().ForEach([&](uint64_t, Stream& x) { found |= x.stream == s && x.gpu == gpu_; });
    if (found) return true;
    for (const auto& [key, ps] : ex_.session().per_thread_streams())
      if (ps == s && key.second == gpu_) return true;
    return false;
  }
  Executor& ex_;
  int gpu_;
};

struct ComputeHook::PerGpu {
  PerGpu(sched::ComputeBoard& board, int gpu, uint32_t slot, Executor& ex)
      : markers(ex, gpu), gate(board, static_cast<uint32_t>(gpu), slot, markers) {}
  Markers markers;
  sched::GpuGate gate;
  bool reported = false;  // the session's waits were logged
};

ComputeHook::ComputeHook(sched::ComputeBoard& board, uint32_t slot, Executor& ex) : board_(board), slot_(slot), ex_(ex) {}

ComputeHook::~ComputeHook() { Close(); }

sched::GpuGate* ComputeHook::Gate(int gpu) {
  if (gpu < 0 || static_cast<size_t>(gpu) >= gpus_.size()) return nullptr;
  auto& g = gpus_[static_cast<size_t>(gpu)];
  if (!g) g = std::make_unique<PerGpu>(board_, gpu, slot_, ex_);
  return &g->gate;
}

bool ComputeHook::Admit(wire::Request::Reader req) {
  using W = wire::Request;
  switch (req.which()) {
    case W::LAUNCH_KERNEL: break;
    case W::API_CALL: {
      auto call = req.getApiCall();
      const Executor::LibraryBinding* lib = ex_.library(call.getLibrary());
      const OpEntry* op = lib != nullptr ? lib->table->Find(call.getFunction()) : nullptr;
      if (op == nullptr || !op->launches) return true;
      break;
    }
    default: return true;
  }
  auto gpu = ex_.GpuOf(req.getDevice());
  if (!gpu.ok() || *gpu >= static_cast<int>(gpus_.size())) return true;  // the handler answers the error
  auto& g = gpus_[static_cast<size_t>(*gpu)];
  if (!board_.enabled(static_cast<uint32_t>(*gpu)) && !(g && g->gate.active())) return true;
  admitted_ns_ = MonotonicNanos();
  sched::GpuGate* gate = Gate(*gpu);
  bool ok = gate->Admit(admitted_ns_);
  any_active_ |= gate->active();
  return ok;
}

void ComputeHook::Issued(const Stream& s) {
  if (!any_active_ || s.gpu < 0 || static_cast<size_t>(s.gpu) >= gpus_.size()) return;
  if (auto& g = gpus_[static_cast<size_t>(s.gpu)]) g->gate.Issued(s.stream, admitted_ns_);
}

void ComputeHook::Covered(const Stream& s, DEvent e) {
  if (!any_active_ || s.gpu < 0 || static_cast<size_t>(s.gpu) >= gpus_.size()) return;
  if (auto& g = gpus_[static_cast<size_t>(s.gpu)]) g->gate.Covered(s.stream, e);
}

void ComputeHook::Released(int gpu, DEvent e) {
  if (!any_active_ || gpu < 0 || static_cast<size_t>(gpu) >= gpus_.size()) return;
  if (auto& g = gpus_[static_cast<size_t>(gpu)]) g->gate.Released(e);
}

void ComputeHook::Poll() {
  if (!any_active_) return;
  uint64_t now = MonotonicNanos();
  bool active = false;
  for (auto& g : gpus_) {
    if (!g) continue;
    g->gate.Poll(now);
    active |= g->gate.active();
  }
  any_active_ = active;
}

uint64_t ComputeHook::MaxWaitUs() const {
  uint64_t ns = UINT64_MAX;
  if (any_active_)
    for (auto& g : gpus_)
      if (g) ns = std::min(ns, g->gate.MaxWaitNs());
  return ns == UINT64_MAX ? UINT64_MAX : ns / 1000;
}

bool ComputeHook::Busy() const {
  if (!any_active_) return false;
  for (auto& g : gpus_)
    if (g && (g->gate.busy() || g->gate.wants())) return true;
  return false;
}

void ComputeHook::Close() {
  uint64_t now = MonotonicNanos();
  for (size_t i = 0; i < gpus_.size(); i++) {
    auto& g = gpus_[i];
    if (!g) continue;
    g->gate.Close(now);
    // What waiting for turns cost this session (once: Close is idempotent).
    const sched::GpuGate::WaitStats& w = g->gate.wait_stats();
    if (w.waits > 0 && !g->reported) {
      g->reported = true;
      LOG_INFO("compute: GPU {}: GPU time {:.3f} ms; {} launch(es) waited for a turn, {:.1f} us on average, {:.1f} us at most", i,
               static_cast<double>(g->gate.charged_ns()) / 1e6, w.waits,
               static_cast<double>(w.total_ns) / static_cast<double>(w.waits) / 1e3, static_cast<double>(w.max_ns) / 1e3);
    }
  }
  any_active_ = false;
}

}  // namespace remora::worker

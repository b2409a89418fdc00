// Replies that wait for the GPU (gpu_waits.h). Executor thread only.
#include "worker/session/gpu_waits.h"

#include <algorithm>

#include "remora/base/log.h"

namespace remora::worker {
namespace {

// Replies once every tracked event has completed (first error wins).
class SyncWaitOp final : public PendingOp {
 public:
  struct Item {
    int gpu;
    DEvent event;
    bool pooled;
  };
  SyncWaitOp(uint64_t tag, std::vector<Item> items) : tag_(tag), items_(std::move(items)) {}
  ~SyncWaitOp() override {
    for (auto& it : items_) (void)it;  // pooled events are returned in Poll or by the executor at exit
  }

  Result<bool> Poll(Executor& ex) override {
    for (auto it = items_.begin(); it != items_.end();) {
      RETURN_IF_ERROR(ex.SetDevice(it->gpu));
      Status st = ex.driver().EventQuery(it->event);
      if (st.code() == Err::kNotReady) {
        ++it;
        continue;
      }
      if (!st.ok() && result_.ok()) result_ = st;
      // Done: a synchronisation the driver sees (the event is complete, so it returns at once).
      // Stream-ordered pools give back memory beyond their release threshold only then; a
      // query is not one, and their kept memory would stay charged to the tenant.
      if (st.ok()) {
        (void)ex.driver().EventSynchronize(it->event);
        ReconcilePools(ex, it->gpu);  // what the pools gave back is uncharged now
      }
      if (it->pooled) ex.ReleasePoolEvent(it->gpu, it->event);
      it = items_.erase(it);
    }
    if (!items_.empty()) return false;
    if (tag_ != 0) RETURN_IF_ERROR(ex.PostReply(tag_, result_));
    else ex.DeferError(result_);
    return true;
  }

 private:
  uint64_t tag_;
  std::vector<Item> items_;
  Status result_;
};


}  // namespace

std::vector<Executor::Stream> StreamsOf(Executor& ex, int gpu) {
  // The legacy stream waits for every blocking stream (per-thread ones included), so an
  // event there covers them; non-blocking streams need their own.
  std::vector<Executor::Stream> out{{nullptr, gpu, 0}};
  ex.session().streams().ForEach([&](uint64_t, Executor::Stream& s) {
    if (s.gpu == gpu && (s.flags & 0x1)) out.push_back(s);
  });
  return out;
}

AfterQueuedWorkOp::AfterQueuedWorkOp(Executor& ex, int gpu) {
  for (int g : ex.config().gpus) {
    if (g < 0 || (gpu >= 0 && g != gpu)) continue;
    for (const Executor::Stream& s : StreamsOf(ex, g)) {
      if (auto capturing = ex.Capturing(s); !capturing.ok() || *capturing) continue;  // nothing runs there
      if (auto e = ex.RecordPoolEvent(s); e.ok()) events_.emplace_back(s.gpu, *e);
    }
  }
}

Result<bool> AfterQueuedWorkOp::Poll(Executor& ex) {
  while (!events_.empty()) {
    auto [gpu, e] = events_.back();
    if (ex.driver().EventQuery(e).code() == Err::kNotReady) return false;
    ex.ReleasePoolEvent(gpu, e);
    events_.pop_back();
  }
  // The work queued before the call is done; work queued since may hold a host function,
  // which the call would wait for (executor.h, MayWaitForDevice).
  if (!ex.MayWaitForDevice()) return false;
  RETURN_IF_ERROR(Then(ex));
  return true;
}

void AfterQueuedWorkOp::Abandon(Executor& ex) {
  for (auto& [gpu, e] : events_) ex.ReleasePoolEvent(gpu, e);
  events_.clear();
  Dropped(ex);
}

Status ReplyWhenDone(Executor& ex, uint64_t tag, std::vector<Executor::Stream> streams) {
  // Nothing runs on a capturing stream: waiting for it is the error CUDA gives.
  if (ex.session().graphs().active_captures() > 0) {
    for (const auto& s : streams) {
      auto capturing = ex.Capturing(s);
      if (!capturing.ok()) return ReplyOrDefer(ex, tag, capturing.status());
      if (*capturing) return ReplyOrDefer(ex, tag, ex.CaptureViolation(s));
    }
  }
  std::vector<SyncWaitOp::Item> items;
  for (const auto& s : streams) {
    auto e = ex.RecordPoolEvent(s);
    if (!e.ok()) {
      for (auto& it : items) ex.ReleasePoolEvent(it.gpu, it.event);
      return ReplyOrDefer(ex, tag, e.status());
    }
    items.push_back({s.gpu, *e, true});
  }
  ex.AddPending(std::make_unique<SyncWaitOp>(tag, std::move(items)));
  return Status::Ok();
}

Status ReplyWhenEvent(Executor& ex, uint64_t tag, int gpu, DEvent event) {
  ex.AddPending(std::make_unique<SyncWaitOp>(tag, std::vector<SyncWaitOp::Item>{{gpu, event, false}}));
  return Status::Ok();
}

void ReconcilePools(Executor& ex, int gpu) {
  uint64_t& retained = ex.resources().pool_retained(gpu);
  if (retained == 0) return;
  // What the pools of `gpu` hold beyond live allocations (reserved minus used).
  std::vector<DPool> pools;
  if (auto d = ex.driver().DefaultMemPool(gpu); d.ok()) pools.push_back(*d);
  ex.session().pools().ForEach([&](uint64_t, Executor::Pool& p) {
    if (p.gpu == gpu && std::find(pools.begin(), pools.end(), p.pool) == pools.end()) pools.push_back(p.pool);
  });
  uint64_t kept = 0;
  for (DPool p : pools) {
    auto reserved = ex.driver().MemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    // A pool gives back what exceeds its release threshold when the application synchronises;
    // the worker synchronises by polling events, which the driver may not count as that, so
    // the trim the synchronisation would have made is made here - only down to the threshold,
    // and only when more than that is reserved (asked with the threshold at its maximum, the
    // trim emptied the pool on the H100's driver 580: tenancy-gpu's pool retention check).
    auto threshold = ex.driver().MemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
    if (reserved.ok() && threshold.ok() && *reserved > *threshold && ex.driver().MemPoolTrimTo(p, *threshold).ok())
      reserved = ex.driver().MemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    auto used = ex.driver().MemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    if (!reserved.ok() || !used.ok()) {
      LOG_DEBUG("pool of GPU {}: usage unknown ({}), its kept memory stays charged", gpu,
                (!reserved.ok() ? reserved.status() : used.status()).message());
      return;
    }
    LOG_DEBUG("pool of GPU {}: {} reserved, {} used, {} charged as kept", gpu, *reserved, *used, retained);
    kept += *reserved > *used ? *reserved - *used : 0;
  }
  if (kept < retained) {
    ex.ReleaseCharge(gpu, retained - kept);
    retained = kept;
  }
}

}  // namespace remora::worker

#include "worker/backend/host/emu_streams.h"

#include <algorithm>

namespace remora::worker {
namespace {

bool DepsMet(const std::vector<EmuDep>& deps) {
  return std::all_of(deps.begin(), deps.end(), [](const EmuDep& d) { return d.stream->completed.load() >= d.target; });
}

}  // namespace

EmuScheduler::EmuScheduler(int threads) {
  for (int i = 0; i < threads; i++) threads_.emplace_back([this] { Run(); });
}

EmuScheduler::~EmuScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void EmuScheduler::MakeRunnable(std::shared_ptr<EmuStream> s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    runnable_.push_back(std::move(s));
  }
  cv_.notify_one();
}

void EmuScheduler::Completed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_++;
    for (auto& s : waiting_) runnable_.push_back(std::move(s));
    waiting_.clear();
  }
  cv_.notify_all();
}

void EmuScheduler::Run() {
  for (;;) {
    std::shared_ptr<EmuStream> s;
    uint64_t seen;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !runnable_.empty(); });
      if (stop_) return;
      s = std::move(runnable_.front());
      runnable_.pop_front();
      seen = generation_;
    }
    std::function<void()> fn;
    bool blocked = false;
    {
      std::lock_guard<std::mutex> lock(s->mu_);
      if (s->queue_.empty()) {
        s->scheduled_ = false;
        continue;
      }
      if (DepsMet(s->queue_.front().deps)) {
        fn = std::move(s->queue_.front().fn);
        s->queue_.pop_front();
      } else {
        blocked = true;
      }
    }
    if (blocked) {
      // Park it until something completes (and if something did meanwhile, look again).
      std::lock_guard<std::mutex> lock(mu_);
      if (generation_ != seen) runnable_.push_back(std::move(s));
      else waiting_.push_back(std::move(s));
      continue;
    }
    fn();
    s->completed.fetch_add(1);
    bool more;
    {
      std::lock_guard<std::mutex> lock(s->mu_);
      more = !s->queue_.empty();
      if (!more) s->scheduled_ = false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation_++;
      for (auto& w : waiting_) runnable_.push_back(std::move(w));
      waiting_.clear();
      if (more) runnable_.push_back(std::move(s));
    }
    cv_.notify_all();
  }
}

void EmuStream::Submit(const std::shared_ptr<EmuStream>& self, std::vector<EmuDep> deps, std::function<void()> task,
                       bool inline_ok) {
  std::erase_if(deps, [](const EmuDep& d) { return d.stream->completed.load() >= d.target; });
  bool queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = !inline_ok || !deps.empty() || completed.load() < issued_;
    if (queued) {
      queue_.push_back(Task{std::move(deps), std::move(task)});
      issued_++;
      if (scheduled_) return;
      scheduled_ = true;
    }
  }
  // Nothing outstanding: it runs here and completes at once (not counted as issued).
  if (!queued) task();
  else scheduler_->MakeRunnable(self);
}

uint64_t EmuStream::Issued() {
  std::lock_guard<std::mutex> lock(mu_);
  return issued_;
}

}  // namespace remora::worker

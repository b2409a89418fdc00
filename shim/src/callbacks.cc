#include "callbacks.h"

#include <new>
#include <thread>

#include "remora/base/log.h"
#include "runtime.h"

namespace remora::shim {

uint64_t HostCallbacks::Add(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  waiting_.emplace(id, std::move(fn));
  if (!thread_started_) {
    thread_started_ = true;
    std::thread([this] { Loop(); }).detach();
  }
  cv_.notify_all();
  return id;
}

void HostCallbacks::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.erase(id);
  cv_.notify_all();
}

void HostCallbacks::Reached(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_.push_back(id);
  cv_.notify_all();
}

void HostCallbacks::WaitForRegistered() {
  std::unique_lock<std::mutex> lock(mu_);
  if (std::this_thread::get_id() == thread_id_) return;
  uint64_t upto = next_id_ - 1;
  cv_.wait(lock, [&] { return (waiting_.empty() || waiting_.begin()->first > upto) && (running_ == 0 || running_ > upto); });
}

void HostCallbacks::AfterFork() {
  new (&mu_) std::mutex();
  new (&cv_) std::condition_variable();
  waiting_.clear();
  ready_.clear();
  running_ = 0;
  thread_started_ = false;
}

void HostCallbacks::Loop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    thread_id_ = std::this_thread::get_id();
  }
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || !waiting_.empty(); });
    auto c = Runtime::Get().Session();
    if (!c.ok() || !(*c)->broken().ok()) {
      // The session is gone: these callbacks will never be reached.
      waiting_.clear();
      ready_.clear();
      cv_.notify_all();
      continue;
    }
    Client* client = *c;
    if (!ready_.empty()) {
      uint64_t id = ready_.front();
      ready_.pop_front();
      auto it = waiting_.find(id);
      if (it == waiting_.end()) continue;
      std::function<void()> fn = std::move(it->second);
      waiting_.erase(it);
      running_ = id;
      lock.unlock();
      fn();
      (void)client->Post(Thread().device, [&](wire::Request::Builder& r) { r.setCallbackDone(id); });
      lock.lock();
      running_ = 0;
      cv_.notify_all();
      continue;
    }
    lock.unlock();
    client->Pump(20);
  }
}

}  // namespace remora::shim

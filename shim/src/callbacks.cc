#include "callbacks.h"

#include <atomic>
#include <new>
#include <thread>

#include "remora/base/log.h"
#include "runtime.h"

namespace remora::shim {

void HostCallbacks::StartLocked() {
  if (!thread_started_) {
    thread_started_ = true;
    std::thread([this] { Loop(); }).detach();
  }
  cv_.notify_all();
}

uint64_t HostCallbacks::Add(std::function<void()> fn, void (*raw)(void*), void* raw_data, Client* link) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  waiting_.emplace(id, Entry{std::move(fn), raw, raw_data, link});
  StartLocked();
  return id;
}

uint64_t HostCallbacks::AddRepeat(void (*fn)(void*), void* data) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  repeat_.emplace(id, Entry{[fn, data] { fn(data); }, fn, data});
  StartLocked();
  return id;
}

uint64_t HostCallbacks::AddDetached(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  detached_.emplace(id, Entry{std::move(fn)});
  StartLocked();
  return id;
}

void HostCallbacks::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.erase(id);
  repeat_.erase(id);
  detached_.erase(id);
  cv_.notify_all();
}

void HostCallbacks::Notify(Client::CallbackEvent event, uint64_t id, Client* from) {
  std::lock_guard<std::mutex> lock(mu_);
  if (event == Client::CallbackEvent::kCancelled) {
    // The server refused it: it never runs (the call's error surfaces at the next sync).
    waiting_.erase(id);
  } else if (event == Client::CallbackEvent::kCaptured) {
    // Captured into a graph: it runs at each launch of it, not now.
    auto it = waiting_.find(id);
    if (it != waiting_.end()) {
      repeat_.emplace(id, std::move(it->second));
      waiting_.erase(it);
    }
  } else {
    ready_.push_back(Ready{event, id, from});
  }
  cv_.notify_all();
}

void HostCallbacks::NotifyGraphNode(uint64_t id, uint64_t exec, Client* from) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_.push_back(Ready{Client::CallbackEvent::kRepeat, id, from, exec});
  cv_.notify_all();
}

void HostCallbacks::AnswerGraphNode(Client* from, uint64_t id, uint64_t exec) {
  // Every host-to-device binding whole (a binding's copy after the node reads what the
  // function may have written; one already done is not changed by it). Bounded like the
  // worker's side: beyond it the staging keeps what the launch began with.
  constexpr uint64_t kMaxBytes = 4ull << 20;
  std::vector<api::cuda::WireBinding> reads;
  uint64_t total = 0;
  for (const auto& b : Runtime::Get().graphs().Bindings(exec)) {
    if (!b.to_device) continue;
    if (total + b.size > kMaxBytes) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        LOG_WARN("graph host nodes: more than {} bytes of host memory the server cannot reach are read by a graph's "
                 "copies; what a host node writes there beyond that reaches the device at the next launch", kMaxBytes);
      break;
    }
    total += b.size;
    reads.push_back(b);
  }
  (void)from->PostLocal(0, [&](wire::Request::Builder& r) {
    auto d = r.initGraphHostNodeDone();
    d.setId(id);
    d.setExec(exec);
    auto list = d.initReads(static_cast<unsigned>(reads.size()));
    for (unsigned i = 0; i < list.size(); i++) {
      list[i].setAddr(reads[i].client_addr);
      list[i].setData(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(reads[i].client_addr), reads[i].size));
    }
  });
}

std::pair<void (*)(void*), void*> HostCallbacks::Raw(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = repeat_.find(id);
  if (it == repeat_.end()) return {nullptr, nullptr};
  return {it->second.raw, it->second.raw_data};
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
  repeat_.clear();
  detached_.clear();
  ready_.clear();
  running_ = 0;
  thread_started_ = false;
}

bool HostCallbacks::ForgetLostLocked() {
  bool any_alive = false;
  for (Client* l : Runtime::Get().links()) {
    if (l->broken().ok()) {
      any_alive = true;
      continue;
    }
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second.link == l) {
        it = waiting_.erase(it);
        cv_.notify_all();
      } else {
        ++it;
      }
    }
  }
  return !any_alive;
}

namespace {
thread_local bool t_callback_thread = false;
}  // namespace

bool HostCallbacks::OnCallbackThread() { return t_callback_thread; }

void HostCallbacks::Loop() {
  t_callback_thread = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    thread_id_ = std::this_thread::get_id();
  }
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || !waiting_.empty() || !repeat_.empty() || !detached_.empty(); });
    auto c = Runtime::Get().Session();
    if (!c.ok() || ForgetLostLocked()) {
      // The session is gone: these callbacks will never be reached.
      waiting_.clear();
      repeat_.clear();
      detached_.clear();
      ready_.clear();
      cv_.notify_all();
      continue;
    }
    if (!ready_.empty()) {
      auto [event, id, from, exec] = ready_.front();
      ready_.pop_front();
      std::function<void()> fn;
      bool answer = true;
      if (event == Client::CallbackEvent::kReached) {
        auto it = waiting_.find(id);
        if (it == waiting_.end()) continue;
        fn = std::move(it->second.fn);
        waiting_.erase(it);
        running_ = id;
      } else if (event == Client::CallbackEvent::kRepeat) {
        auto it = repeat_.find(id);
        if (it != repeat_.end()) fn = it->second.fn;
        else if (exec == 0) continue;  // a graph host node is answered even so: its stream waits
      } else {
        auto it = detached_.find(id);
        if (it == detached_.end()) continue;
        fn = std::move(it->second.fn);
        detached_.erase(it);
        answer = false;
      }
      lock.unlock();
      if (fn) fn();
      uint64_t done = id;  // a structured binding: clang 14 cannot capture it
      if (exec != 0) AnswerGraphNode(from, done, exec);
      else if (answer) (void)from->PostLocal(0, [&](wire::Request::Builder& r) { r.setCallbackDone(done); });
      lock.lock();
      running_ = 0;
      cv_.notify_all();
      continue;
    }
    lock.unlock();
    const auto& links = Runtime::Get().links();
    for (Client* l : links) l->Pump(static_cast<int>(20 / links.size()));
  }
}

}  // namespace remora::shim

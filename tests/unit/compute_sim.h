// A simulated GPU shared by simulated sessions, for the compute scheduler's tests: each
// session is a client (submitting kernels of given durations, synchronising) plus its
// worker's loop (the real sched::GpuGate against a real sched::ComputeBoard), on a fake
// clock. The GPU runs one context at a time and time-slices between contexts that have work
// (2 ms slices, as a GPU without MPS does), so without the scheduler every busy session gets
// an equal part whatever the weights. The GPU's own record of which kernel ran when is the
// ground truth the tests compare against.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "sched/board.h"
#include "sched/gate.h"

namespace remora::sched::sim {

class SimGpu {
 public:
  struct Item {
    bool kernel = true;
    uint64_t remaining_ns = 0;
    int marker = -1;  // markers complete when they reach the head of their stream
  };
  struct Stream {
    int context = 0;
    std::deque<Item> q;
  };

  explicit SimGpu(uint64_t slice_ns = 2'000'000) : slice_ns_(slice_ns) {}

  Stream* NewStream(int context) {
    streams_.push_back(std::make_unique<Stream>());
    streams_.back()->context = context;
    return streams_.back().get();
  }
  void Launch(Stream* s, uint64_t ns) { s->q.push_back({true, ns, -1}); }
  int Marker(Stream* s) {
    int id = next_marker_++;
    done_[id] = false;
    s->q.push_back({false, 0, id});
    Settle();
    return id;
  }
  bool Done(int marker) { return done_.at(marker); }
  void Forget(int marker) { done_.erase(marker); }

  // Runs the GPU for dt: the current context's next kernel progresses; contexts switch at
  // the end of a slice when another has work, or at once when the current one has none.
  void Advance(uint64_t dt) {
    Settle();
    if (!HasWork(current_) || (slice_used_ >= slice_ns_ && AnyOtherWork(current_))) {
      int next = NextWithWork(current_);
      if (next != current_) {
        current_ = next;
        slice_used_ = 0;
      } else if (slice_used_ >= slice_ns_) {
        slice_used_ = 0;
      }
    }
    if (current_ < 0 || !HasWork(current_)) return;
    slice_used_ += dt;
    uint64_t left = dt;
    // One kernel at a time per context, the streams taken in turn.
    while (left > 0) {
      Stream* s = NextKernelStream(current_);
      if (s == nullptr) break;
      Item& k = s->q.front();
      uint64_t step = std::min(left, k.remaining_ns);
      k.remaining_ns -= step;
      left -= step;
      busy_ns_[current_] += step;
      total_busy_ns_ += step;
      if (k.remaining_ns == 0) {
        s->q.pop_front();
        completed_[current_]++;
        Settle();
      }
    }
  }

  uint64_t busy_ns(int context) const {
    auto it = busy_ns_.find(context);
    return it == busy_ns_.end() ? 0 : it->second;
  }
  uint64_t total_busy_ns() const { return total_busy_ns_; }
  uint64_t markers_recorded() const { return static_cast<uint64_t>(next_marker_); }

 private:
  void Settle() {
    for (auto& s : streams_)
      while (!s->q.empty() && !s->q.front().kernel) {
        done_[s->q.front().marker] = true;
        s->q.pop_front();
      }
  }
  bool HasWork(int c) const {
    for (auto& s : streams_)
      if (s->context == c && !s->q.empty()) return true;
    return false;
  }
  bool AnyOtherWork(int c) const {
    for (auto& s : streams_)
      if (s->context != c && !s->q.empty()) return true;
    return false;
  }
  int NextWithWork(int c) const {
    int best = -1;
    for (auto& s : streams_) {
      if (s->q.empty()) continue;
      // The next context after c in id order, wrapping.
      int d = s->context;
      auto key = [&](int x) { return x > c ? x - c : x - c + 1'000'000; };
      if (best < 0 || key(d) < key(best)) best = d;
    }
    return best;
  }
  // The stream whose kernel runs: the one running until its kernel ends, then the next of
  // the context's streams with a kernel at its head (round robin).
  Stream* NextKernelStream(int c) {
    if (running_ != nullptr && running_->context == c && !running_->q.empty() && running_->q.front().kernel)
      return running_;
    size_t n = streams_.size();
    for (size_t i = 1; i <= n; i++) {
      size_t k = (rr_ + i) % n;
      Stream* s = streams_[k].get();
      if (s->context == c && !s->q.empty() && s->q.front().kernel) {
        rr_ = k;
        running_ = s;
        return s;
      }
    }
    running_ = nullptr;
    return nullptr;
  }

  uint64_t slice_ns_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::map<int, bool> done_;
  int next_marker_ = 0;
  int current_ = -1;
  uint64_t slice_used_ = 0;
  size_t rr_ = 0;
  Stream* running_ = nullptr;
  std::map<int, uint64_t> busy_ns_;
  std::map<int, uint64_t> completed_;
  uint64_t total_busy_ns_ = 0;
};

// The gate's markers on the simulated GPU.
class SimMarkers final : public MarkerOps {
 public:
  SimMarkers(SimGpu& gpu, std::map<StreamKey, SimGpu::Stream*>& streams) : gpu_(gpu), streams_(streams) {}
  Result<sched::Marker> Record(StreamKey s) override {
    auto it = streams_.find(s);
    if (it == streams_.end()) return Error(Err::kInvalidResourceHandle, "no such stream");
    recorded++;
    return reinterpret_cast<sched::Marker>(static_cast<intptr_t>(gpu_.Marker(it->second)) + 1);
  }
  bool Done(sched::Marker m) override { return gpu_.Done(static_cast<int>(reinterpret_cast<intptr_t>(m) - 1)); }
  void Release(sched::Marker m) override { gpu_.Forget(static_cast<int>(reinterpret_cast<intptr_t>(m) - 1)); }
  uint64_t recorded = 0;

 private:
  SimGpu& gpu_;
  std::map<StreamKey, SimGpu::Stream*>& streams_;
};

// What a client does, over and over: `batch` kernels of `kernel_ns` (with jitter), then a
// synchronisation, then `think_ns` on the host. It runs between [start_ns, stop_ns).
struct Workload {
  uint64_t kernel_ns = 500'000;
  int batch = 8;
  uint64_t think_ns = 0;
  uint64_t start_ns = 0;
  uint64_t stop_ns = UINT64_MAX;
  uint32_t jitter_pct = 0;  // kernel durations and think times vary by up to this much (deterministic)
  uint64_t loop_ns = 0;     // the worker's loop acts at most this often (an iteration's driver calls)
};

// One session: client, worker loop (gate) and its stream on the simulated GPU.
class SimSession {
 public:
  SimSession(ComputeBoard& board, SimGpu& gpu, uint32_t gpu_index, uint32_t slot, Workload w, bool sleepy)
      : gpu_(gpu), markers_(gpu, streams_), gate_(board, gpu_index, slot, markers_), w_(w), sleepy_(sleepy),
        slot_(slot) {
    stream_ = gpu.NewStream(static_cast<int>(slot));
    key_ = reinterpret_cast<StreamKey>(static_cast<uintptr_t>(0x1000 + slot));
    streams_[key_] = stream_;
    seed_ = slot * 2654435761u + 1;
  }

  // One step of the client and the worker loop at `now`.
  void Step(uint64_t now) {
    // Client: a new batch when the last one was synchronised and the thinking is over.
    if (now >= w_.start_ns && now < w_.stop_ns && frames_.empty() && sync_ < 0 && now >= client_ready_ns_) {
      for (int i = 0; i < w_.batch; i++) frames_.push_back(Frame{true, Duration()});
      frames_.push_back(Frame{false, 0});
      batch_started_ns_ = now;
      wake_ns_ = now;  // the worker reads the new frames at once
    }
    if (sleepy_ && now < wake_ns_ && sync_ < 0) return;  // the executor sleeps (no pending op)
    if (now < next_loop_ns_) return;                      // still in its last iteration
    next_loop_ns_ = now + w_.loop_ns;
    // Worker: dispatch in order; a refused launch waits at the head of the queue.
    while (!frames_.empty()) {
      Frame f = frames_.front();
      if (f.launch) {
        if (!gate_.Admit(now)) break;
        gpu_.Launch(stream_, f.ns);
        gate_.Issued(key_, now);
        issued_++;
      } else {
        sync_ = gpu_.Marker(stream_);
        gate_.Covered(key_, SyncEvent());
      }
      frames_.pop_front();
    }
    if (sync_ >= 0 && gpu_.Done(sync_)) {
      gate_.Released(SyncEvent());
      gpu_.Forget(sync_);
      sync_ = -1;
      latencies_.push_back(now - batch_started_ns_);
      client_ready_ns_ = now + Vary(w_.think_ns);
    }
    gate_.Poll(now);
    uint64_t wait = gate_.MaxWaitNs();
    wake_ns_ = wait == UINT64_MAX ? now + 1'000'000 : now + wait;
  }

  void Close(uint64_t now) { gate_.Close(now); }
  GpuGate& gate() { return gate_; }
  uint32_t slot() const { return slot_; }
  const std::vector<uint64_t>& latencies() const { return latencies_; }
  uint64_t issued() const { return issued_; }
  size_t frames() const { return frames_.size(); }
  int sync() const { return sync_; }
  uint64_t ready() const { return client_ready_ns_; }
  SimMarkers& markers() { return markers_; }

 private:
  struct Frame {
    bool launch;
    uint64_t ns;
  };
  uint64_t Duration() { return Vary(w_.kernel_ns); }
  uint64_t Vary(uint64_t ns) {
    if (w_.jitter_pct == 0 || ns == 0) return ns;
    seed_ = seed_ * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t span = ns * w_.jitter_pct / 100;
    return ns - span + (seed_ >> 33) % (2 * span + 1);
  }
  const void* SyncEvent() const { return reinterpret_cast<const void*>(static_cast<uintptr_t>(0x9000000 + sync_)); }

  SimGpu& gpu_;
  std::map<StreamKey, SimGpu::Stream*> streams_;
  SimMarkers markers_;
  GpuGate gate_;
  Workload w_;
  bool sleepy_;
  uint32_t slot_;
  SimGpu::Stream* stream_ = nullptr;
  StreamKey key_ = nullptr;
  std::deque<Frame> frames_;
  int sync_ = -1;
  uint64_t client_ready_ns_ = 0, batch_started_ns_ = 0, wake_ns_ = 0, next_loop_ns_ = 0;
  uint64_t issued_ = 0;
  uint64_t seed_;
  std::vector<uint64_t> latencies_;
};

// A board in ordinary memory, tenants and sessions on GPU 0, and the loop that runs them.
class SimWorld {
 public:
  explicit SimWorld(Tunables t = {}, bool enabled = true, uint64_t slice_ns = 2'000'000) : gpu_(slice_ns) {
    mem_ = static_cast<std::byte*>(std::aligned_alloc(64, (ComputeBoard::RegionBytes() + 63) / 64 * 64));
    board_ = std::make_unique<ComputeBoard>(*ComputeBoard::Create(mem_, ComputeBoard::RegionBytes(), t));
    board_->SetEnabled(0, enabled);
  }
  ~SimWorld() {
    sessions_.clear();
    board_.reset();
    std::free(mem_);
  }

  void Tenant(uint32_t t, ComputeSettings s) { board_->AddTenant(t, s); }
  // A session of tenant `t`; returns its slot (its context on the GPU).
  uint32_t Session(uint32_t t, Workload w, bool sleepy = false) {
    uint32_t slot = next_slot_++;
    board_->OpenSession(slot, t);
    tenant_of_[slot] = t;
    sessions_.push_back(std::make_unique<SimSession>(*board_, gpu_, 0, slot, w, sleepy));
    return slot;
  }
  // Ends a session as the supervisor does when its worker exits.
  void CloseSession(uint32_t slot) {
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
      if ((*it)->slot() == slot) {
        (*it)->Close(now_);
        sessions_.erase(it);
        break;
      }
    board_->CloseSession(slot, now_);
  }
  // Runs until `until_ns` in steps of `dt_ns`; the sessions act in rotating order.
  void RunUntil(uint64_t until_ns, uint64_t dt_ns = 5'000) {
    while (now_ < until_ns) {
      size_t n = sessions_.size();
      for (size_t i = 0; i < n; i++) sessions_[(i + rotate_) % n]->Step(now_);
      rotate_++;
      gpu_.Advance(dt_ns);
      now_ += dt_ns;
    }
  }

  // GPU time each tenant's kernels ran in [from, now) per the GPU, as fractions of it.
  struct Snapshot {
    std::map<uint32_t, uint64_t> busy;  // by tenant
    uint64_t total = 0;
    uint64_t at = 0;
  };
  Snapshot Take() const {
    Snapshot s;
    s.at = now_;
    for (auto& [slot, t] : tenant_of_) s.busy[t] += gpu_.busy_ns(static_cast<int>(slot));
    s.total = gpu_.total_busy_ns();
    return s;
  }
  static std::map<uint32_t, double> Shares(const Snapshot& a, const Snapshot& b) {
    std::map<uint32_t, double> out;
    uint64_t total = b.total - a.total;
    for (auto& [t, v] : b.busy) out[t] = total ? double(v - (a.busy.count(t) ? a.busy.at(t) : 0)) / double(total) : 0;
    return out;
  }
  // The fraction of the wall time the GPU was busy between two snapshots.
  static double Utilisation(const Snapshot& a, const Snapshot& b) {
    return b.at == a.at ? 0 : double(b.total - a.total) / double(b.at - a.at);
  }
  static double WallShare(const Snapshot& a, const Snapshot& b, uint32_t t) {
    uint64_t va = a.busy.count(t) ? a.busy.at(t) : 0, vb = b.busy.count(t) ? b.busy.at(t) : 0;
    return b.at == a.at ? 0 : double(vb - va) / double(b.at - a.at);
  }

  ComputeBoard& board() { return *board_; }
  SimGpu& gpu() { return gpu_; }
  SimSession& session(uint32_t slot) {
    for (auto& s : sessions_)
      if (s->slot() == slot) return *s;
    std::abort();
  }
  uint64_t now() const { return now_; }

 private:
  std::byte* mem_;
  std::unique_ptr<ComputeBoard> board_;
  SimGpu gpu_;
  std::vector<std::unique_ptr<SimSession>> sessions_;
  std::map<uint32_t, uint32_t> tenant_of_;
  uint32_t next_slot_ = 0;
  uint64_t now_ = 1'000'000'000;  // not 0: the board treats 0 as "never"
  size_t rotate_ = 0;
};

}  // namespace remora::sched::sim

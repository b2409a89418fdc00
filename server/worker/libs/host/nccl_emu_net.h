// The host backend's emulation of NCCL's network (host_lib_nccl.cc): how the ranks of an emulated
// communicator find each other and exchange data. For tests only: it lets CI run multi-rank
// NCCL logic on emulated GPUs of one server or of several (the workers are processes on one
// machine in CI, but nothing here assumes it); it is not offered as a product transport.
//
//  * Root: made by ncclGetUniqueId in the worker that asked; it listens on a TCP port of
//    REMORA_NCCL_EMU_HOST (default 127.0.0.1) and, once the communicator's `nranks` ranks have
//    checked in with the id's secret, gives each the others' addresses. The id (the "real"
//    ncclUniqueId of the emulation, which Remora keeps on the servers) holds the address and
//    the secret.
//  * Mesh: a TCP connection between every two ranks (the higher rank connects, proving the
//    secret), and a thread that reads every message into mailboxes, so a send never waits for
//    the receiver to ask (sends and receives of a group progress in any order). A message is
//    keyed by (channel: which communicator of the mesh, kind, sequence number); the sequence
//    numbers are those every rank assigns in the same order (NCCL's rule that the ranks issue
//    a communicator's calls in one order).
//  * A send on a broken connection fails (ncclRemoteError). A connection that closes is only
//    noted: waits for its messages go on, like those of a fabric that does not notice a lost
//    peer (NVLink, say), until the communicator is aborted - which is what the session's NCCL
//    does when the supervisor says a rank is gone, so CI tests Remora's own handling of lost
//    ranks, not the emulation's. REMORA_NCCL_EMU_DETECT_LOSS=1 (the workers' environment) makes
//    a closed connection fail the waits, as NCCL's socket transport does.
//  * Abort() wakes every wait (which fails) and closes the connections.
//
// Thread-safety: Mesh is used by the executor thread and the emulated streams' threads at once;
// all members are thread-safe.
#pragma once

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/status.h"

namespace remora::worker::emu_nccl {

// What a message is part of: the communicator (channel), the kind (collective, point-to-point,
// control) and its sequence number.
struct Key {
  uint64_t channel = 0;
  uint8_t kind = 0;
  uint64_t seq = 0;
  bool operator<(const Key& o) const { return std::tie(channel, kind, seq) < std::tie(o.channel, o.kind, o.seq); }
};
inline constexpr uint8_t kCollective = 1, kPointToPoint = 2, kControl = 3;

class Root {
 public:
  // Listens and starts serving one rendezvous; `id` receives the unique id naming it.
  static Result<std::unique_ptr<Root>> Start(ncclUniqueId* id);
  ~Root();
  Root(const Root&) = delete;
  Root& operator=(const Root&) = delete;

 private:
  Root() = default;
  void Serve();
  Fd listen_;
  uint8_t secret_[16] = {};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class Mesh {
 public:
  // Joins the communicator the id names as `rank` of `nranks`: checks in with its root, then
  // connects to every other rank. Blocks (an init thread runs it); fails once `abort` is set.
  static Result<std::shared_ptr<Mesh>> Join(const ncclUniqueId& id, int nranks, int rank, const std::atomic<bool>& abort);
  ~Mesh();

  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  // Sends `n` bytes to mesh rank `peer` (itself included) under `key`.
  Status Send(int peer, const Key& key, const void* data, size_t n);
  // Waits for the message `key` from `peer` and takes it. Fails (ncclRemoteError) when the
  // peer is lost, the mesh aborted or `stop` (a communicator's abort) set.
  Result<std::vector<std::byte>> Receive(int peer, const Key& key, const std::atomic<bool>* stop = nullptr);
  // Wakes every wait, so each looks at its `stop` again.
  void Wake() {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  // Wakes every wait (which fails) and closes the connections. Idempotent.
  void Abort(const std::string& why);
  // Why the mesh cannot serve any more (a lost peer, an abort), or OK.
  Status Health();

 private:
  Mesh(int nranks, int rank) : nranks_(nranks), rank_(rank) {}
  void Progress();
  bool ReadFrom(int peer);

  const int nranks_, rank_;
  std::vector<Fd> peers_;                  // by rank; empty for itself
  std::vector<std::unique_ptr<std::mutex>> send_mu_;
  Fd wake_[2];                             // a pipe that ends the progress thread
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, Key>, std::vector<std::byte>> mail_;
  std::vector<bool> lost_;    // its waits fail
  std::vector<bool> closed_;  // its connection closed (read no more)
  bool detect_loss_ = false;
  bool aborted_ = false;
  std::string why_;
  std::thread progress_;
};

}  // namespace remora::worker::emu_nccl

// Helpers of the RDMA transport tests (rdma_transport_test.cc): a test protocol spoken over
// a real rdma:// Connection, its executor loop, an in-process server, and requester calls.
//
// Test protocol: body word 0 is the operation, the next words its arguments. The executor
// answers a request with a Reply (same tag) when the request has kFlagExpectsReply.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "remora/protocol/transport.h"

namespace remora::rdmatest {

enum Op : uint64_t {
  kEcho = 1,      // reply: the request's body
  kStore = 2,     // H2D: keeps the bulk; reply {kStore, hash, size}
  kFetch = 3,     // D2H {n}: reply {kFetch, hash} with the first n stored bytes as bulk
  kCount = 4,     // reply {kCount, frames seen so far in this session}
  kPause = 5,     // {ms}: the executor stops serving for ms
  kNotices = 6,   // {n, bulk}: the executor posts n Notices {kNotices, i, hash} with
                  // NoticeBulkBytes(i, n, bulk) bytes of bulk
  kDie = 7,       // the executor's process dies (SIGKILL) at once
  kStall = 8,     // H2D: after the first chunk of bulk the executor calls its on_stall hook
  kSlowFetch = 9,  // {n, ms}: as kFetch, the executor taking ms per chunk of the reply's bulk
                   // (a slow device), its connection progressing meanwhile
};

std::vector<uint64_t> Body(uint64_t op, uint64_t a = 0, uint64_t b = 0);
// Bulk of notice i of n: 16 bytes for the first half, then alternately 16 and `bulk` bytes.
uint64_t NoticeBulkBytes(uint64_t i, uint64_t n, uint64_t bulk);
uint64_t Hash(ConstBytes data);                  // 64-bit FNV-1a over words and the tail
void FillRandom(MutableBytes data, uint64_t seed);

// Page-aligned heap memory, as the worker's host backend would give.
class HeapStaging final : public StagingAllocator {
 public:
  Result<std::byte*> Allocate(size_t bytes) override;
  void Free(std::byte* p, size_t bytes) override;
};

// Serves one executor-side connection until it fails or `stop` is set; returns why it ended.
// `staging` must outlive the connection (its chunks are freed when the connection dies).
Status ServeSession(Connection& c, StagingAllocator& staging, const std::atomic<bool>& stop,
                    const std::function<void()>& on_stall);

// A Remora-like server in this process: rdma:// listener, handshake (no authentication),
// Welcome, AdoptConnection, one thread per session running ServeSession.
class TestServer {
 public:
  explicit TestServer(const std::string& host);
  ~TestServer();
  Status status() const { return status_; }  // why the server could not start
  std::string url() const { return url_; }
  // Runs in the session thread when a kStall request's first chunk has arrived.
  void set_on_stall(std::function<void()> f) { on_stall_ = std::move(f); }
  // Waits for the next session to end and returns how it ended (kTimeout if none did).
  Status WaitSessionEnd(int timeout_ms);

 private:
  void AcceptLoop();
  void Session(PendingConnection pending);

  Status status_;
  std::string url_;
  std::unique_ptr<Listener> listener_;
  std::atomic<bool> stop_{false};
  std::function<void()> on_stall_;
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> sessions_;
  std::deque<Status> ended_;
};

struct Reply {
  FrameHeader header;
  std::vector<uint64_t> body;
};
// Sends a request expecting a reply and waits for it (skipping notices); the reply's bulk
// lands in reply_bulk.
Result<Reply> Call(Connection& c, uint64_t tag, const std::vector<uint64_t>& body, ConstBytes bulk = {},
                   MutableBytes reply_bulk = {}, int timeout_ms = 120000);

}  // namespace remora::rdmatest

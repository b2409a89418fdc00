// Bulk striped over a tcp session's parallel data connections (docs/PROTOCOL.md, "Data
// connections and striping"). Private to protocol/.
//
// A frame whose bulk is at least kStripeThreshold bytes says so in its header's `stripe`
// word (FrameHeader::reserved on the wire of a tcp session with data connections): its bulk
// does not follow it on the control connection but is cut into chunks of 2^shift bytes,
// chunk k travelling on data connection k mod `streams`. On each data connection a frame's
// chunks follow one StripeHeader, in order. Frames (and so their stripes) keep the order of
// the control connection in each direction; the two directions are independent.
//
// Every data connection has two threads at each end, one per direction, so the kernel's
// copies run on as many cores as there are streams. Requester: the calling thread hands each
// stream its part and waits; receives land in the caller's buffer directly. Executor: the
// threads fill and drain rings of pinned staging chunks, which the (single) executor thread
// takes and gives back in order, its DMA pipelined behind them.
//
// A data connection that fails (closed, reset, a stripe out of step) breaks the whole set:
// every later call returns kDevicesUnavailable, as for a lost server.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <functional>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "remora/base/bytes.h"
#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/connection.h"

namespace remora {

inline constexpr uint64_t kStripeThreshold = 1 << 20;  // smaller bulk stays on the control connection
inline constexpr uint32_t kStripeShift = 19;           // 512 KiB chunks

// How one frame's bulk is cut. streams == 0: not striped.
struct StripeLayout {
  uint64_t total = 0;
  uint32_t streams = 0;
  uint32_t shift = kStripeShift;

  uint64_t chunks() const { return (total + (uint64_t{1} << shift) - 1) >> shift; }
  uint64_t offset(uint64_t k) const { return k << shift; }
  uint64_t size(uint64_t k) const { return std::min<uint64_t>(uint64_t{1} << shift, total - offset(k)); }
  uint32_t stream(uint64_t k) const { return static_cast<uint32_t>(k % streams); }
  // The header word: bits 0-7 streams, 8-15 shift (0: not striped).
  uint32_t Encode() const { return streams == 0 ? 0 : (streams | (shift << 8)); }
};

// The layout for `total` bytes over `available` streams (not striped when too small).
StripeLayout PlanStripes(uint64_t total, uint32_t available);
// The layout a peer announced in a header word; kDevicesUnavailable if it does not fit a
// session with `available` streams (the peer is broken or hostile: the session ends).
Result<StripeLayout> DecodeStripes(uint32_t word, uint64_t total, uint32_t available);

// What precedes a frame's chunks on each data connection that carries some.
struct StripeHeader {
  uint32_t magic = 0x31534d52;  // "RMS1"
  uint16_t index = 0;           // the data connection's index
  uint8_t streams = 0;
  uint8_t shift = 0;
  uint64_t tag = 0;             // the frame's tag
  uint64_t total = 0;           // the frame's bulk bytes
};
static_assert(sizeof(StripeHeader) == 24);

// One thread running jobs handed to it one at a time (a data connection's direction).
class StreamThread {
 public:
  StreamThread();
  ~StreamThread();
  StreamThread(const StreamThread&) = delete;
  StreamThread& operator=(const StreamThread&) = delete;
  // Starts `job`; the previous one must have been waited for.
  void Start(std::function<Status()> job);
  // Waits for the job's result.
  Status Wait();

 private:
  void Run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<Status()> job_;
  bool has_job_ = false, done_ = false, stop_ = false;
  Status result_;
  std::thread thread_;
};

// The requester's end (blocking). Send and Receive may run concurrently (the client's send
// and receive locks); each is called by one thread at a time.
class RequesterStripes {
 public:
  explicit RequesterStripes(std::vector<Fd> socks);
  ~RequesterStripes();
  uint32_t count() const { return static_cast<uint32_t>(socks_.size()); }
  // Writes the bulk of frame `tag` across the streams; returns when all of it is written.
  Status Send(uint64_t tag, const StripeLayout& l, ConstBytes bulk);
  // Reads the bulk of frame `tag` into `dst` (dst.size() == l.total).
  Status Receive(uint64_t tag, const StripeLayout& l, MutableBytes dst);
  // Shuts every data connection down so that blocked sends and receives return (a session
  // the watchdog gave up on). Any thread.
  void Abort();

 private:
  std::vector<Fd> socks_;
  std::vector<std::unique_ptr<StreamThread>> senders_, receivers_;
  Status broken_send_, broken_recv_;
};

// The executor's end. Every method is for the executor thread; the stream threads are
// internal. Chunks are taken and given back in order (Connection's contract).
class ExecutorStripes {
 public:
  static constexpr uint32_t kRing = 4;  // staging chunks per stream and direction

  ExecutorStripes(std::vector<Fd> socks, std::string peer);
  ~ExecutorStripes();
  uint32_t count() const { return static_cast<uint32_t>(streams_.size()); }
  void SetStaging(StagingAllocator* staging) { staging_ = staging; }
  // Readable when a stream thread filled or freed a chunk or failed (WaitForActivity).
  int wake_fd() const { return wake_.get(); }
  void DrainWake();
  // The first failure of any stream (kDevicesUnavailable), or OK.
  Status error() const;

  // Inbound: the frame the executor just polled carries `l` (tag `tag`).
  Status BeginInbound(uint64_t tag, const StripeLayout& l);
  Result<std::optional<BulkChunk>> PollChunk();
  void ReleaseChunk(const BulkChunk& c);

  // Outbound: the frame just posted carries `l`.
  Status BeginOutbound(uint64_t tag, const StripeLayout& l);
  Result<std::optional<BulkChunk>> AcquireChunk();
  Status CommitChunk(const BulkChunk& c, size_t bytes);

 private:
  struct Slot {
    std::byte* data = nullptr;
    uint64_t tag = 0, offset = 0, size = 0;
    StripeHeader header{};  // outbound: sent first when `first`
    bool first = false;
  };
  // A ring shared by the executor and one stream thread: [done, taken) is with the executor
  // (inbound) or queued/being sent (outbound), [taken, filled) filled by the thread.
  struct Ring {
    std::mutex mu;
    std::condition_variable cv;
    Slot slots[kRing];
    uint64_t produced = 0;  // inbound: filled by the thread; outbound: committed by the executor
    uint64_t consumed = 0;  // inbound: taken by the executor; outbound: sent by the thread
    uint64_t freed = 0;     // inbound: released by the executor; outbound: acquired (executor)
  };
  struct Stream {
    Fd sock;
    Ring in, out;
    std::thread reader, writer;
  };

  Status AllocateRing(Ring& r);
  void FreeRing(Ring& r);
  void ReaderLoop(uint32_t index);
  void WriterLoop(uint32_t index);
  void Fail(const Status& st);
  void Wake();

  std::string peer_;
  std::vector<std::unique_ptr<Stream>> streams_;
  StagingAllocator* staging_ = nullptr;
  Fd wake_;
  std::atomic<bool> woken_{false};  // set after each write to wake_
  std::atomic<bool> stop_{false};
  mutable std::mutex err_mu_;
  Status error_;
  std::atomic<bool> failed_{false};
  bool in_allocated_ = false, out_allocated_ = false;

  // Executor-side state of the current frame in each direction.
  StripeLayout in_layout_, out_layout_;
  uint64_t in_tag_ = 0, in_next_ = 0;
  uint64_t out_tag_ = 0, out_next_ = 0;
};

// Reads `n` bytes into each of `iov` in order (blocking). kDevicesUnavailable on EOF/error.
Status ReadAllV(int fd, struct iovec* iov, int iovcnt);

}  // namespace remora

// Connection: the only thing the dispatch layers (shim client, worker executor) see of a
// transport. Implementations: in-process pipe (unit tests), shm, tcp, rdma.
//
// A connection has two sides with different styles:
//  - the requester (the shim) uses the blocking calls Send / Receive / ReceiveBulk;
//  - the executor (the worker) uses the non-blocking calls Poll / PollBulkChunk /
//    ReleaseBulkChunk / Post / AcquireBulkChunk / CommitBulkChunk / Progress, so its loop
//    never waits on the network while GPU work completes.
// Each side uses only its own set. Thread-safety: none internally. The requester serializes
// Send calls among its threads with one lock and Receive/ReceiveBulk with another (the two
// may run concurrently); the executor is single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remora/base/bytes.h"
#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/frame.h"

namespace remora {

// What a transport can do beyond moving frames. Callers branch on these, never on the
// transport's type.
struct Capabilities {
  const char* transport = "";       // "pipe", "shm", "tcp", "rdma"
  bool shared_memory = false;       // peers can map common memory regions (zero-copy)
  bool passes_fds = false;          // file descriptors can travel (memfd of pinned regions)
  bool one_sided = false;           // peer memory is read/written without the peer's CPU
  bool registered_memory = false;   // bulk memory must be registered (RDMA MRs)
  uint64_t inline_bulk_limit = 0;   // bulk up to this size travels inside the frame's record
};

// A piece of bulk data in memory the executor may hand to a DMA engine (pinned or
// registered, see Connection::SetStaging).
struct BulkChunk {
  std::byte* data = nullptr;
  size_t size = 0;
  uint64_t offset = 0;  // position within the frame's bulk
  uint32_t id = 0;      // transport-private
};

// Pinned host memory for staging, provided by the executor (the worker's driver backend:
// cuMemHostAlloc on a GPU, plain memory when emulated). Transports that need buffers for
// bulk data they receive or send on the executor side allocate them here.
class StagingAllocator {
 public:
  virtual ~StagingAllocator() = default;
  virtual Result<std::byte*> Allocate(size_t bytes) = 0;
  virtual void Free(std::byte* p, size_t bytes) = 0;
};

// A region of memory both peers share (shm segment): the executor registers it with its
// driver so DMA reaches it directly.
struct SharedRegion {
  std::byte* base = nullptr;
  size_t size = 0;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual const Capabilities& capabilities() const = 0;
  // "shm /run/remora.sock", "tcp 10.0.0.2:7070" - for logs and session listings.
  virtual std::string Describe() const = 0;

  // ---- requester side (blocking) ------------------------------------------------------
  // Sends one frame. `bulk` travels out of band and has been consumed when Send returns.
  // `reply_bulk` is where the bulk of this request's reply will land (one-sided transports
  // write it directly; the others deliver it in ReceiveBulk).
  // Errors: kDevicesUnavailable when the peer is gone.
  virtual Status Send(const OutFrame& frame, ConstBytes bulk = {}, MutableBytes reply_bulk = {}) = 0;
  // Waits up to `timeout_ms` (-1: no limit) for the next frame. kTimeout when it passes,
  // kDevicesUnavailable when the peer is gone. The frame stays valid until the next Receive.
  // A frame with bulk_bytes > 0 must be followed by exactly one ReceiveBulk.
  virtual Result<InFrame> Receive(int timeout_ms) = 0;
  // Pushes out frames Send may have batched (one-way frames, on transports that coalesce);
  // Receive does so itself before waiting. Blocks until written.
  virtual Status Flush() { return Status::Ok(); }
  virtual Status ReceiveBulk(MutableBytes dst) = 0;
  // Thread-safe, any thread: makes every blocked and later requester call fail with
  // kDevicesUnavailable (the peer is given up on: it stopped answering). The peer sees the
  // session closed. Transports without a socket to shut down do nothing.
  virtual void Abort() {}
  // Thread-safe, any thread: grows whenever bulk data arrives on the requester side, so a
  // watchdog can tell a long reply still streaming from a silent peer (frames it sees
  // itself). 0 forever if the transport does not count.
  virtual uint64_t ReceiveProgress() const { return 0; }

  // ---- executor side (non-blocking) ---------------------------------------------------
  // Gives the transport its source of pinned staging memory. Call once before Poll.
  virtual void SetStaging(StagingAllocator* staging) = 0;
  // Regions the executor should register with its driver (empty if none).
  virtual std::vector<SharedRegion> SharedRegions() const = 0;
  // Next complete frame, or nullopt if none is ready. The frame stays valid until the next
  // Poll; if it carries bulk, all of it must be released before the next Poll.
  virtual Result<std::optional<InFrame>> Poll() = 0;
  // Next available piece of the bulk of the frame last returned by Poll (in order), or
  // nullopt if it has not arrived yet.
  virtual Result<std::optional<BulkChunk>> PollBulkChunk() = 0;
  // Returns a chunk's memory once nothing reads it any more (its DMA has completed).
  // Chunks are released in the order they were polled.
  virtual void ReleaseBulkChunk(const BulkChunk& chunk) = 0;
  // Queues a frame; `bulk_bytes` of payload follow through AcquireBulkChunk/CommitBulkChunk
  // before the next Post. Never blocks; the frame body is copied.
  virtual Status Post(const OutFrame& frame, uint64_t bulk_bytes = 0) = 0;
  // Buffer for the next `max` (or fewer) bytes of the posted frame's bulk, or nullopt if
  // none is free right now.
  virtual Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t max) = 0;
  // The chunk's first `bytes` bytes are filled (e.g. its DMA completed): ship them.
  virtual Status CommitBulkChunk(const BulkChunk& chunk, size_t bytes) = 0;
  // Moves queued data. Returns true if anything moved; kDevicesUnavailable if the peer left.
  virtual Result<bool> Progress() = 0;
  // Blocks until there may be something to do or `timeout_us` passes (spin, then sleep).
  virtual void WaitForActivity(int64_t timeout_us) = 0;

  // ---- descriptor passing (capabilities().passes_fds) -----------------------------------
  // Requester: sends `fd` ahead of the next frame; call under the same lock as Send, then
  // Send the frame that refers to it. The caller keeps ownership of its copy.
  virtual Status PassFd(int fd) {
    (void)fd;
    return Status(Err::kNotSupported, "this transport cannot pass file descriptors");
  }
  // Executor: the next descriptor the requester passed, waiting at most timeout_ms.
  virtual Result<Fd> TakeFd(int timeout_ms) {
    (void)timeout_ms;
    return Status(Err::kNotSupported, "this transport cannot pass file descriptors");
  }

  // ---- registered client memory (requester side) ---------------------------------------
  // Long-lived application memory (cudaHostAlloc / cudaMallocHost / cudaHostRegister):
  // transports with registered_memory register it once, and bulk from or into any part of
  // it then moves without staging (RDMA: read or written in place). The memory must stay
  // mapped until UnregisterHostMemory. Thread-safe like Send. Other transports: nothing to
  // do. Errors: kHostMemoryAlreadyRegistered (overlap), kHostMemoryNotRegistered (unknown p).
  virtual Status RegisterHostMemory(const void* p, size_t bytes) {
    (void)p;
    (void)bytes;
    return Status::Ok();
  }
  virtual Status UnregisterHostMemory(const void* p) {
    (void)p;
    return Status::Ok();
  }
};

}  // namespace remora

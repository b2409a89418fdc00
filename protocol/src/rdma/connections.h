// The two Connection sides of the RDMA transport, built on an established Channel, and the
// tuning both sides share. Private to protocol/ (and to tests/rdma, which includes it to
// reach the requester's memory registration before Connection grows that call).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "rdma/channel.h"
#include "remora/protocol/connection.h"

namespace remora::rdma {

// Bulk up to this size travels inside the frame's record (Capabilities::inline_bulk_limit).
inline constexpr uint64_t kInlineBulkLimit = 8 * 1024;
// Requester: pageable H2D bulk is copied through staging buffers of this size, at most
// kSegmentsInFlight of them waiting for the executor's reads at a time.
inline constexpr size_t kSegmentBytes = 1 << 20;
inline constexpr size_t kSegmentsInFlight = 8;
// Requester: registered staging for pageable data (segments and reply targets), in total.
inline constexpr size_t kDefaultStagingCap = 256u << 20;  // REMORA_RDMA_STAGING_MAX overrides
// Executor: chunks of staging memory (StagingAllocator) that bulk is read into / written from.
inline constexpr size_t kChunkBytes = 1 << 20;
inline constexpr size_t kChunkCount = 8;

// How long a waiting side polls before it sleeps on the completion channel:
// REMORA_RDMA_SPIN_US microseconds (default 60; read once).
uint64_t SpinNanos();

Geometry RequesterGeometry();
Geometry ExecutorGeometry();

const Capabilities& RdmaCapabilities();

// `peer` is for Describe(): "rdma 10.0.0.2:7070".
std::unique_ptr<Connection> MakeRdmaRequester(std::unique_ptr<Channel> channel, std::string peer);
std::unique_ptr<Connection> MakeRdmaExecutor(std::unique_ptr<Channel> channel, std::string peer);

// Requester side only: long-lived client memory (the application's pinned host buffers,
// cudaHostAlloc / cudaHostRegister) is registered once; bulk from or into any part of it then
// moves by RDMA straight from / into it, without staging or further registration. The
// memory must stay mapped until unregistered. Thread-safe like Send.
// kHostMemoryAlreadyRegistered for overlapping ranges, kInvalidValue for other connections.
Status RdmaRegisterHostMemory(Connection& requester, const void* p, size_t bytes);
// kHostMemoryNotRegistered if p does not start a registered range.
Status RdmaUnregisterHostMemory(Connection& requester, const void* p);

struct RequesterStats {
  uint64_t registrations = 0;     // ranges registered (RdmaRegisterHostMemory)
  uint64_t cache_hits = 0;        // transfers that found their memory registered
  uint64_t staging_buffers = 0;   // staging buffers created (each registered once)
  uint64_t direct_sources = 0;    // bulk read straight from registered memory
  uint64_t staged_segments = 0;   // bulk segments copied through staging
  uint64_t direct_replies = 0;    // reply bulk written straight into registered memory
  uint64_t staged_replies = 0;    // reply bulk written into staging, then copied
  uint64_t embedded_replies = 0;  // reply bulk that came inside the reply's record
  std::string channel;
};
// Counters of a requester connection (tests and diagnostics); empty for other connections.
RequesterStats GetRequesterStats(Connection& requester);

}  // namespace remora::rdma

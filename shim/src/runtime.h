// Runtime: the session (connected lazily on the first CUDA call), the device list, and the
// client's tables that let asynchronous calls be validated without a round trip. Owned by
// the process root (process.h).
//
// Thread-safety: every member function is thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client.h"
#include "graph_registry.h"
#include "managed.h"
#include "process.h"
#include "remora/memmgr/allocation_table.h"

namespace remora::shim {

struct DeviceEntry {
  int ordinal = 0;  // the application's (with several servers: the links' devices in turn)
  bool detached = false;
  bool lost = false;  // its server stopped answering (the other servers' devices carry on)
  std::string name;
  uint8_t uuid[16] = {};
  uint64_t total_memory = 0;  // the tenant's view
  std::string pci_bus_id;
  bool emulated = false;
  std::vector<int32_t> attributes;
  int link = 0;   // the server serving it (its index in REMORA_SERVER)
  int local = 0;  // that server's ordinal for it
};

// What the calling thread carries: its current device and last error, as in CUDA.
namespace driver {
struct Context;
}

struct ThreadState {
  int device = 0;
  bool device_set = false;  // cudaSetDevice was called (else cudaSetValidDevices may choose)
  bool runtime_used = false;  // a runtime call ran on this thread (its primary context is current)
  cudaError_t last_error = cudaSuccess;
  std::vector<driver::Context*> ctx_stack;  // the driver API's context stack (driver/contexts.h)
};
ThreadState& Thread();

enum class HostAllocKind { kPinned };

class Runtime {
 public:
  static Runtime& Get() { return Process::Get().runtime(); }

  // The session, connecting on first use. The failure of the first attempt is remembered
  // (as CUDA remembers a failed initialisation) and returned by every later call.
  // With several servers (REMORA_SERVER="URL,URL..."), the first server's link: its calls
  // go to the link serving the device they name (Client::Call).
  Result<Client*> Session();
  // The link serving application ordinal `device` (the session's only link with one
  // server). Connects on first use, as Session().
  Result<Client*> SessionFor(int device);
  // Whether the two ordinals' devices are served by one server (always with one server).
  bool SameServer(int a, int b) const;
  // The server's own ordinal for application ordinal `device` (itself with one server).
  int LocalOrdinal(int device) const;
  // How many servers this session uses (0 before it connected), and their links (the
  // first is Session()'s). Set once when the session connects.
  size_t server_count() const { return routes_.links.size(); }
  const std::vector<Client*>& links() const { return routes_.links; }
  // With several servers, an application ordinal served by the server that minted handle
  // `h` (its window, docs/PROTOCOL.md "Windows"); -1 with one server or for a value that is
  // not a server's handle.
  int DeviceOfHandle(uint64_t h) const;
  // The device list, refreshed when the server's generation moved. A snapshot: cheap to
  // take (no copy), immutable, valid as long as it is held.
  using DeviceList = std::shared_ptr<const std::vector<DeviceEntry>>;
  Result<DeviceList> Devices(bool force_refresh = false);
  // One device of the current snapshot (kInvalidDevice if out of range).
  Result<std::shared_ptr<const DeviceEntry>> Device(int ordinal);
  // Every device of the session in its enumeration order (each server's in turn), whether
  // CUDA_VISIBLE_DEVICES shows it or not (`ordinal`: the application's, -1 when hidden):
  // NVML's view, which CUDA_VISIBLE_DEVICES does not change.
  Result<DeviceList> SessionDevices();
  // CUDA_VISIBLE_DEVICES as read at the first enumeration (nullopt: unset).
  std::optional<std::string> VisibleDevicesVariable() {
    std::lock_guard<std::mutex> lock(mu_);
    return visible_devices_;
  }
  // Whether CUDA_VISIBLE_DEVICES hides every device because it named one twice.
  bool VisibleDevicesNamedTwice() {
    std::lock_guard<std::mutex> lock(mu_);
    return visible_named_twice_;
  }
  // Checks that the calling thread's current device can be used (and resolves it).
  Result<int> CurrentDevice();
  // cudaSetValidDevices: the devices, in priority order, a thread that never chose one uses.
  void SetValidDevices(std::vector<int> devices);

  // ---- local tables (validated again by the worker, which is authoritative) ----------
  void AddDeviceAllocation(uint64_t base, uint64_t size, int device, AllocKind kind = AllocKind::kDevice);
  Result<Allocation> RemoveDeviceAllocation(uint64_t base);
  // Memory mapped into a reserved (kVirtual) range, which copies may then touch.
  void AddDeviceMapping(uint64_t base, uint64_t size);
  void RemoveDeviceMapping(uint64_t base, uint64_t size);
  std::optional<Allocation> FindDevice(uint64_t ptr);
  Status CheckDeviceRange(uint64_t ptr, uint64_t size);

  // `region`: the id of the worker-shared region holding it, or 0.
  void AddHostAllocation(void* base, uint64_t size, unsigned flags, uint64_t region = 0,
                         AllocKind kind = AllocKind::kPinnedHost);
  Result<Allocation> RemoveHostAllocation(void* base);
  std::optional<Allocation> FindHost(const void* ptr);
  // The host ranges a transport with registered memory (RDMA) registers for the session's
  // link, as they were registered: pinned allocations of this process (whole pages) and
  // cudaHostRegister ranges. Not those shared with the worker (shm regions).
  std::vector<std::pair<void*, uint64_t>> RegisteredHostRanges();
  // The device's address of a pinned region shared with the worker (0 if unknown; setting 0
  // forgets it).
  void SetRegionDevicePointer(uint64_t region, uint64_t device);
  uint64_t RegionDevicePointer(uint64_t region);

  // Streams and events created by this process: handle -> device ordinal.
  void AddStream(uint64_t handle, int device, unsigned flags, int priority);
  bool RemoveStream(uint64_t handle);
  // Resolves an application stream: 0, cudaStreamLegacy, cudaStreamPerThread or a live
  // handle of this process; kInvalidValue otherwise. Sets *device to its device.
  Status CheckStream(cudaStream_t s, int* device);
  Status StreamInfo(cudaStream_t s, unsigned* flags, int* priority, int* device);
  void AddEvent(uint64_t handle, int device);
  bool RemoveEvent(uint64_t handle);
  Status CheckEvent(cudaEvent_t e);
  // The device of a live event of this process, or -1.
  int EventDevice(uint64_t handle);

  // The session's graphs as the client knows them (graph_registry.h).
  GraphRegistry& graphs() { return graphs_; }
  // Managed memory's host copies and their coherence (managed.h).
  ManagedMemory& managed() { return managed_; }

  // Forgets what lived on `device` (after cudaDeviceReset).
  void ForgetDevice(int device);
  // Forgets the session in a forked child (it reconnects on its first call).
  void AfterForkInChild();
  // Ends the session at process exit.
  void Shutdown();
  // Uses `conn` (authenticated; `session` is its Welcome) as this process's session instead
  // of connecting through REMORA_SERVER: for programs that embed the client, and for tests
  // that run a worker in-process. kInvalidValue if a session exists already.
  Status Adopt(std::unique_ptr<Connection> conn, SessionInfo session);
  // The session if it is connected, else nullptr (never connects).
  Client* ConnectedClient() const { return connected_.load(std::memory_order_acquire); }

 private:
  friend class Process;
  Runtime();
  Status Connect();
  // Makes `conn` a link (the first is the session's primary); caller holds connect_mu_.
  void Install(std::unique_ptr<Connection> conn, const SessionInfo& s);
  // Publishes the links once all are installed (caller holds connect_mu_).
  void Publish();
  // A graph host node's notice from link `from` (graph_host_sync.cc on the worker): its
  // bytes into the application's memory where the graph's copies write, then the function.
  void GraphHostNodeReached(wire::GraphHostNode::Reader n, Client* from);
  // Planned migration (migration.h): moves link `window` to `url` on a thread of its own
  // (one move at a time; called by the link's notice, must not block).
  void StartMigration(Client* link, size_t window, std::string url, std::string token);
  Status Migrate(Client& link, size_t window, const std::string& url, const std::string& token);
  // The device list of one link, in its server's ordinals.
  Status ListDevices(Client& link, std::vector<DeviceEntry>* out);

  // Application ordinal -> (link, server ordinal), assigned as the servers' devices are
  // first seen and never changed: a GPU attached later to any server gets the next ordinal.
  struct Routes final : DeviceRouter {
    static constexpr int kMax = 64;
    std::vector<Client*> links;  // set before the session is published, then immutable
    std::array<std::atomic<uint32_t>, kMax> table{};  // (link + 1) << 16 | local; 0: none
    int count = 0;  // assigned ordinals (under Runtime::mu_)
    Client* Route(int device, int* local) const override;
    int LinkIndex(int device) const;
  };

  std::mutex connect_mu_;
  std::vector<std::unique_ptr<Client>> links_;
  Routes routes_;
  bool routed_ = false;  // ordinals go through routes_ (Publish): several servers, or CUDA_VISIBLE_DEVICES
  std::atomic<uint64_t> work_sequence_{1};  // shared by the links (Client::SetLinks)
  std::atomic<Client*> connected_{nullptr};  // client_ once connected (lock-free fast path)
  std::optional<Status> connect_error_;

  std::mutex migrate_mu_;  // guards the two below
  std::thread migrator_;
  bool migrating_ = false;

  std::mutex mu_;  // tables and device cache
  uint64_t devices_generation_ = ~0ull;
  DeviceList devices_;
  DeviceList session_devices_;  // SessionDevices()
  // CUDA_VISIBLE_DEVICES as the process started with it (nullopt: unset), applied once, at
  // the first enumeration (visible_devices.h): the devices it names get the first ordinals in
  // its order; the others (and GPUs attached later) get none.
  std::optional<std::string> visible_devices_;
  bool visible_named_twice_ = false;  // guarded by mu_
  bool visible_applied_ = false;  // the variable was read
  bool visible_mapped_ = false;   // its devices have their ordinals
  AllocationTable device_allocs_;
  AllocationTable host_allocs_;
  struct StreamEntry {
    int device;
    unsigned flags;
    int priority;
  };
  std::unordered_map<uint64_t, StreamEntry> streams_;
  std::unordered_map<uint64_t, int> events_;
  std::vector<int> valid_devices_;
  std::unordered_map<uint64_t, uint64_t> region_devices_;
  GraphRegistry graphs_;
  ManagedMemory managed_;
};

// ---- the extern "C" boundary ----------------------------------------------------------
// Converts a Status to the cudaError_t the application sees, recording it as the thread's
// last error (cudaErrorNotReady is not an error and is not recorded, as in CUDA).
cudaError_t Finish(const Status& st, const char* call);
// Synchronising calls also report the first earlier asynchronous failure.
cudaError_t FinishSync(Client* c, const Status& st, const char* call);
// Logs `call` the first time and returns cudaErrorNotSupported.
cudaError_t NotSupported(const char* call);

}  // namespace remora::shim

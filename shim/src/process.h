// Process: the one root of the shim's process-wide state. It owns the Runtime (the session,
// the device list and the client's tables), the Registry (what the application's code
// registered), the HostCallbacks thread, the math libraries' objects (LibObjects), the error
// log and the client's CUDA arrays, plus the few process-wide values the runtime
// API keeps (cudaSetDeviceFlags, pinned-region ids). Every Remora library loaded into the
// process reaches this one root through libremora-core.so, so they share one session.
//
// Lifetime: created on first use and never destroyed (CUDA calls may arrive during exit,
// from other libraries' destructors). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

namespace remora::shim {

class Runtime;
class Registry;
class HostCallbacks;
class LibObjects;
class ErrorLog;
class ClientArrays;
namespace driver {
class Contexts;
class DriverObjects;
}

class Process {
 public:
  static Process& Get();
  // The root if it was created, else nullptr (never creates it: for the exit path).
  static Process* IfCreated();

  Runtime& runtime() { return *runtime_; }
  Registry& registry() { return *registry_; }
  HostCallbacks& callbacks() { return *callbacks_; }
  // The math libraries' objects (lib_objects.h).
  LibObjects& lib_objects() { return *lib_objects_; }
  // The driver API's contexts, and what the client knows of its modules, functions and
  // libraries (shim/src/driver/).
  driver::Contexts& contexts() { return *contexts_; }
  driver::DriverObjects& driver_objects() { return *driver_objects_; }
  // The errors this process's calls returned (cuLogs*, error_log.h).
  ErrorLog& error_log() { return *error_log_; }
  // CUDA arrays, mipmapped arrays, texture and surface objects this process holds (arrays.h).
  ClientArrays& arrays() { return *arrays_; }

  // cudaSetDeviceFlags / cudaGetDeviceFlags.
  std::atomic<unsigned>& device_flags() { return device_flags_; }
  // Ids of pinned host regions shared with the worker, unique in the process.
  uint64_t NextRegionId() { return next_region_.fetch_add(1); }
  // True the first time `what` is asked about (log-once messages).
  bool FirstTime(const std::string& what);

 private:
  Process();
  Registry* registry_;
  HostCallbacks* callbacks_;
  driver::Contexts* contexts_;
  driver::DriverObjects* driver_objects_;
  LibObjects* lib_objects_;
  ErrorLog* error_log_;
  ClientArrays* arrays_;
  Runtime* runtime_;  // created last: its constructor may use the others
  std::atomic<unsigned> device_flags_{0};
  std::atomic<uint64_t> next_region_{1};
  std::mutex seen_mu_;
  std::set<std::string> seen_;
};

}  // namespace remora::shim

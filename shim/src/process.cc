#include "process.h"

#include "arrays.h"
#include "callbacks.h"
#include "driver/contexts.h"
#include "driver/objects.h"
#include "error_log.h"
#include "lib_objects.h"
#include "registry.h"
#include "runtime.h"

namespace remora::shim {
namespace {
std::atomic<Process*> g_process{nullptr};
}  // namespace

Process::Process()
    : registry_(new Registry()),
      callbacks_(new HostCallbacks()),
      contexts_(new driver::Contexts()),
      driver_objects_(new driver::DriverObjects()),
      lib_objects_(new LibObjects()),
      error_log_(new ErrorLog()),
      arrays_(new ClientArrays()),
      runtime_(new Runtime()) {}

Process& Process::Get() {
  if (Process* p = g_process.load(std::memory_order_acquire)) return *p;
  static Process* p = [] {
    auto* made = new Process();  // never destroyed, nor are its members
    g_process.store(made, std::memory_order_release);
    return made;
  }();
  return *p;
}

bool Process::FirstTime(const std::string& what) {
  std::lock_guard<std::mutex> lock(seen_mu_);
  return seen_.insert(what).second;
}

Process* Process::IfCreated() { return g_process.load(std::memory_order_acquire); }

}  // namespace remora::shim

// DriverWrapper: a Driver that forwards every call to another one (LevelDB's EnvWrapper), so
// that a test overrides only what it observes or breaks - a fault on one call, a recording
// table of generated calls - and the rest behaves as the wrapped backend. Not owned: the
// target must outlive the wrapper. Same threading as the target.
#pragma once

#include "worker/backend/driver.h"

namespace remora::worker {

class DriverWrapper : public Driver {
 public:
  explicit DriverWrapper(Driver& target) : t_(target) {}
  Driver& target() { return t_; }

  const char* name() const override { return t_.name(); }
  bool emulated() const override { return t_.emulated(); }
  int DriverVersion() override { return t_.DriverVersion(); }
  std::string KernelDriverVersion() override { return t_.KernelDriverVersion(); }
  Result<int> DeviceCount() override { return t_.DeviceCount(); }
  Result<DeviceDescription> Describe(int device) override { return t_.Describe(device); }
  Status SetDevice(int device) override { return t_.SetDevice(device); }
  Result<uint64_t> ProcessMemory(int device) override { return t_.ProcessMemory(device); }
  Result<MemoryInfo> MemGetInfo() override { return t_.MemGetInfo(); }
  Result<DevPtr> MemAlloc(size_t bytes) override { return t_.MemAlloc(bytes); }
  Status MemFree(DevPtr ptr) override { return t_.MemFree(ptr); }
  Status MemPlace(const std::vector<std::pair<DevPtr, uint64_t>>& a) override { return t_.MemPlace(a); }
  Result<uint64_t> PlacementGranularity() override { return t_.PlacementGranularity(); }
  void* CurrentContext() override { return t_.CurrentContext(); }
  Status SetCaptureMode(int mode) override { return t_.SetCaptureMode(mode); }
  Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream s) override { return t_.MemcpyHtoD(dst, src, n, s); }
  Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream s) override { return t_.MemcpyDtoH(dst, src, n, s); }
  Status MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream s) override { return t_.MemcpyDtoD(dst, src, n, s); }
  Status Memset8(DevPtr dst, uint8_t value, size_t n, DStream s) override { return t_.Memset8(dst, value, n, s); }
  Result<void*> HostAlloc(size_t bytes) override { return t_.HostAlloc(bytes); }
  void HostFree(void* p) override { t_.HostFree(p); }
  Status HostRegister(void* p, size_t bytes) override { return t_.HostRegister(p, bytes); }
  void HostUnregister(void* p) override { t_.HostUnregister(p); }
  void HostUnregisterAndUnmap(void* p, size_t bytes) override { t_.HostUnregisterAndUnmap(p, bytes); }
  Result<DevPtr> HostDevicePointer(void* p) override { return t_.HostDevicePointer(p); }
  Result<DStream> StreamCreate(unsigned flags, int priority) override { return t_.StreamCreate(flags, priority); }
  Status StreamDestroy(DStream s) override { return t_.StreamDestroy(s); }
  Status StreamQuery(DStream s) override { return t_.StreamQuery(s); }
  Status StreamWaitEvent(DStream s, DEvent e, unsigned flags) override { return t_.StreamWaitEvent(s, e, flags); }
  Status StreamSynchronize(DStream s) override { return t_.StreamSynchronize(s); }
  Result<bool> StreamCapturing(DStream s) override { return t_.StreamCapturing(s); }
  Status LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) override { return t_.LaunchHostFunc(s, fn, arg); }
  Result<DEvent> EventCreate(unsigned flags) override { return t_.EventCreate(flags); }
  Status EventDestroy(DEvent e) override { return t_.EventDestroy(e); }
  Status EventRecord(DEvent e, DStream s) override { return t_.EventRecord(e, s); }
  Status EventQuery(DEvent e) override { return t_.EventQuery(e); }
  Status EventSynchronize(DEvent e) override { return t_.EventSynchronize(e); }
  Result<float> EventElapsedMs(DEvent start, DEvent end) override { return t_.EventElapsedMs(start, end); }
  Result<DModule> ModuleLoad(const void* image, size_t size) override { return t_.ModuleLoad(image, size); }
  Status ModuleUnload(DModule m) override { return t_.ModuleUnload(m); }
  Status Link(const std::vector<LinkInput>& inputs, const std::vector<LinkOption>& options, LinkOutput* out) override {
    return t_.Link(inputs, options, out);
  }
  Result<DFunction> ModuleGetFunction(DModule m, const char* name) override { return t_.ModuleGetFunction(m, name); }
  Result<std::pair<DevPtr, size_t>> ModuleGetGlobal(DModule m, const char* name, size_t size_hint) override { return t_.ModuleGetGlobal(m, name, size_hint); }
  bool GlobalIsManaged(DModule m, const char* name, DevPtr p) override { return t_.GlobalIsManaged(m, name, p); }
  Result<std::vector<std::string>> ModuleKernelNames(DModule m) override { return t_.ModuleKernelNames(m); }
  Result<std::vector<ParamInfo>> FuncParams(DFunction f) override { return t_.FuncParams(f); }
  Result<int> FuncGetAttribute(DFunction f, int attribute) override { return t_.FuncGetAttribute(f, attribute); }
  Status Launch(DFunction f, const LaunchConfig& config) override { return t_.Launch(f, config); }
  Result<std::pair<DevPtr, size_t>> MemAllocPitch(size_t width, size_t height) override { return t_.MemAllocPitch(width, height); }
  Status Copy3D(const CopySide& dst, const CopySide& src, uint64_t width, uint64_t height, uint64_t depth, DStream s) override { return t_.Copy3D(dst, src, width, height, depth, s); }
  Status Memset2D8(DevPtr dst, size_t pitch, uint8_t value, size_t width, size_t height, DStream s) override { return t_.Memset2D8(dst, pitch, value, width, height, s); }
  Result<DevPtr> MemAllocAsync(size_t bytes, DPool pool, DStream s) override { return t_.MemAllocAsync(bytes, pool, s); }
  Status MemFreeAsync(DevPtr p, DStream s) override { return t_.MemFreeAsync(p, s); }
  Status FreeGraphMemory(DevPtr p, DStream s) override { return t_.FreeGraphMemory(p, s); }
  Result<DPool> DefaultMemPool(int device) override { return t_.DefaultMemPool(device); }
  Result<DPool> GetMemPool(int device) override { return t_.GetMemPool(device); }
  Status SetMemPool(int device, DPool pool) override { return t_.SetMemPool(device, pool); }
  Result<DPool> MemPoolCreate(int device, uint64_t max_size, unsigned handle_types) override { return t_.MemPoolCreate(device, max_size, handle_types); }
  Status MemPoolDestroy(DPool pool) override { return t_.MemPoolDestroy(pool); }
  Status MemPoolSetAttribute(DPool pool, int attribute, uint64_t value) override { return t_.MemPoolSetAttribute(pool, attribute, value); }
  Result<uint64_t> MemPoolGetAttribute(DPool pool, int attribute) override { return t_.MemPoolGetAttribute(pool, attribute); }
  Status MemPoolTrimTo(DPool pool, size_t keep) override { return t_.MemPoolTrimTo(pool, keep); }
  Status MemcpyPeer(DevPtr dst, int dst_device, DevPtr src, int src_device, size_t n, DStream s) override { return t_.MemcpyPeer(dst, dst_device, src, src_device, n, s); }
  Result<bool> CanAccessPeer(int device, int peer) override { return t_.CanAccessPeer(device, peer); }
  Status EnablePeerAccess(int peer) override { return t_.EnablePeerAccess(peer); }
  Status DisablePeerAccess(int peer) override { return t_.DisablePeerAccess(peer); }
  Result<uint64_t> GetLimit(int limit) override { return t_.GetLimit(limit); }
  Status SetLimit(int limit, uint64_t value) override { return t_.SetLimit(limit, value); }
  Result<std::pair<int, int>> StreamPriorityRange() override { return t_.StreamPriorityRange(); }
  Result<IpcShare> IpcExportMemory(DevPtr base, uint64_t size) override { return t_.IpcExportMemory(base, size); }
  Result<DevPtr> IpcOpenMemory(const IpcShare& share, uint64_t size) override { return t_.IpcOpenMemory(share, size); }
  Status IpcCloseMemory(DevPtr p) override { return t_.IpcCloseMemory(p); }
  Result<IpcShare> IpcExportEvent(DEvent e) override { return t_.IpcExportEvent(e); }
  Result<DEvent> IpcOpenEvent(const IpcShare& share) override { return t_.IpcOpenEvent(share); }
  Result<IpcShare> MemPoolExport(DPool pool) override { return t_.MemPoolExport(pool); }
  Result<DPool> MemPoolImport(const IpcShare& share) override { return t_.MemPoolImport(share); }
  Result<IpcShare> MemPoolExportPointer(DevPtr p, uint64_t size) override { return t_.MemPoolExportPointer(p, size); }
  Result<DevPtr> MemPoolImportPointer(DPool pool, const IpcShare& share, uint64_t size) override {
    return t_.MemPoolImportPointer(pool, share, size);
  }
  gen::cuda::Api& cuda() override { return t_.cuda(); }
  Result<void*> Library(Domain library) override { return t_.Library(library); }
  Result<Activity*> activity() override { return t_.activity(); }

 private:
  Driver& t_;
};

}  // namespace remora::worker

// The host-emulated backend (host_driver.h): CUDA IPC - memory files and event states shared
// with sibling workers (their descriptors pass through the supervisor).

#include "worker/backend/host/host_driver.h"

namespace remora::worker::host {

Result<IpcShare> HostDriver::IpcExportMemory(DevPtr base, uint64_t) {
  ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(base));
  WaitAllStreams();  // the memory is copied into its file: nothing may write it meanwhile
  ASSIGN_OR_RETURN(int fd, h->Share(base));
  IpcShare share;
  share.fd = Fd(fd);
  return share;
}

Result<DevPtr> HostDriver::IpcOpenMemory(const IpcShare& share, uint64_t size) {
  if (!share.fd) return Error(Err::kInvalidResourceHandle, "no emulated memory to open");
  return heaps_[static_cast<size_t>(current_)].MapShared(share.fd.get(), size);
}

Status HostDriver::IpcCloseMemory(DevPtr p) {
  ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(p));
  ASSIGN_OR_RETURN(Block b, h->Release(p));
  Retire(b, RetiredMemory::Release::kUnmap);  // another process's memory: not this GPU's use
  return Status::Ok();
}

Result<IpcShare> HostDriver::IpcExportEvent(DEvent e) {
  if (!events_.count(e)) return Error(Err::kInvalidResourceHandle, "unknown emulated event");
  auto* ev = static_cast<EmuEvent*>(e);
  if (ev->shared == nullptr) {
    Fd fd(::memfd_create("remora-emulated-ipc-event", MFD_CLOEXEC));
    if (!fd || ::ftruncate(fd.get(), sizeof(IpcEventState)) != 0)
      return ErrnoStatus(Err::kMemoryAllocation, "emulated IPC event", errno);
    ASSIGN_OR_RETURN(IpcEventState * sh, MapEventState(fd.get()));
    new (sh) IpcEventState();
    if (ev->stream && ev->stream->completed.load() < ev->target) {
      // Recorded and not reached yet: the shared state takes that record over.
      sh->recorded.store(1);
      ev->stream->Submit(ev->stream, {}, [sh] { sh->completed.store(std::max<uint64_t>(sh->completed.load(), 1)); });
    }
    ev->shared = sh;
    ev->shared_fd = fd.release();
  }
  IpcShare share;
  share.fd = Fd(::fcntl(ev->shared_fd, F_DUPFD_CLOEXEC, 0));
  if (!share.fd) return ErrnoStatus(Err::kMemoryAllocation, "dup", errno);
  return share;
}

Result<DEvent> HostDriver::IpcOpenEvent(const IpcShare& share) {
  if (!share.fd) return Error(Err::kInvalidResourceHandle, "no emulated event to open");
  ASSIGN_OR_RETURN(IpcEventState * sh, MapEventState(share.fd.get()));
  auto* e = new EmuEvent;
  e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  e->shared = sh;
  e->shared_fd = ::fcntl(share.fd.get(), F_DUPFD_CLOEXEC, 0);
  events_.insert(e);
  return static_cast<DEvent>(e);
}

void HostDriver::WaitAllStreams() {
  for (auto& [h, st] : streams_)
    while (st->completed.load() < st->Issued()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  for (auto& [d, st] : legacy_streams_)
    while (st->completed.load() < st->Issued()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

Result<IpcEventState*> HostDriver::MapEventState(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof(IpcEventState))
    return Error(Err::kInvalidResourceHandle, "not an emulated IPC event");
  void* m = ::mmap(nullptr, sizeof(IpcEventState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return ErrnoStatus(Err::kMemoryAllocation, "map an emulated IPC event", errno);
  ipc_event_maps_.push_back(m);
  return static_cast<IpcEventState*>(m);
}

}  // namespace remora::worker::host

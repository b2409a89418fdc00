// ipc_shell FIFO: a CUDA application driven line by line by a test, for the CUDA IPC
// integration test (tests/integration/ipc_test.cc): several of these, in several sessions,
// export, open, free and close each other's memory and events.
//
// Reads "SEQ VERB ARGS" lines from FIFO and answers each with one line "SEQ RESULT" on
// stdout (flushed). Prints "ready" first. Errors are answers ("SEQ err NAME"), never exits.
//   alloc MIB            cudaMalloc: "ok ID"
//   free ID              cudaFree
//   fill ID BYTE         cudaMemset of the whole block, synchronised
//   expect ID BYTE       copies the whole block back: "ok" if every byte is BYTE, else "bad N"
//                        (N: the first byte that differs)
//   export ID            cudaIpcGetMemHandle: "ok HEX" (128 hex digits)
//   open HEX MIB         cudaIpcOpenMemHandle: "ok ID" (a block of MIB MiB, as the exporter made it)
//   close ID             cudaIpcCloseMemHandle
//   event                cudaEventCreateWithFlags(Interprocess|DisableTiming): "ok EID"
//   eexport EID          cudaIpcGetEventHandle: "ok HEX"
//   eopen HEX            cudaIpcOpenEventHandle: "ok EID"
//   stream               cudaStreamCreate: "ok SID"
//   busy SID US          a kernel the host-emulated backend runs for US microseconds
//   fillasync ID BYTE SID  cudaMemsetAsync on stream SID (not waited for)
//   record EID SID       cudaEventRecord
//   wait SID EID         cudaStreamWaitEvent
//   expectasync ID BYTE SID  cudaMemcpyAsync back on SID, cudaStreamSynchronize, then as expect
//   query EID            cudaEventQuery: "ok" or "err cudaErrorNotReady"
//   evsync EID           cudaEventSynchronize
//   edestroy EID         cudaEventDestroy
//   vcreate MIB          physical memory of the virtual memory API, shareable by POSIX file
//                        descriptor (cuMemCreate), mapped into a reserved range with
//                        read-write access: "ok ID" (a block fill/expect reach)
//   vexport ID           cuMemExportToShareableHandle: "ok /proc/PID/fd/N" (the descriptor,
//                        which another process opens by that path)
//   vimport PATH MIB     opens PATH, cuMemImportFromShareableHandle, maps it: "ok ID"
//   vrelease ID          unmaps, releases the handle and the range
//   pcreate              cudaMemPoolCreate, shareable by POSIX descriptor: "ok PID"
//   pexport PID          cudaMemPoolExportToShareableHandle: "ok /proc/PID/fd/N"
//   pimport PATH         opens PATH, cudaMemPoolImportFromShareableHandle: "ok PID"
//   palloc PID MIB       cudaMallocFromPoolAsync on the default stream, synchronised: "ok ID"
//                        (PID 0: cudaMallocAsync, from the device's current pool)
//   pcurrent PID         cudaDeviceSetMemPool(0, the pool)
//   pexportptr ID        cudaMemPoolExportPointer: "ok HEX"
//   pimportptr PID HEX MIB  cudaMemPoolImportPointer: "ok ID"
//   pfree ID             cudaFreeAsync on the default stream, synchronised
//   quit                 exits 0
#include <cuda.h>
#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "app_check.h"

extern "C" __global__ void remora_emulated_busy_us() {}

namespace {

struct Block {
  void* ptr;
  size_t bytes;
  bool opened;  // by IPC (closed, not freed)
  CUmemGenericAllocationHandle vmm = 0;  // physical memory mapped at ptr (vcreate, vimport)
};

// The driver's virtual memory calls, through the runtime's entry points (as PyTorch reaches them).
struct Vmm {
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;

  template <typename F>
  static void Get(const char* name, F* f) {
    cudaDriverEntryPointQueryResult q;
    void* p = nullptr;
    REQUIRE(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
                q == cudaDriverEntryPointSuccess,
            "no driver entry point %s", name);
    *f = reinterpret_cast<F>(p);
  }
  void Load() {
    if (create != nullptr) return;
    Get("cuMemCreate", &create);
    Get("cuMemRelease", &release);
    Get("cuMemAddressReserve", &reserve);
    Get("cuMemAddressFree", &address_free);
    Get("cuMemMap", &map);
    Get("cuMemUnmap", &unmap);
    Get("cuMemSetAccess", &set_access);
    Get("cuMemExportToShareableHandle", &export_handle);
    Get("cuMemImportFromShareableHandle", &import_handle);
    Get("cuGetErrorName", &error_name);
  }
  std::string Err(CUresult r) {
    const char* name = nullptr;
    error_name(r, &name);
    return std::string("err ") + (name ? name : "?");
  }
  // Maps `h` (of `bytes`) into a new range with read-write access for device 0.
  CUresult MapNew(CUmemGenericAllocationHandle h, size_t bytes, void** out) {
    CUdeviceptr va = 0;
    CUresult r = reserve(&va, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS) return r;
    r = map(va, bytes, 0, h, 0);
    if (r == CUDA_SUCCESS) {
      CUmemAccessDesc access = {};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = 0;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      r = set_access(va, bytes, &access, 1);
      if (r != CUDA_SUCCESS) unmap(va, bytes);
    }
    if (r != CUDA_SUCCESS) {
      address_free(va, bytes);
      return r;
    }
    *out = reinterpret_cast<void*>(va);
    return CUDA_SUCCESS;
  }
};

std::string Hex(const void* p, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = static_cast<const unsigned char*>(p)[i];
    s += k[c >> 4];
    s += k[c & 15];
  }
  return s;
}

bool Unhex(const std::string& s, void* out, size_t n) {
  if (s.size() != 2 * n) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(v);
  }
  return true;
}

std::string Err(cudaError_t e) { return std::string("err ") + cudaGetErrorName(e); }

}  // namespace

int main(int argc, char** argv) {
  REQUIRE(argc == 2, "usage: ipc_shell FIFO");
  std::printf("ready\n");
  std::fflush(stdout);
  std::ifstream in(argv[1]);
  REQUIRE(in, "cannot open %s", argv[1]);
  std::map<int, Block> blocks;
  std::map<int, cudaEvent_t> events;
  std::map<int, cudaStream_t> streams;
  Vmm vmm;
  std::map<int, cudaMemPool_t> pools;
  int next_id = 1;
  auto block = [&](int id) -> Block* {
    auto it = blocks.find(id);
    return it == blocks.end() ? nullptr : &it->second;
  };
  auto check_bytes = [&](Block* b, int value, cudaStream_t s) -> std::string {
    std::vector<unsigned char> back(b->bytes);
    cudaError_t e = cudaMemcpyAsync(back.data(), b->ptr, b->bytes, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return Err(e);
    for (size_t i = 0; i < back.size(); i++)
      if (back[i] != static_cast<unsigned char>(value)) return "bad " + std::to_string(i);
    return "ok";
  };
  for (std::string line; std::getline(in, line);) {
    std::istringstream ss(line);
    std::string seq, verb;
    ss >> seq >> verb;
    std::string out;
    if (verb == "alloc") {
      size_t mib = 0;
      ss >> mib;
      void* p = nullptr;
      cudaError_t e = cudaMalloc(&p, mib << 20);
      if (e == cudaSuccess) {
        blocks[next_id] = Block{p, mib << 20, false, 0};
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "free" || verb == "close") {
      int id = 0;
      ss >> id;
      Block* b = block(id);
      if (b == nullptr) {
        out = "err no-such-block";
      } else {
        cudaError_t e = verb == "free" ? cudaFree(b->ptr) : cudaIpcCloseMemHandle(b->ptr);
        if (e == cudaSuccess) blocks.erase(id);
        out = e == cudaSuccess ? "ok" : Err(e);
      }
    } else if (verb == "fill" || verb == "expect" || verb == "fillasync" || verb == "expectasync") {
      int id = 0, value = 0, sid = 0;
      ss >> id >> value >> sid;
      Block* b = block(id);
      cudaStream_t s = streams.count(sid) ? streams[sid] : nullptr;
      if (b == nullptr) {
        out = "err no-such-block";
      } else if (verb == "fill") {
        cudaError_t e = cudaMemset(b->ptr, value, b->bytes);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        out = e == cudaSuccess ? "ok" : Err(e);
      } else if (verb == "fillasync") {
        cudaError_t e = cudaMemsetAsync(b->ptr, value, b->bytes, s);
        out = e == cudaSuccess ? "ok" : Err(e);
      } else {
        out = check_bytes(b, value, s);
      }
    } else if (verb == "export") {
      int id = 0;
      ss >> id;
      Block* b = block(id);
      cudaIpcMemHandle_t h;
      cudaError_t e = b ? cudaIpcGetMemHandle(&h, b->ptr) : cudaErrorInvalidValue;
      out = e == cudaSuccess ? "ok " + Hex(&h, sizeof(h)) : Err(e);
    } else if (verb == "open") {
      std::string hex;
      ss >> hex;
      cudaIpcMemHandle_t h;
      void* p = nullptr;
      cudaError_t e = Unhex(hex, &h, sizeof(h)) ? cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)
                                                 : cudaErrorInvalidValue;
      size_t mib = 0;
      ss >> mib;
      size_t size = mib << 20;
      if (e == cudaSuccess) {
        cudaPointerAttributes attr;
        e = cudaPointerGetAttributes(&attr, p);
        if (e == cudaSuccess && attr.type != cudaMemoryTypeDevice) e = cudaErrorInvalidValue;
      }
      if (e == cudaSuccess) {
        blocks[next_id] = Block{p, size, true, 0};
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "event") {
      cudaEvent_t ev;
      cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming);
      if (e == cudaSuccess) {
        events[next_id] = ev;
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "eexport") {
      int id = 0;
      ss >> id;
      cudaIpcEventHandle_t h;
      cudaError_t e = events.count(id) ? cudaIpcGetEventHandle(&h, events[id]) : cudaErrorInvalidValue;
      out = e == cudaSuccess ? "ok " + Hex(&h, sizeof(h)) : Err(e);
    } else if (verb == "eopen") {
      std::string hex;
      ss >> hex;
      cudaIpcEventHandle_t h;
      cudaEvent_t ev;
      cudaError_t e = Unhex(hex, &h, sizeof(h)) ? cudaIpcOpenEventHandle(&ev, h) : cudaErrorInvalidValue;
      if (e == cudaSuccess) {
        events[next_id] = ev;
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "stream") {
      cudaStream_t s;
      cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      if (e == cudaSuccess) {
        streams[next_id] = s;
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "busy") {
      int sid = 0, us = 0;
      ss >> sid >> us;
      remora_emulated_busy_us<<<us, 1, 0, streams[sid]>>>();
      cudaError_t e = cudaGetLastError();
      out = e == cudaSuccess ? "ok" : Err(e);
    } else if (verb == "record" || verb == "wait") {
      int a = 0, b = 0;
      ss >> a >> b;
      cudaError_t e = verb == "record" ? cudaEventRecord(events[a], streams[b]) : cudaStreamWaitEvent(streams[a], events[b], 0);
      out = e == cudaSuccess ? "ok" : Err(e);
    } else if (verb == "query" || verb == "evsync") {
      int id = 0;
      ss >> id;
      cudaError_t e = verb == "query" ? cudaEventQuery(events[id]) : cudaEventSynchronize(events[id]);
      out = e == cudaSuccess ? "ok" : Err(e);
    } else if (verb == "edestroy") {
      int id = 0;
      ss >> id;
      cudaError_t e = events.count(id) ? cudaEventDestroy(events[id]) : cudaErrorInvalidValue;
      events.erase(id);
      out = e == cudaSuccess ? "ok" : Err(e);
    } else if (verb == "vcreate" || verb == "vimport") {
      vmm.Load();
      std::string path;
      if (verb == "vimport") ss >> path;
      size_t mib = 0;
      ss >> mib;
      size_t bytes = mib << 20;
      CUmemGenericAllocationHandle h = 0;
      CUresult r;
      if (verb == "vcreate") {
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        r = vmm.create(&h, bytes, &prop, 0);
      } else {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        r = fd < 0 ? CUDA_ERROR_INVALID_VALUE
                   : vmm.import_handle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (fd >= 0) ::close(fd);
      }
      void* p = nullptr;
      if (r == CUDA_SUCCESS) {
        r = vmm.MapNew(h, bytes, &p);
        if (r != CUDA_SUCCESS) vmm.release(h);
      }
      if (r == CUDA_SUCCESS) {
        blocks[next_id] = Block{p, bytes, false, h};
        out = "ok " + std::to_string(next_id++);
      } else {
        out = vmm.Err(r);
      }
    } else if (verb == "vexport") {
      vmm.Load();
      int id = 0;
      ss >> id;
      Block* b = block(id);
      int fd = -1;
      CUresult r = b && b->vmm ? vmm.export_handle(&fd, b->vmm, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                               : CUDA_ERROR_INVALID_VALUE;
      out = r == CUDA_SUCCESS ? "ok /proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd) : vmm.Err(r);
    } else if (verb == "vrelease") {
      vmm.Load();
      int id = 0;
      ss >> id;
      Block* b = block(id);
      if (b == nullptr || !b->vmm) {
        out = "err no-such-block";
      } else {
        auto va = reinterpret_cast<CUdeviceptr>(b->ptr);
        CUresult r = vmm.unmap(va, b->bytes);
        if (r == CUDA_SUCCESS) r = vmm.release(b->vmm);
        if (r == CUDA_SUCCESS) r = vmm.address_free(va, b->bytes);
        if (r == CUDA_SUCCESS) blocks.erase(id);
        out = r == CUDA_SUCCESS ? "ok" : vmm.Err(r);
      }
    } else if (verb == "pcreate") {
      cudaMemPoolProps props = {};
      props.allocType = cudaMemAllocationTypePinned;
      props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = 0;
      cudaMemPool_t pool;
      cudaError_t e = cudaMemPoolCreate(&pool, &props);
      if (e == cudaSuccess) {
        pools[next_id] = pool;
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "pexport") {
      int id = 0;
      ss >> id;
      int fd = -1;
      cudaError_t e = pools.count(id) ? cudaMemPoolExportToShareableHandle(&fd, pools[id], cudaMemHandleTypePosixFileDescriptor, 0)
                                      : cudaErrorInvalidValue;
      out = e == cudaSuccess ? "ok /proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd) : Err(e);
    } else if (verb == "pimport") {
      std::string path;
      ss >> path;
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      cudaMemPool_t pool;
      cudaError_t e = fd < 0 ? cudaErrorInvalidValue
                             : cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                                    cudaMemHandleTypePosixFileDescriptor, 0);
      if (fd >= 0) ::close(fd);
      if (e == cudaSuccess) {
        pools[next_id] = pool;
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "palloc") {
      int id = 0;
      size_t mib = 0;
      ss >> id >> mib;
      void* p = nullptr;
      cudaError_t e = id == 0           ? cudaMallocAsync(&p, mib << 20, 0)
                      : pools.count(id) ? cudaMallocFromPoolAsync(&p, mib << 20, pools[id], 0)
                                        : cudaErrorInvalidValue;
      if (e == cudaSuccess) e = cudaStreamSynchronize(0);
      if (e == cudaSuccess) {
        blocks[next_id] = Block{p, mib << 20, false, 0};
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "pcurrent") {
      int id = 0;
      ss >> id;
      cudaError_t e = pools.count(id) ? cudaDeviceSetMemPool(0, pools[id]) : cudaErrorInvalidValue;
      out = e == cudaSuccess ? "ok" : Err(e);
    } else if (verb == "pexportptr") {
      int id = 0;
      ss >> id;
      Block* b = block(id);
      cudaMemPoolPtrExportData data;
      cudaError_t e = b ? cudaMemPoolExportPointer(&data, b->ptr) : cudaErrorInvalidValue;
      out = e == cudaSuccess ? "ok " + Hex(&data, sizeof(data)) : Err(e);
    } else if (verb == "pimportptr") {
      int id = 0;
      std::string hex;
      size_t mib = 0;
      ss >> id >> hex >> mib;
      cudaMemPoolPtrExportData data;
      void* p = nullptr;
      cudaError_t e = pools.count(id) && Unhex(hex, &data, sizeof(data)) ? cudaMemPoolImportPointer(&p, pools[id], &data)
                                                                         : cudaErrorInvalidValue;
      if (e == cudaSuccess) {
        blocks[next_id] = Block{p, mib << 20, false, 0};
        out = "ok " + std::to_string(next_id++);
      } else {
        out = Err(e);
      }
    } else if (verb == "pfree") {
      int id = 0;
      ss >> id;
      Block* b = block(id);
      cudaError_t e = b ? cudaFreeAsync(b->ptr, 0) : cudaErrorInvalidValue;
      if (e == cudaSuccess) e = cudaStreamSynchronize(0);
      if (e == cudaSuccess) blocks.erase(id);
      out = e == cudaSuccess ? "ok" : Err(e);
    } else if (verb == "quit") {
      std::printf("%s bye\n", seq.c_str());
      std::fflush(stdout);
      return 0;
    } else {
      out = "err unknown-verb";
    }
    (void)cudaGetLastError();
    std::printf("%s %s\n", seq.c_str(), out.c_str());
    std::fflush(stdout);
  }
  return 0;
}

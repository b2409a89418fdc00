// mem_shell FIFO: a CUDA application driven line by line by a test, for the tenancy tests
// (quota changes, attach/detach, forged pointers while the application runs).
//
// Reads commands "SEQ VERB ARGS" from FIFO (a named pipe the test writes) and answers each
// with one line "SEQ RESULT" on stdout (flushed). Prints "ready" first. Verbs:
//   alloc DEV MIB      cudaSetDevice(DEV) + cudaMalloc: "SEQ ok ID 0xPTR" | "SEQ err NAME"
//   free ID            "SEQ ok" | "SEQ err NAME"
//   check ID           writes a pattern into allocation ID, reads it back: "SEQ ok" | "SEQ err NAME"
//   info DEV           cudaMemGetInfo on DEV: "SEQ info FREE TOTAL" | "SEQ err NAME"
//   count              asks the server something first (so a device change is noticed), then
//                      cudaGetDeviceCount: "SEQ count N"
//   raw 0xPTR          cudaMemcpy DtoH, cudaMemset and cudaFree on a pointer this process
//                      never allocated: "SEQ raw MEMCPY MEMSET FREE" (error names)
//   stream DEV         cudaSetDevice(DEV) + cudaStreamCreate: "SEQ ok SID" | "SEQ err NAME"
//   hostfn SID         cudaLaunchHostFunc on stream SID, not waited for: "SEQ ok" | "SEQ err NAME"
//   launch SID         a kernel launch (it never writes) on stream SID: "SEQ ok" | "SEQ err NAME"
//   sync SID           cudaStreamSynchronize(SID): "SEQ ok" | "SEQ err NAME"
//   xwait SID SIG DEV  an event created on device DEV, recorded on stream SIG (of DEV);
//                      stream SID waits for it (cudaStreamWaitEvent) and is synchronised;
//                      the event destroyed: "SEQ ok" | "SEQ err NAME"
//   copy HOW DST SRC   writes a pattern into allocation SRC, copies it into allocation DST
//                      (HOW: peer = cudaMemcpyPeer, default = cudaMemcpy with
//                      cudaMemcpyDefault, async = cudaMemcpyPeerAsync on a stream of DST's
//                      device, then cudaStreamSynchronize) and reads DST back: "SEQ ok" |
//                      "SEQ err NAME" | "SEQ err data-mismatch"
//   peer DEV PEER      cudaDeviceCanAccessPeer: "SEQ peer 0|1" | "SEQ err NAME"
//   quit               exits 0
// The application never exits on a CUDA error: errors are answers.
#include <algorithm>
#include <cinttypes>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "app_check.h"

namespace {

struct Block {
  void* ptr;
  size_t bytes;
  int device;
};

__global__ void Nothing(int* p) {
  if (p != nullptr) *p = 1;
}

void CUDART_CB HostFn(void*) {}

}  // namespace

int main(int argc, char** argv) {
  REQUIRE(argc == 2, "usage: mem_shell FIFO");
  std::printf("ready\n");
  std::fflush(stdout);
  std::ifstream in(argv[1]);
  REQUIRE(in, "cannot open %s", argv[1]);
  std::map<int, Block> blocks;
  std::map<int, cudaStream_t> streams;
  int next_id = 1;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ss(line);
    std::string seq, verb;
    ss >> seq >> verb;
    std::string out;
    if (verb == "alloc") {
      int dev = 0;
      size_t mib = 0;
      ss >> dev >> mib;
      void* p = nullptr;
      cudaError_t e = cudaSetDevice(dev);
      if (e == cudaSuccess) e = cudaMalloc(&p, mib << 20);
      if (e == cudaSuccess) {
        blocks[next_id] = Block{p, mib << 20, dev};
        char buf[64];
        std::snprintf(buf, sizeof(buf), "ok %d 0x%" PRIxPTR, next_id++, reinterpret_cast<uintptr_t>(p));
        out = buf;
      } else {
        out = std::string("err ") + cudaGetErrorName(e);
      }
    } else if (verb == "free" || verb == "check") {
      int id = 0;
      ss >> id;
      auto it = blocks.find(id);
      if (it == blocks.end()) {
        out = "err no-such-block";
      } else if (verb == "free") {
        cudaError_t e = cudaSetDevice(it->second.device);
        if (e == cudaSuccess) e = cudaFree(it->second.ptr);
        if (e == cudaSuccess) blocks.erase(it);
        out = e == cudaSuccess ? "ok" : std::string("err ") + cudaGetErrorName(e);
      } else {
        size_t n = std::min<size_t>(it->second.bytes, 1 << 20);
        std::vector<unsigned char> pattern = RandomBytes(n, static_cast<unsigned>(id)), back(n);
        cudaError_t e = cudaSetDevice(it->second.device);
        if (e == cudaSuccess) e = cudaMemcpy(it->second.ptr, pattern.data(), n, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaMemcpy(back.data(), it->second.ptr, n, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) out = std::string("err ") + cudaGetErrorName(e);
        else out = pattern == back ? "ok" : "err data-mismatch";
      }
    } else if (verb == "info") {
      int dev = 0;
      ss >> dev;
      size_t free_b = 0, total_b = 0;
      cudaError_t e = cudaSetDevice(dev);
      if (e == cudaSuccess) e = cudaMemGetInfo(&free_b, &total_b);
      out = e == cudaSuccess ? "info " + std::to_string(free_b) + " " + std::to_string(total_b)
                             : std::string("err ") + cudaGetErrorName(e);
    } else if (verb == "count") {
      (void)cudaSetDevice(0);
      size_t f, t;
      (void)cudaMemGetInfo(&f, &t);  // a round trip: the reply carries the device generation
      (void)cudaGetLastError();
      int n = -1;
      cudaError_t e = cudaGetDeviceCount(&n);
      out = e == cudaSuccess ? "count " + std::to_string(n) : std::string("err ") + cudaGetErrorName(e);
    } else if (verb == "raw") {
      std::string text;
      ss >> text;
      void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(std::strtoull(text.c_str(), nullptr, 0)));
      unsigned char buf[256];
      cudaError_t a = cudaMemcpy(buf, p, sizeof(buf), cudaMemcpyDeviceToHost);
      cudaError_t b = cudaMemset(p, 0, sizeof(buf));
      cudaError_t c = cudaFree(p);
      (void)cudaGetLastError();
      out = std::string("raw ") + cudaGetErrorName(a) + " " + cudaGetErrorName(b) + " " + cudaGetErrorName(c);
    } else if (verb == "stream") {
      int dev = 0;
      ss >> dev;
      cudaStream_t st = nullptr;
      cudaError_t e = cudaSetDevice(dev);
      if (e == cudaSuccess) e = cudaStreamCreate(&st);
      if (e == cudaSuccess) {
        streams[next_id] = st;
        out = "ok " + std::to_string(next_id++);
      } else {
        out = std::string("err ") + cudaGetErrorName(e);
      }
    } else if (verb == "sync") {
      int id = 0;
      ss >> id;
      auto it = streams.find(id);
      cudaError_t e = it == streams.end() ? cudaErrorInvalidValue : cudaStreamSynchronize(it->second);
      out = e == cudaSuccess ? "ok" : std::string("err ") + cudaGetErrorName(e);
    } else if (verb == "xwait") {
      int waiter = 0, signal = 0, dev = 0;
      ss >> waiter >> signal >> dev;
      auto w = streams.find(waiter), s = streams.find(signal);
      cudaError_t e = w == streams.end() || s == streams.end() ? cudaErrorInvalidValue : cudaSetDevice(dev);
      cudaEvent_t ev = nullptr;
      if (e == cudaSuccess) e = cudaEventCreate(&ev);
      if (e == cudaSuccess) e = cudaEventRecord(ev, s->second);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(w->second, ev, 0);
      if (e == cudaSuccess) e = cudaStreamSynchronize(w->second);
      if (ev != nullptr && e == cudaSuccess) e = cudaEventDestroy(ev);
      out = e == cudaSuccess ? "ok" : std::string("err ") + cudaGetErrorName(e);
    } else if (verb == "hostfn" || verb == "launch") {
      int id = 0;
      ss >> id;
      auto it = streams.find(id);
      cudaError_t e = cudaErrorInvalidValue;
      if (it != streams.end() && verb == "hostfn") e = cudaLaunchHostFunc(it->second, HostFn, nullptr);
      if (it != streams.end() && verb == "launch") {
        Nothing<<<1, 1, 0, it->second>>>(nullptr);
        e = cudaGetLastError();
      }
      out = e == cudaSuccess ? "ok" : std::string("err ") + cudaGetErrorName(e);
    } else if (verb == "copy") {
      std::string how;
      int d = 0, s = 0;
      ss >> how >> d >> s;
      auto di = blocks.find(d), si = blocks.find(s);
      if (di == blocks.end() || si == blocks.end()) {
        out = "err no-such-block";
      } else {
        size_t n = std::min<size_t>({di->second.bytes, si->second.bytes, 3 << 20});
        std::vector<unsigned char> pattern = RandomBytes(n, static_cast<unsigned>(d * 131 + s)), back(n);
        cudaError_t e = cudaSetDevice(si->second.device);
        if (e == cudaSuccess) e = cudaMemcpy(si->second.ptr, pattern.data(), n, cudaMemcpyHostToDevice);
        if (e == cudaSuccess && how == "peer")
          e = cudaMemcpyPeer(di->second.ptr, di->second.device, si->second.ptr, si->second.device, n);
        if (e == cudaSuccess && how == "default") e = cudaMemcpy(di->second.ptr, si->second.ptr, n, cudaMemcpyDefault);
        if (e == cudaSuccess && how == "async") {
          cudaStream_t st = nullptr;
          e = cudaSetDevice(di->second.device);
          if (e == cudaSuccess) e = cudaStreamCreate(&st);
          if (e == cudaSuccess)
            e = cudaMemcpyPeerAsync(di->second.ptr, di->second.device, si->second.ptr, si->second.device, n, st);
          if (e == cudaSuccess) e = cudaStreamSynchronize(st);
          if (st != nullptr) (void)cudaStreamDestroy(st);
        }
        if (e == cudaSuccess) e = cudaSetDevice(di->second.device);
        if (e == cudaSuccess) e = cudaMemcpy(back.data(), di->second.ptr, n, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) out = std::string("err ") + cudaGetErrorName(e);
        else out = pattern == back ? "ok" : "err data-mismatch";
      }
    } else if (verb == "peer") {
      int dev = 0, peer = 0, can = -1;
      ss >> dev >> peer;
      cudaError_t e = cudaDeviceCanAccessPeer(&can, dev, peer);
      out = e == cudaSuccess ? "peer " + std::to_string(can) : std::string("err ") + cudaGetErrorName(e);
    } else if (verb == "quit") {
      std::printf("%s bye\n", seq.c_str());
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

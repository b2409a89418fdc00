// remora-copy-floor: the least a 4 KiB cudaMemcpy remoted over loopback TCP can take on this
// machine, measured beside the native copy in one process (issue 21's 4 KiB cells). No
// Remora code: a server thread owns the GPU and a client thread (which never calls CUDA)
// talks to it over one plain TCP connection (loopback.hpp), one send and one receive per call
// on each side, both waiting by spinning (as Remora does) - the least any remoting layer
// does. Per mode:
//   d2h        request 8 bytes; the server copies 4 KiB device -> pinned, replies with them
//   h2d        request carries 4 KiB; the server copies pinned -> device, then replies
//   h2d-early  the same, but the reply goes out once the DMA is issued and the server
//              waits for it afterwards (what Remora's worker does for small copies)
// Each figure is the median over 7 rounds of the mean of 2,000 calls (after 100 to warm
// up), as remora-bench measures. Prints one line per mode with the ratio to native.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include "loopback.hpp"
#include "stats.hpp"

namespace remora::bench {
namespace {

constexpr size_t kBytes = 4096;
constexpr int kWarmup = 100, kIters = 2000, kRounds = 7;

enum class Mode { kD2H, kH2D, kH2DEarly };

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "remora-copy-floor: %s\n", what.c_str());
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median over kRounds of the mean time of one call (µs); `calls(n)` makes n calls.
double Median(const std::function<void(int)>& calls) {
  calls(kWarmup);
  std::vector<double> us;
  for (int r = 0; r < kRounds; r++) {
    auto t0 = std::chrono::steady_clock::now();
    calls(kIters);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kIters);
  }
  return median(std::move(us));
}

// The server's side of one mode: serves until the client closes. Owns the GPU.
void Serve(int fd, Mode mode, void* dev, char* pinned, cudaStream_t stream) {
  Check(cudaSetDevice(0), "cudaSetDevice (server)");
  const size_t in = mode == Mode::kD2H ? 8 : kBytes, out = mode == Mode::kD2H ? kBytes : 8;
  while (read_all_spinning(fd, pinned, in)) {
    switch (mode) {
      case Mode::kD2H: Check(cudaMemcpy(pinned, dev, kBytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H"); break;
      case Mode::kH2D: Check(cudaMemcpy(dev, pinned, kBytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D"); break;
      case Mode::kH2DEarly:
        Check(cudaMemcpyAsync(dev, pinned, kBytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync H2D");
        break;
    }
    if (!write_all(fd, pinned, out)) break;
    if (mode == Mode::kH2DEarly) Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
}

double Remoted(Mode mode, void* dev, char* pinned, cudaStream_t stream) {
  std::vector<Socket> tx, rx;
  std::string error;
  if (!connect_pairs(1, &tx, &rx, &error)) Die(error);
  std::thread server(Serve, rx[0].fd, mode, dev, pinned, stream);
  std::vector<char> buf(kBytes, 'c');
  const size_t out = mode == Mode::kD2H ? 8 : kBytes, in = mode == Mode::kD2H ? kBytes : 8;
  double us = Median([&](int n) {
    for (int i = 0; i < n; i++)
      if (!write_all(tx[0].fd, buf.data(), out) || !read_all_spinning(tx[0].fd, buf.data(), in)) Die("the loopback connection failed");
  });
  tx.clear();  // the server sees the close and returns
  server.join();
  return us;
}

}  // namespace
}  // namespace remora::bench

int main() {
  using namespace remora::bench;
  void* dev = nullptr;
  char *pinned = nullptr, *server_pinned = nullptr;
  cudaStream_t stream = nullptr;
  Check(cudaSetDevice(0), "cudaSetDevice");
  Check(cudaMalloc(&dev, kBytes), "cudaMalloc");
  Check(cudaMallocHost(reinterpret_cast<void**>(&pinned), kBytes), "cudaMallocHost");
  Check(cudaMallocHost(reinterpret_cast<void**>(&server_pinned), kBytes), "cudaMallocHost");
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::memset(pinned, 'n', kBytes);
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");

  // Native, as remora-bench: synchronous copies on the legacy stream, a synchronisation last.
  auto native = [&](cudaMemcpyKind kind) {
    return Median([&](int n) {
      for (int i = 0; i < n; i++)
        Check(kind == cudaMemcpyHostToDevice ? cudaMemcpy(dev, pinned, kBytes, kind) : cudaMemcpy(pinned, dev, kBytes, kind),
              "cudaMemcpy");
      Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    });
  };
  double native_d2h = native(cudaMemcpyDeviceToHost), native_h2d = native(cudaMemcpyHostToDevice);
  double d2h = Remoted(Mode::kD2H, dev, server_pinned, stream);
  double h2d = Remoted(Mode::kH2D, dev, server_pinned, stream);
  double early = Remoted(Mode::kH2DEarly, dev, server_pinned, stream);

  std::printf("remoted 4 KiB copy floor over loopback TCP on %s (median of %d rounds of %d calls)\n", prop.name,
              kRounds, kIters);
  std::printf("%-34s %10s %10s %8s\n", "copy", "native us", "floor us", "x");
  auto row = [](const char* name, double n, double f) { std::printf("%-34s %10.2f %10.2f %8.2f\n", name, n, f, f / n); };
  row("D2H pinned 4 KiB", native_d2h, d2h);
  row("H2D pinned 4 KiB (reply after DMA)", native_h2d, h2d);
  row("H2D pinned 4 KiB (reply, then DMA)", native_h2d, early);
  cudaStreamDestroy(stream);
  cudaFreeHost(server_pinned);
  cudaFreeHost(pinned);
  cudaFree(dev);
  return 0;
}

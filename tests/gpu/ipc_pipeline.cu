// ipc_pipeline: a producer/transformer/consumer pipeline of three processes passing device
// buffers and events by CUDA IPC (cudaIpcGetMemHandle/OpenMemHandle/CloseMemHandle,
// cudaEventCreateWithFlags(cudaEventInterprocess | cudaEventDisableTiming),
// cudaIpcGetEventHandle/OpenEventHandle, cudaStreamWaitEvent on another process's event,
// cudaEventQuery/cudaEventSynchronize on it).
//
// The producer (this process) starts the transformer and the consumer by executing itself
// again (a fresh process each: a forked CUDA process cannot use CUDA). Per round r:
//   producer:    waits (on its stream) for the transformer's "A consumed" event, fills A with
//                f(r, i) in a kernel, records "A ready", tells the transformer (pipe)
//   transformer: its stream waits for "A ready" and "B consumed"; B[i] = 3 * A[i] + r;
//                records "A consumed" and "B ready"; tells both neighbours
//   consumer:    its stream waits for "B ready"; a kernel counts the elements of B that are
//                not 3 * f(r, i) + r; records "B consumed"; tells the transformer
// Handles travel on the pipes as hex. The consumer copies its count back at the end; the
// producer prints PASS only if every stage said OK and no element was ever wrong.
#define GPU_TEST_NAME "ipc_pipeline"
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_test.h"

namespace {

constexpr int kN = 1 << 20;  // elements per buffer (4 MiB)
constexpr int kRounds = 50;

__host__ __device__ unsigned F(int r, int i) { return static_cast<unsigned>(i) * 2654435761u + static_cast<unsigned>(r) * 40503u; }

__global__ void Produce(unsigned* a, int r) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kN; i += gridDim.x * blockDim.x) a[i] = F(r, i);
}
__global__ void Transform(const unsigned* a, unsigned* b, int r) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kN; i += gridDim.x * blockDim.x) b[i] = 3u * a[i] + r;
}
__global__ void Check(const unsigned* b, int r, unsigned long long* wrong) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kN; i += gridDim.x * blockDim.x)
    if (b[i] != 3u * F(r, i) + static_cast<unsigned>(r)) atomicAdd(wrong, 1ull);
}

template <typename H>
std::string Hex(const H& h) {
  static const char* k = "0123456789abcdef";
  std::string s;
  const auto* p = reinterpret_cast<const unsigned char*>(&h);
  for (size_t i = 0; i < sizeof(H); i++) {
    s += k[p[i] >> 4];
    s += k[p[i] & 15];
  }
  return s;
}
template <typename H>
H Unhex(const std::string& s) {
  H h;
  if (s.size() != 2 * sizeof(H)) gpu_test::fail("a malformed handle on the pipe (%zu hex digits)", s.size());
  auto* p = reinterpret_cast<unsigned char*>(&h);
  for (size_t i = 0; i < sizeof(H); i++) {
    unsigned v = 0;
    std::sscanf(s.c_str() + 2 * i, "%2x", &v);
    p[i] = static_cast<unsigned char>(v);
  }
  return h;
}

// A line protocol on a pipe.
struct Line {
  FILE* in = nullptr;
  FILE* out = nullptr;
  std::string Read() {
    char buf[512];
    if (std::fgets(buf, sizeof buf, in) == nullptr) gpu_test::fail("a neighbour process ended early");
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  void Write(const std::string& s) {
    std::fprintf(out, "%s\n", s.c_str());
    std::fflush(out);
  }
  std::string Expect(const char* tag) {  // "TAG rest" -> rest
    std::string s = Read();
    size_t n = std::strlen(tag);
    if (s.compare(0, n, tag) != 0 || s.size() <= n) gpu_test::fail("expected %s on the pipe, got '%s'", tag, s.c_str());
    return s.substr(n + 1);
  }
};

cudaEvent_t IpcEvent() {
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming));
  return e;
}

int Transformer(Line up, Line down) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* a = nullptr;
  unsigned* b = nullptr;
  std::string msg = up.Expect("A");
  std::string mh = msg.substr(0, 128), eh = msg.substr(129);
  CK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&a), Unhex<cudaIpcMemHandle_t>(mh), cudaIpcMemLazyEnablePeerAccess));
  cudaEvent_t a_ready;
  CK(cudaIpcOpenEventHandle(&a_ready, Unhex<cudaIpcEventHandle_t>(eh)));
  cudaEvent_t a_consumed = IpcEvent(), b_ready = IpcEvent();
  cudaIpcEventHandle_t h;
  CK(cudaIpcGetEventHandle(&h, a_consumed));
  up.Write("ACKA " + Hex(h));
  CK(cudaMalloc(&b, kN * sizeof(unsigned)));
  cudaIpcMemHandle_t bh;
  CK(cudaIpcGetMemHandle(&bh, b));
  CK(cudaIpcGetEventHandle(&h, b_ready));
  down.Write("B " + Hex(bh) + " " + Hex(h));
  cudaEvent_t b_consumed;
  CK(cudaIpcOpenEventHandle(&b_consumed, Unhex<cudaIpcEventHandle_t>(down.Expect("ACKB"))));
  for (int r = 0; r < kRounds; r++) {
    if (std::stoi(up.Expect("R")) != r) gpu_test::fail("transformer: rounds out of order");
    CK(cudaStreamWaitEvent(s, a_ready, 0));
    if (r > 0) {
      if (std::stoi(down.Expect("b")) != r - 1) gpu_test::fail("transformer: acks out of order");
      CK(cudaStreamWaitEvent(s, b_consumed, 0));
    }
    Transform<<<264, 256, 0, s>>>(a, b, r);
    CK_LAUNCH("Transform");
    CK(cudaEventRecord(a_consumed, s));
    CK(cudaEventRecord(b_ready, s));
    up.Write("a " + std::to_string(r));
    down.Write("R " + std::to_string(r));
  }
  (void)down.Expect("b");
  // The consumer has queued its last check: wait for it before B goes.
  CK(cudaEventSynchronize(b_consumed));
  CK(cudaIpcCloseMemHandle(a));
  CK(cudaStreamSynchronize(s));
  down.Write("DONE");
  if (down.Read() != "CLOSED") gpu_test::fail("transformer: the consumer did not close B");
  CK(cudaFree(b));
  std::printf("transformer OK\n");
  return 0;
}

int Consumer(Line up) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::string msg = up.Expect("B");
  unsigned* b = nullptr;
  CK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&b), Unhex<cudaIpcMemHandle_t>(msg.substr(0, 128)),
                          cudaIpcMemLazyEnablePeerAccess));
  cudaEvent_t b_ready;
  CK(cudaIpcOpenEventHandle(&b_ready, Unhex<cudaIpcEventHandle_t>(msg.substr(129))));
  cudaEvent_t b_consumed = IpcEvent();
  cudaIpcEventHandle_t h;
  CK(cudaIpcGetEventHandle(&h, b_consumed));
  up.Write("ACKB " + Hex(h));
  unsigned long long* wrong = nullptr;
  CK(cudaMalloc(&wrong, sizeof(*wrong)));
  CK(cudaMemset(wrong, 0, sizeof(*wrong)));
  for (int r = 0; r < kRounds; r++) {
    if (std::stoi(up.Expect("R")) != r) gpu_test::fail("consumer: rounds out of order");
    CK(cudaStreamWaitEvent(s, b_ready, 0));
    Check<<<264, 256, 0, s>>>(b, r, wrong);
    CK_LAUNCH("Check");
    CK(cudaEventRecord(b_consumed, s));
    up.Write("b " + std::to_string(r));
  }
  if (up.Read() != "DONE") gpu_test::fail("consumer: expected DONE");
  CK(cudaStreamSynchronize(s));
  cudaError_t q = cudaEventQuery(b_ready);
  if (q != cudaSuccess) gpu_test::fail("consumer: the transformer's last record is not complete (%s)", cudaGetErrorName(q));
  unsigned long long host = 0;
  CK(cudaMemcpy(&host, wrong, sizeof(host), cudaMemcpyDeviceToHost));
  // The last round's B, read back through the IPC mapping, checked here too (so a device
  // that never ran the kernels cannot pass).
  std::vector<unsigned> last(kN);
  CK(cudaMemcpy(last.data(), b, kN * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; i++)
    if (last[i] != 3u * F(kRounds - 1, i) + static_cast<unsigned>(kRounds - 1))
      gpu_test::fail("consumer: B[%d] of the last round is %u, expected %u", i, last[i], 3u * F(kRounds - 1, i) + kRounds - 1);
  CK(cudaIpcCloseMemHandle(b));
  up.Write("CLOSED");
  if (host != 0) gpu_test::fail("consumer: %llu elements were wrong over %d rounds", host, kRounds);
  std::printf("consumer OK %d rounds of %d elements checked\n", kRounds, kN);
  return 0;
}

pid_t Spawn(const char* self, const char* role, std::vector<int> fds) {
  pid_t pid = fork();
  if (pid < 0) gpu_test::fail("fork: %s", std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failing producer takes its pipeline down with it
    std::vector<std::string> args = {self, role};
    for (int fd : fds) args.push_back(std::to_string(fd));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  return pid;
}

Line Open(int in, int out) { return Line{fdopen(in, "r"), fdopen(out, "w")}; }

void Timeout(int) {
  static const char msg[] = "FAIL ipc_pipeline: a stage waited more than 120 s\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGALRM, Timeout);
  alarm(120);  // a stage waiting forever for a neighbour that failed fails instead
  if (argc == 6 && std::strcmp(argv[1], "transformer") == 0)
    return Transformer(Open(std::atoi(argv[2]), std::atoi(argv[3])), Open(std::atoi(argv[4]), std::atoi(argv[5])));
  if (argc == 4 && std::strcmp(argv[1], "consumer") == 0) return Consumer(Open(std::atoi(argv[2]), std::atoi(argv[3])));

  int p2t[2], t2p[2], t2c[2], c2t[2];
  if (pipe(p2t) || pipe(t2p) || pipe(t2c) || pipe(c2t)) gpu_test::fail("pipe: %s", std::strerror(errno));
  fflush(stdout);
  pid_t t = Spawn(argv[0], "transformer", {p2t[0], t2p[1], c2t[0], t2c[1]});
  pid_t c = Spawn(argv[0], "consumer", {t2c[0], c2t[1]});
  for (int fd : {p2t[0], t2p[1], t2c[0], t2c[1], c2t[0], c2t[1]}) close(fd);
  Line down = Open(t2p[0], p2t[1]);

  long long t0 = gpu_test::wall_ns();
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* a = nullptr;
  CK(cudaMalloc(&a, kN * sizeof(unsigned)));
  cudaEvent_t a_ready = IpcEvent();
  cudaIpcMemHandle_t ah;
  cudaIpcEventHandle_t eh;
  CK(cudaIpcGetMemHandle(&ah, a));
  CK(cudaIpcGetEventHandle(&eh, a_ready));
  down.Write("A " + Hex(ah) + " " + Hex(eh));
  cudaEvent_t a_consumed;
  CK(cudaIpcOpenEventHandle(&a_consumed, Unhex<cudaIpcEventHandle_t>(down.Expect("ACKA"))));
  for (int r = 0; r < kRounds; r++) {
    if (r > 0) {
      if (std::stoi(down.Expect("a")) != r - 1) gpu_test::fail("producer: acks out of order");
      CK(cudaStreamWaitEvent(s, a_consumed, 0));
    }
    Produce<<<264, 256, 0, s>>>(a, r);
    CK_LAUNCH("Produce");
    CK(cudaEventRecord(a_ready, s));
    down.Write("R " + std::to_string(r));
  }
  (void)down.Expect("a");
  CK(cudaEventSynchronize(a_consumed));
  std::vector<unsigned> last(kN);
  CK(cudaMemcpy(last.data(), a, kN * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; i++)
    if (last[i] != F(kRounds - 1, i)) gpu_test::fail("producer: A[%d] of the last round is %u, expected %u", i, last[i], F(kRounds - 1, i));
  int status_t = 0, status_c = 0;
  waitpid(t, &status_t, 0);
  waitpid(c, &status_c, 0);
  CK(cudaFree(a));
  if (!WIFEXITED(status_t) || WEXITSTATUS(status_t) != 0) gpu_test::fail("the transformer process failed (status 0x%x)", status_t);
  if (!WIFEXITED(status_c) || WEXITSTATUS(status_c) != 0) gpu_test::fail("the consumer process failed (status 0x%x)", status_c);
  gpu_test::pass("3 processes, %d rounds of %d-element buffers passed by IPC handles and events, every element checked "
                 "(%.1f ms)", kRounds, kN, (gpu_test::wall_ns() - t0) / 1e6);
  return 0;
}

/* nccl_ranks: a C program whose ranks are processes, each a Remora session of its own, that uses
 * NCCL as a multi-process job does (tests/integration/nccl_test.cc runs it through the shim, on
 * host-backend servers; docs/ARCHITECTURE.md "NCCL").
 *
 *   app_nccl_ranks collectives N   N ranks: rank 0 makes the unique id and hands it to the others
 *                                  through pipes; every collective and a point-to-point ring in a
 *                                  group, results checked; a split; then, if NCCL_TEST_HOLD names
 *                                  a file, "rank R holding" and a wait until it exists (quotas)
 *   app_nccl_ranks foreign         rank 0 (the first server and token) makes an id; a process of
 *                                  the second token's tenant must be refused it, and one of the
 *                                  first tenant presenting it altered
 *   app_nccl_ranks all             one process, ncclCommInitAll over its first two devices, a group
 *                                  of all-reduces on both, results checked
 *   app_nccl_ranks kill N | stop N N ranks; after one all-reduce the last rank kills (SIGKILL) or
 *                                  stops (SIGSTOP) itself; every other rank's next all-reduce must
 *                                  fail (ncclCommGetAsyncError: ncclRemoteError) within
 *                                  NCCL_TEST_WITHIN seconds, and the stream it was on must drain
 *   app_nccl_ranks lostserver N    N ranks; after one all-reduce the last rank holds back (so the
 *                                  others' next all-reduce waits) and prints "rank R: holding back";
 *                                  the test then kills a server: every other rank's all-reduce must
 *                                  fail, ncclRemoteError (a rank lost) or ncclSystemError (its own
 *                                  server lost), within NCCL_TEST_WITHIN seconds
 *
 * Rank i's server and token: the i-th entries of NCCL_TEST_SERVERS and NCCL_TEST_TOKENS
 * (comma-separated), set as REMORA_SERVER and REMORA_TOKEN before its first CUDA call. Each rank
 * uses device (i % its device count). NCCL_TEST_NONBLOCKING=1: the communicators are
 * non-blocking (config.blocking = 0): init, split and finalize answer ncclInProgress and the
 * ranks poll ncclCommGetAsyncError until ncclSuccess. Prints "rank R: ..." lines; exit 0 when
 * every check held.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 16
#define C 64 /* elements per rank and call */

static int g_rank, g_n;
static int g_fail;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "rank %d: FAIL %s: ", g_rank, #cond); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      g_fail = 1;                                          \
    }                                                      \
  } while (0)
#define NCCL(call)                                                                                       \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess) {                                                                             \
      fprintf(stderr, "rank %d: FAIL %s: %s (%s)\n", g_rank, #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      exit(2);                                                                                           \
    }                                                                                                    \
  } while (0)
#define CUDA(call)                                                                             \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "rank %d: FAIL %s: %s\n", g_rank, #call, cudaGetErrorString(e_));        \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)

static int g_nonblocking;

/* A non-blocking communicator: polls until its last call is done. */
static void Ready(ncclComm_t comm, const char* what) {
  ncclResult_t state = ncclInProgress;
  double start;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  start = (double)t.tv_sec;
  while (state == ncclInProgress) {
    NCCL(ncclCommGetAsyncError(comm, &state));
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((double)t.tv_sec - start > 60) break;
    if (state == ncclInProgress) usleep(1000);
  }
  if (state != ncclSuccess) {
    fprintf(stderr, "rank %d: FAIL %s: %s\n", g_rank, what, ncclGetErrorString(state));
    exit(2);
  }
}
/* Calls that answer ncclInProgress on a non-blocking communicator, then complete. */
#define NCCL_NB(comm, call)                                                                                   \
  do {                                                                                                        \
    ncclResult_t r_ = (call);                                                                                 \
    if (r_ != ncclSuccess && !(g_nonblocking && r_ == ncclInProgress)) {                                      \
      fprintf(stderr, "rank %d: FAIL %s: %s (%s)\n", g_rank, #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      exit(2);                                                                                                \
    }                                                                                                         \
    if (g_nonblocking) Ready(comm, #call);                                                                    \
  } while (0)

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The i-th comma-separated entry of environment variable `name` (the caller frees it), or NULL. */
static char* Nth(const char* name, int i) {
  const char* v = getenv(name);
  if (v == NULL) return NULL;
  for (; i > 0; i--) {
    v = strchr(v, ',');
    if (v == NULL) return NULL;
    v++;
  }
  size_t n = strcspn(v, ",");
  char* out = malloc(n + 1);
  memcpy(out, v, n);
  out[n] = '\0';
  return out;
}

static void BecomeRank(int rank, int as) {
  char* server = Nth("NCCL_TEST_SERVERS", as);
  char* token = Nth("NCCL_TEST_TOKENS", as);
  if (server != NULL) setenv("REMORA_SERVER", server, 1);  /* setenv copies */
  if (token != NULL) setenv("REMORA_TOKEN", token, 1);
  free(server);
  free(token);
  g_rank = rank;
  int count = 0;
  CUDA(cudaGetDeviceCount(&count));
  CUDA(cudaSetDevice(rank % count));
}

static void WriteAll(int fd, const void* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) exit(3);
    p = (const char*)p + w;
    n -= (size_t)w;
  }
}
static int ReadAll(int fd, void* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return 0;
    p = (char*)p + r;
    n -= (size_t)r;
  }
  return 1;
}

/* Device buffers of one rank: 1 MiB in all, so the test knows what the session holds. */
typedef struct {
  float *a, *b, *big;
  int *ia, *ib;
} Bufs;
static void* g_block;
static Bufs MakeBufs(void) {
  Bufs b;
  CUDA(cudaMalloc(&g_block, 1 << 20));
  char* p = (char*)g_block;
  b.a = (float*)p;
  b.b = (float*)(p + 64 * 1024);
  b.big = (float*)(p + 128 * 1024);
  b.ia = (int*)(p + 512 * 1024);
  b.ib = (int*)(p + 576 * 1024);
  return b;
}

static void Put(void* dst, const void* src, size_t n, cudaStream_t s) {
  CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s));
}
static void Get(void* dst, const void* src, size_t n, cudaStream_t s) {
  CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
}

static void Collectives(ncclComm_t comm, Bufs b, cudaStream_t s) {
  int n = g_n, r = g_rank, i, k, count = 0, me = -1;
  float hf[MAXR * C], gf[MAXR * C];
  int hi[MAXR * C], gi[MAXR * C];
  NCCL(ncclCommCount(comm, &count));
  NCCL(ncclCommUserRank(comm, &me));
  CHECK(count == n && me == r, "count %d rank %d", count, me);

  /* all-reduce: sum (float), in place too, max (int) */
  for (i = 0; i < C; i++) hf[i] = (float)(r + 1 + i % 7);
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclAllReduce(b.a, b.b, C, ncclFloat, ncclSum, comm, s));
  NCCL(ncclAllReduce(b.a, b.a, C, ncclFloat, ncclSum, comm, s));
  Get(gf, b.b, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)(n * (n + 1) / 2 + n * (i % 7)), "allreduce[%d] = %g", i, gf[i]);
  Get(gf, b.a, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)(n * (n + 1) / 2 + n * (i % 7)), "in-place allreduce[%d] = %g", i, gf[i]);
  for (i = 0; i < C; i++) hi[i] = r * 1000 - i;
  Put(b.ia, hi, C * sizeof(int), s);
  NCCL(ncclAllReduce(b.ia, b.ib, C, ncclInt32, ncclMax, comm, s));
  Get(gi, b.ib, C * sizeof(int), s);
  for (i = 0; i < C; i++) CHECK(gi[i] == (n - 1) * 1000 - i, "max[%d] = %d", i, gi[i]);
  printf("rank %d: all-reduce ok\n", r);

  /* a pre-multiplied sum (as PyTorch averages) and an average */
  float two = 2.0f;
  ncclRedOp_t premul;
  NCCL(ncclRedOpCreatePreMulSum(&premul, &two, ncclFloat, ncclScalarHostImmediate, comm));
  for (i = 0; i < C; i++) hf[i] = (float)(r + i);
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclAllReduce(b.a, b.b, C, ncclFloat, premul, comm, s));
  Get(gf, b.b, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == 2.0f * (float)(n * (n - 1) / 2 + n * i), "premulsum[%d] = %g", i, gf[i]);
  NCCL(ncclRedOpDestroy(premul, comm));
  NCCL(ncclAllReduce(b.a, b.b, C, ncclFloat, ncclAvg, comm, s));
  Get(gf, b.b, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)(n * (n - 1) / 2 + n * i) / (float)n, "avg[%d] = %g", i, gf[i]);
  printf("rank %d: reduction operators ok\n", r);

  /* broadcast from rank 1, reduce to the last rank */
  for (i = 0; i < C; i++) hf[i] = r == 1 ? (float)(1000 + i) : -1.0f;
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclBroadcast(b.a, b.b, C, ncclFloat, 1, comm, s));
  Get(gf, b.b, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)(1000 + i), "broadcast[%d] = %g", i, gf[i]);
  for (i = 0; i < C; i++) hf[i] = (float)(r * 3 + i);
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclReduce(b.a, b.b, C, ncclFloat, ncclSum, n - 1, comm, s));
  if (r == n - 1) {
    Get(gf, b.b, C * sizeof(float), s);
    for (i = 0; i < C; i++) CHECK(gf[i] == (float)(3 * n * (n - 1) / 2 + n * i), "reduce[%d] = %g", i, gf[i]);
  }
  printf("rank %d: broadcast and reduce ok\n", r);

  /* all-gather, reduce-scatter, all-to-all */
  for (i = 0; i < C; i++) hf[i] = (float)(r * 100 + i);
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclAllGather(b.a, b.big, C, ncclFloat, comm, s));
  Get(gf, b.big, (size_t)n * C * sizeof(float), s);
  for (k = 0; k < n; k++)
    for (i = 0; i < C; i++) CHECK(gf[k * C + i] == (float)(k * 100 + i), "allgather[%d][%d] = %g", k, i, gf[k * C + i]);
  for (k = 0; k < n; k++)
    for (i = 0; i < C; i++) hf[k * C + i] = (float)(r + k * 10 + i);
  Put(b.big, hf, (size_t)n * C * sizeof(float), s);
  NCCL(ncclReduceScatter(b.big, b.b, C, ncclFloat, ncclSum, comm, s));
  Get(gf, b.b, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)(n * (n - 1) / 2 + n * (r * 10 + i)), "reducescatter[%d] = %g", i, gf[i]);
  for (k = 0; k < n; k++)
    for (i = 0; i < C; i++) hi[k * C + i] = r * 1000 + k * 10 + i;
  Put(b.ia, hi, (size_t)n * C * sizeof(int), s);
  NCCL(ncclAlltoAll(b.ia, b.ib, C, ncclInt32, comm, s));
  Get(gi, b.ib, (size_t)n * C * sizeof(int), s);
  for (k = 0; k < n; k++)
    for (i = 0; i < C; i++) CHECK(gi[k * C + i] == k * 1000 + r * 10 + i, "alltoall[%d][%d] = %d", k, i, gi[k * C + i]);
  printf("rank %d: all-gather, reduce-scatter and all-to-all ok\n", r);

  /* gather to rank 0, scatter from the last rank */
  for (i = 0; i < C; i++) hf[i] = (float)(r * 100 + i);
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclGather(b.a, b.big, C, ncclFloat, 0, comm, s));
  if (r == 0) {
    Get(gf, b.big, (size_t)n * C * sizeof(float), s);
    for (k = 0; k < n; k++)
      for (i = 0; i < C; i++) CHECK(gf[k * C + i] == (float)(k * 100 + i), "gather[%d][%d] = %g", k, i, gf[k * C + i]);
  }
  for (k = 0; k < n; k++)
    for (i = 0; i < C; i++) hf[k * C + i] = r == n - 1 ? (float)(k * 10 + i) : -1.0f;
  Put(b.big, hf, (size_t)n * C * sizeof(float), s);
  NCCL(ncclScatter(b.big, b.b, C, ncclFloat, n - 1, comm, s));
  Get(gf, b.b, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)(r * 10 + i), "scatter[%d] = %g", i, gf[i]);
  printf("rank %d: gather and scatter ok\n", r);

  /* point-to-point in a group: a ring both ways, and a copy to itself */
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (i = 0; i < C; i++) hf[i] = (float)(r * 7 + i);
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclGroupStart());
  NCCL(ncclRecv(b.b, C, ncclFloat, prev, comm, s));
  NCCL(ncclSend(b.a, C, ncclFloat, next, comm, s));
  NCCL(ncclSend(b.a, C, ncclFloat, prev, comm, s));
  NCCL(ncclRecv(b.big, C, ncclFloat, next, comm, s));
  NCCL(ncclSend(b.a, C, ncclFloat, r, comm, s));
  NCCL(ncclRecv(b.big + C, C, ncclFloat, r, comm, s));
  NCCL(ncclGroupEnd());
  Get(gf, b.b, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)(prev * 7 + i), "recv from prev[%d] = %g", i, gf[i]);
  Get(gf, b.big, 2 * C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)(next * 7 + i), "recv from next[%d] = %g", i, gf[i]);
  for (i = 0; i < C; i++) CHECK(gf[C + i] == (float)(r * 7 + i), "recv from self[%d] = %g", i, gf[C + i]);
  printf("rank %d: send/recv group ok\n", r);

  /* a group of collectives: one message, run together */
  for (i = 0; i < C; i++) hf[i] = 1.0f;
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclGroupStart());
  NCCL(ncclAllReduce(b.a, b.b, C, ncclFloat, ncclSum, comm, s));
  NCCL(ncclAllGather(b.a, b.big, C, ncclFloat, comm, s));
  NCCL(ncclGroupEnd());
  Get(gf, b.b, C * sizeof(float), s);
  for (i = 0; i < C; i++) CHECK(gf[i] == (float)n, "grouped allreduce[%d] = %g", i, gf[i]);

  /* a bad call is refused where NCCL refuses it */
  CHECK(ncclBroadcast(b.a, b.b, C, ncclFloat, n, comm, s) == ncclInvalidArgument, "a root beyond the ranks");
  CHECK(ncclAllReduce(b.a, b.b, C, (ncclDataType_t)99, ncclSum, comm, s) == ncclInvalidArgument, "a bad datatype");

  /* a split: the even and the odd ranks */
  ncclComm_t half;
  NCCL_NB(half, ncclCommSplit(comm, r % 2, r, &half, NULL));
  int hn = 0, hr = -1;
  NCCL(ncclCommCount(half, &hn));
  NCCL(ncclCommUserRank(half, &hr));
  CHECK(hn == (n + 1 - r % 2) / 2 && hr == r / 2, "split: %d ranks, rank %d", hn, hr);
  for (i = 0; i < C; i++) hf[i] = (float)r;
  Put(b.a, hf, C * sizeof(float), s);
  NCCL(ncclAllReduce(b.a, b.b, C, ncclFloat, ncclSum, half, s));
  Get(gf, b.b, C * sizeof(float), s);
  float want = 0;
  for (k = r % 2; k < n; k += 2) want += (float)k;
  for (i = 0; i < C; i++) CHECK(gf[i] == want, "split allreduce[%d] = %g (want %g)", i, gf[i], want);
  NCCL(ncclCommDestroy(half));
  printf("rank %d: split ok\n", r);
}

static int RunRank(int rank, int n, int mode, int id_fd, int* out_fds) {
  BecomeRank(rank, rank);
  g_n = n;
  ncclUniqueId id;
  if (rank == 0) {
    NCCL(ncclGetUniqueId(&id));
    for (int j = 1; j < n; j++) WriteAll(out_fds[j], &id, sizeof(id));
  } else if (!ReadAll(id_fd, &id, sizeof(id))) {
    fprintf(stderr, "rank %d: FAIL no unique id\n", rank);
    return 2;
  }
  Bufs b = MakeBufs();
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclComm_t comm;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = g_nonblocking ? 0 : 1;
  NCCL_NB(comm, ncclCommInitRankConfig(&comm, n, id, rank, &config));
  printf("rank %d: init ok%s\n", rank, g_nonblocking ? " (non-blocking)" : "");
  fflush(stdout);
  if (mode == 0) {
    Collectives(comm, b, s);
    const char* hold = getenv("NCCL_TEST_HOLD");
    if (hold != NULL && *hold) {
      printf("rank %d holding\n", rank);
      fflush(stdout);
      struct stat st;
      while (stat(hold, &st) != 0) usleep(20000);
    }
    NCCL_NB(comm, ncclCommFinalize(comm));
    NCCL(ncclCommDestroy(comm));
    CUDA(cudaFree(g_block));
    CUDA(cudaStreamDestroy(s));
    printf("rank %d: %s\n", rank, g_fail ? "FAILED" : "done");
    return g_fail;
  }
  /* kill or stop: one all-reduce everyone completes, then the last rank goes */
  float one[C];
  for (int i = 0; i < C; i++) one[i] = 1.0f;
  Put(b.a, one, sizeof(one), s);
  NCCL(ncclAllReduce(b.a, b.b, C, ncclFloat, ncclSum, comm, s));
  CUDA(cudaStreamSynchronize(s));
  printf("rank %d: first all-reduce ok\n", rank);
  fflush(stdout);
  if (rank == n - 1 && mode == 3) {
    printf("rank %d: holding back\n", rank);
    fflush(stdout);
    for (;;) pause();
  }
  if (rank == n - 1) {
    usleep(200000);  /* the others are in their next all-reduce by now */
    printf("rank %d: %s itself\n", rank, mode == 1 ? "kills" : "stops");
    fflush(stdout);
    kill(getpid(), mode == 1 ? SIGKILL : SIGSTOP);
    return 0;
  }
  const char* w = getenv("NCCL_TEST_WITHIN");
  double within = w ? atof(w) : 15.0;
  double start = Now();
  NCCL(ncclAllReduce(b.a, b.b, C, ncclFloat, ncclSum, comm, s));
  printf("rank %d: waiting\n", rank);
  fflush(stdout);
  ncclResult_t state = ncclSuccess;
  for (;;) {
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) state = r;
    if (state != ncclSuccess && state != ncclInProgress) break;
    if (Now() - start > within + 30) break;
    usleep(10000);
  }
  double took = Now() - start;
  printf("rank %d: lost rank seen after %.2f s: %s (%s)\n", rank, took, ncclGetErrorString(state), ncclGetLastError(comm));
  CHECK(state == ncclRemoteError || (mode == 3 && state == ncclSystemError), "the all-reduce answered %d", (int)state);
  CHECK(took <= within, "%.2f s, beyond %.1f s", took, within);
  if (state == ncclSystemError) {
    /* Its own server is gone: nothing more to ask it. */
    printf("rank %d: %s\n", rank, g_fail ? "FAILED" : "done");
    return g_fail;
  }
  /* Nothing hangs: the stream drains, the communicator is aborted, later calls fail. */
  double drain = Now();
  CUDA(cudaStreamSynchronize(s));
  CHECK(Now() - drain < 10, "the stream took %.2f s to drain", Now() - drain);
  CHECK(ncclAllReduce(b.a, b.b, C, ncclFloat, ncclSum, comm, s) != ncclSuccess ||
            (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclRemoteError),
        "a later call on the communicator succeeded");
  NCCL(ncclCommAbort(comm));
  printf("rank %d: %s\n", rank, g_fail ? "FAILED" : "done");
  return g_fail;
}

static int All(void) {
  BecomeRank(0, 0);
  g_n = 2;
  int count = 0;
  CUDA(cudaGetDeviceCount(&count));
  if (count < 2) {
    fprintf(stderr, "all: FAIL needs two devices, has %d\n", count);
    return 2;
  }
  ncclComm_t comms[2];
  NCCL(ncclCommInitAll(comms, 2, NULL));
  float *buf[2], h[C], g[C];
  cudaStream_t s[2];
  for (int d = 0; d < 2; d++) {
    int dev = -1, rank = -1, n = 0;
    NCCL(ncclCommCuDevice(comms[d], &dev));
    NCCL(ncclCommUserRank(comms[d], &rank));
    NCCL(ncclCommCount(comms[d], &n));
    CHECK(dev == d && rank == d && n == 2, "comm %d: device %d rank %d of %d", d, dev, rank, n);
    CUDA(cudaSetDevice(d));
    CUDA(cudaMalloc((void**)&buf[d], C * sizeof(float)));
    CUDA(cudaStreamCreate(&s[d]));
    for (int i = 0; i < C; i++) h[i] = (float)(d * 10 + i);
    CUDA(cudaMemcpy(buf[d], h, sizeof(h), cudaMemcpyHostToDevice));
  }
  /* One thread drives both ranks: their calls must be in one group. */
  NCCL(ncclGroupStart());
  for (int d = 0; d < 2; d++) NCCL(ncclAllReduce(buf[d], buf[d], C, ncclFloat, ncclSum, comms[d], s[d]));
  NCCL(ncclGroupEnd());
  for (int d = 0; d < 2; d++) {
    CUDA(cudaSetDevice(d));
    CUDA(cudaStreamSynchronize(s[d]));
    CUDA(cudaMemcpy(g, buf[d], sizeof(g), cudaMemcpyDeviceToHost));
    for (int i = 0; i < C; i++) CHECK(g[i] == (float)(10 + 2 * i), "device %d [%d] = %g", d, i, g[i]);
  }
  for (int d = 0; d < 2; d++) NCCL(ncclCommDestroy(comms[d]));
  printf("all: %s\n", g_fail ? "FAILED" : "ncclCommInitAll and a grouped all-reduce ok");
  return g_fail;
}

static int Foreign(void) {
  int p[2], back[2];
  if (pipe(p) != 0 || pipe(back) != 0) return 2;
  pid_t maker = fork();
  if (maker == 0) {
    BecomeRank(0, 0);
    ncclUniqueId id;
    NCCL(ncclGetUniqueId(&id));
    WriteAll(p[1], &id, sizeof(id));
    WriteAll(p[1], &id, sizeof(id));
    char done;
    (void)ReadAll(back[0], &done, 1); /* the id lives while its session does */
    _exit(0);
  }
  ncclUniqueId id;
  if (!ReadAll(p[0], &id, sizeof(id))) return 2;
  int status = 0;
  pid_t other = fork();
  if (other == 0) {
    /* another tenant (the second token) is given the id */
    BecomeRank(1, 1);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, 2, id, 1);
    printf("rank 1 (another tenant): %s: %s\n", ncclGetErrorString(r), ncclGetLastError(NULL));
    _exit(r == ncclInvalidArgument ? 0 : 1);
  }
  waitpid(other, &status, 0);
  int refused = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  other = fork();
  if (other == 0) {
    /* the same tenant with the capability altered (a nonce byte flipped) */
    BecomeRank(1, 0);
    ncclUniqueId forged = id;
    forged.internal[30] ^= 1;
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, 2, forged, 1);
    printf("rank 1 (forged id): %s: %s\n", ncclGetErrorString(r), ncclGetLastError(NULL));
    _exit(r == ncclInvalidArgument ? 0 : 1);
  }
  waitpid(other, &status, 0);
  int forged = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  WriteAll(back[1], "x", 1);
  waitpid(maker, &status, 0);
  printf("foreign: %s, forged: %s\n", refused ? "refused" : "NOT refused", forged ? "refused" : "NOT refused");
  return refused && forged ? 0 : 1;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: %s collectives N | all | foreign | kill N | stop N | lostserver N\n", argv[0]);
    return 2;
  }
  const char* nb = getenv("NCCL_TEST_NONBLOCKING");
  g_nonblocking = nb != NULL && strcmp(nb, "1") == 0;
  if (strcmp(argv[1], "foreign") == 0) return Foreign();
  if (strcmp(argv[1], "all") == 0) return All();
  int mode = strcmp(argv[1], "collectives") == 0 ? 0
             : strcmp(argv[1], "kill") == 0      ? 1
             : strcmp(argv[1], "stop") == 0      ? 2
             : strcmp(argv[1], "lostserver") == 0 ? 3
                                                  : -1;
  int n = argc > 2 ? atoi(argv[2]) : 0;
  if (mode < 0 || n < 2 || n > MAXR) {
    fprintf(stderr, "usage: %s collectives N | all | foreign | kill N | stop N | lostserver N (2 <= N <= %d)\n", argv[0], MAXR);
    return 2;
  }
  int fds[MAXR][2];
  int out[MAXR];
  for (int j = 0; j < n; j++) {
    if (pipe(fds[j]) != 0) return 2;
    out[j] = fds[j][1];
  }
  pid_t pids[MAXR];
  for (int j = 0; j < n; j++) {
    pids[j] = fork();
    if (pids[j] == 0) _exit(RunRank(j, n, mode, fds[j][0], out));
  }
  int ok = 1;
  for (int j = 0; j < n; j++) {
    int status = 0;
    if (mode != 0 && j == n - 1) {
      /* the rank that went: stopped ones are ended once the others are done */
      continue;
    }
    waitpid(pids[j], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d exited with status 0x%x\n", j, status);
      ok = 0;
    }
  }
  if (mode != 0) {
    kill(pids[n - 1], SIGKILL);
    waitpid(pids[n - 1], NULL, 0);
  }
  printf("%s\n", ok ? "all ranks passed" : "some rank FAILED");
  return ok ? 0 : 1;
}

// nccl_device: NCCL 2.28's device API on one GPU (issue 44; tests/gpu/nccl-device.sh runs it
// natively and through Remora). A one-rank communicator, a symmetric window on ncclMemAlloc'd
// memory, an LSA barrier requirement of the application's own chained into ncclDevCommCreate,
// then a kernel that syncs on that barrier, writes through ncclGetLsaPointer, syncs again and
// reads back through ncclGetLocalPointer; the result is checked on the host. Also the teams and
// ncclLLA2ACalcSlots as the host functions answer them. Prints "PASS nccl_device: ..." or
// "FAIL nccl_device: ..." and exits 0 only on PASS.
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdio>
#include <cstring>
#include <vector>

#define FAIL(...)                             \
  do {                                        \
    std::printf("FAIL nccl_device: ");        \
    std::printf(__VA_ARGS__);                 \
    std::printf("\n");                        \
    return 1;                                 \
  } while (0)
#define NCCLOK(call)                                                                                        \
  do {                                                                                                      \
    ncclResult_t r_ = (call);                                                                               \
    if (r_ != ncclSuccess) FAIL("%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(nullptr));  \
  } while (0)
#define CUDAOK(call)                                                   \
  do {                                                                 \
    cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess) FAIL("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

constexpr int kCount = 4096;
constexpr int kThreads = 256;

// One CTA: barrier, write through the LSA pointer of this rank, barrier, read back locally.
__global__ void LsaRoundTrip(ncclWindow_t win, ncclDevComm devComm, ncclLsaBarrierHandle barrier, int* out) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), devComm, ncclTeamLsa(devComm), barrier, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);
  int* lsa = static_cast<int*>(ncclGetLsaPointer(win, 0, devComm.lsaRank));
  for (int i = threadIdx.x; i < kCount; i += blockDim.x) lsa[i] = 3 * i + 1 + devComm.rank;
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
  const int* local = static_cast<const int*>(ncclGetLocalPointer(win, 0));
  for (int i = threadIdx.x; i < kCount; i += blockDim.x) out[i] = local[i];
}

int main() {
  ncclComm_t comm = nullptr;
  int dev = 0;
  CUDAOK(cudaSetDevice(0));
  NCCLOK(ncclCommInitAll(&comm, 1, &dev));

  ncclTeam_t world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
  if (world.nRanks != 1 || world.rank != 0 || world.stride != 1) FAIL("world team {%d %d %d}", world.nRanks, world.rank, world.stride);
  if (lsa.nRanks != 1 || lsa.rank != 0) FAIL("lsa team {%d %d %d}", lsa.nRanks, lsa.rank, lsa.stride);
  if (rail.nRanks != 1 || rail.rank != 0) FAIL("rail team {%d %d %d}", rail.nRanks, rail.rank, rail.stride);
  if (ncclTeamRankToWorld(comm, world, 0) != 0 || ncclTeamRankToLsa(comm, lsa, 0) != 0) FAIL("team rank translation");
  int slots = ncclLLA2ACalcSlots(64, 16);
  if (slots <= 0) FAIL("ncclLLA2ACalcSlots(64, 16) = %d", slots);

  void* buf = nullptr;
  const size_t bytes = kCount * sizeof(int);
  NCCLOK(ncclMemAlloc(&buf, bytes));
  ncclWindow_t win = nullptr;
  NCCLOK(ncclCommWindowRegister(comm, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
  if (win == nullptr) FAIL("ncclCommWindowRegister gave no window (no symmetric memory support?)");

  // The application's own barrier, chained into the device communicator's requirements.
  ncclLsaBarrierHandle_t barrier;
  ncclDevResourceRequirements_t req;
  NCCLOK(ncclLsaBarrierCreateRequirement(lsa, 1, &barrier, &req));
  if (req.outBufferHandle != &barrier.bufHandle) FAIL("the requirement's out-pointer is not into the caller's handle");
  ncclLLA2AHandle_t a2a;
  ncclDevResourceRequirements_t a2aReq;
  NCCLOK(ncclLLA2ACreateRequirement(1, slots, &a2a, &a2aReq));
  if (a2aReq.outBufferHandle != &a2a.bufHandle) FAIL("the LL all-to-all out-pointer is not into the caller's handle");
  req.next = &a2aReq;
  ncclDevCommRequirements_t reqs;
  std::memset(&reqs, 0, sizeof(reqs));
  reqs.resourceRequirementsList = &req;
  reqs.lsaBarrierCount = 1;
  ncclDevComm devComm;
  barrier.bufHandle = a2a.bufHandle = 0xffffffffu;
  NCCLOK(ncclDevCommCreate(comm, &reqs, &devComm));
  if (barrier.bufHandle == 0xffffffffu || a2a.bufHandle == 0xffffffffu || barrier.bufHandle == a2a.bufHandle)
    FAIL("ncclDevCommCreate did not assign the resources (%u, %u)", barrier.bufHandle, a2a.bufHandle);
  if (devComm.rank != 0 || devComm.nRanks != 1) FAIL("devComm rank %d of %d", devComm.rank, devComm.nRanks);

  int* out = nullptr;
  CUDAOK(cudaMalloc(&out, bytes));
  CUDAOK(cudaMemset(out, 0, bytes));
  LsaRoundTrip<<<1, kThreads>>>(win, devComm, barrier, out);
  CUDAOK(cudaGetLastError());
  CUDAOK(cudaDeviceSynchronize());
  std::vector<int> got(kCount);
  CUDAOK(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < kCount; i++)
    if (got[i] != 3 * i + 1) FAIL("element %d is %d, expected %d", i, got[i], 3 * i + 1);

  NCCLOK(ncclDevCommDestroy(comm, &devComm));
  NCCLOK(ncclCommWindowDeregister(comm, win));
  NCCLOK(ncclMemFree(buf));
  CUDAOK(cudaFree(out));
  NCCLOK(ncclCommDestroy(comm));
  std::printf("PASS nccl_device: teams, requirements (barrier handle %u, LL handle %u, %d slots), a symmetric window, "
              "an LSA barrier kernel writing and reading %d ints\n", barrier.bufHandle, a2a.bufHandle, slots, kCount);
  return 0;
}

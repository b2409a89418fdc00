// nccl_device: NCCL 2.28's device API host functions through Remora (tests/integration/
// nccl_test.cc runs it on a host-backend server, whose emulation answers emulated values:
// docs/ARCHITECTURE.md "NCCL"). One process, ncclCommInitAll over two devices (two ranks); for
// each rank: the teams, the requirement creators (their out-pointers must point into the
// caller's own out-handle), a symmetric window, a device communicator made from a chain of
// requirements (what the server wrote through each out-pointer lands in the caller's structs),
// then the refusals: a forged or foreign window and device communicator, a cyclic and an
// over-long requirement list. Prints "rank R: ..." lines and "device api ok"; exit 0 when every
// check held.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <nccl_device/impl/comm__types.h>

#include <cstdio>
#include <cstring>
#include <vector>

// NVIDIA's library exports the profiling twins of the device API too; its headers do not declare them.
extern "C" int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);

namespace {

int g_fail = 0;

#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) {                                          \
      std::fprintf(stderr, "FAIL %s: ", #cond);             \
      std::fprintf(stderr, __VA_ARGS__);                    \
      std::fprintf(stderr, "\n");                           \
      g_fail = 1;                                           \
    }                                                       \
  } while (0)
#define NCCL(call)                                                                                     \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    if (r_ != ncclSuccess) {                                                                           \
      std::fprintf(stderr, "FAIL %s: %s (%s)\n", #call, ncclGetErrorString(r_), ncclGetLastError(nullptr)); \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)

bool SameTeam(ncclTeam_t a, int n, int r, int s) { return a.nRanks == n && a.rank == r && a.stride == s; }

int Rank(ncclComm_t comm, ncclComm_t other, int r) {
  const int n = 2;
  // ---- teams (the emulation: each rank its own LSA team, the rail team is the world) ----
  ncclTeam_t world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
  CHECK(SameTeam(world, n, r, 1), "world {%d %d %d}", world.nRanks, world.rank, world.stride);
  CHECK(SameTeam(lsa, 1, 0, 1), "lsa {%d %d %d}", lsa.nRanks, lsa.rank, lsa.stride);
  CHECK(SameTeam(rail, n, r, 1), "rail {%d %d %d}", rail.nRanks, rail.rank, rail.stride);
  CHECK(ncclTeamRankToWorld(comm, world, 1 - r) == 1 - r, "rank to world");
  CHECK(ncclTeamRankToLsa(comm, lsa, 0) == 0, "rank to lsa");
  CHECK(pncclTeamRankToWorld(comm, rail, 0) == 0, "pnccl rank to world");
  std::printf("rank %d: teams ok\n", r);

  // ---- requirements: out-pointers into the caller's out-handles ----
  ncclLsaBarrierHandle_t lsaH;
  ncclGinBarrierHandle_t ginH;
  ncclLLA2AHandle_t a2aH;
  ncclDevResourceRequirements_t lsaR, ginR, a2aR, mine;
  std::memset(&lsaR, 0xab, sizeof(lsaR));
  NCCL(ncclLsaBarrierCreateRequirement(world, 3, &lsaH, &lsaR));
  CHECK(lsaR.outBufferHandle == &lsaH.bufHandle && lsaR.outGinSignalStart == nullptr && lsaR.next == nullptr,
        "lsa barrier out-pointers");
  CHECK(lsaH.nBarriers == 3 && lsaR.bufferSize > 0, "lsa barrier: %d barriers, %zu bytes", lsaH.nBarriers, lsaR.bufferSize);
  NCCL(ncclGinBarrierCreateRequirement(comm, rail, 2, &ginH, &ginR));
  CHECK(ginR.outBufferHandle == &ginH.bufHandle && ginR.outGinSignalStart == &ginH.signal0 && ginR.ginSignalCount == 2,
        "gin barrier out-pointers");
  int slots = ncclLLA2ACalcSlots(10, 20);
  CHECK(slots == 20, "ncclLLA2ACalcSlots(10, 20) = %d (the emulation's: 10 elements of two 16-byte slots)", slots);
  NCCL(ncclLLA2ACreateRequirement(4, slots, &a2aH, &a2aR));
  CHECK(a2aR.outBufferHandle == &a2aH.bufHandle && a2aH.nSlots == static_cast<uint32_t>(slots), "lla2a out-pointers");
  std::printf("rank %d: requirements ok\n", r);

  // ---- a symmetric window: NCCL's value, kept per communicator by the server ----
  void* buf = nullptr;
  NCCL(ncclMemAlloc(&buf, 1 << 16));
  ncclWindow_t win = nullptr;
  NCCL(ncclCommWindowRegister(comm, buf, 1 << 16, &win, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(win != nullptr, "no window");
  auto* forged = reinterpret_cast<ncclWindow_t>(reinterpret_cast<char*>(win) + 16);
  CHECK(ncclCommWindowDeregister(comm, forged) == ncclInvalidArgument, "a forged window deregistered");
  CHECK(ncclCommWindowDeregister(other, win) == ncclInvalidArgument, "another communicator's window deregistered");

  // ---- a device communicator from a chain of requirements ----
  uint32_t counter = 0xdeadbeef;
  std::memset(&mine, 0, sizeof(mine));
  mine.bufferSize = 1000;
  mine.bufferAlign = 256;
  mine.ginCounterCount = 4;
  mine.outGinCounterStart = &counter;
  lsaR.next = &ginR;
  ginR.next = &a2aR;
  a2aR.next = &mine;
  lsaH.bufHandle = ginH.bufHandle = a2aH.bufHandle = 0xdeadbeef;
  ginH.signal0 = 0xdeadbeef;
  ncclDevCommRequirements_t reqs;
  std::memset(&reqs, 0, sizeof(reqs));
  reqs.resourceRequirementsList = &lsaR;
  reqs.ginSignalCount = 5;
  reqs.ginCounterCount = 7;
  ncclDevComm_t dc;
  std::memset(static_cast<void*>(&dc), 0, sizeof(dc));
  NCCL(ncclDevCommCreate(comm, &reqs, &dc));
  CHECK(dc.rank == r && dc.nRanks == n && dc.resourceWindow != nullptr, "devComm: rank %d of %d", dc.rank, dc.nRanks);
  CHECK(lsaH.bufHandle == 0 && ginH.bufHandle > lsaH.bufHandle && a2aH.bufHandle > ginH.bufHandle,
        "buffer handles %u %u %u", lsaH.bufHandle, ginH.bufHandle, a2aH.bufHandle);
  CHECK(ginH.signal0 == 5 && counter == 7, "signal start %u, counter start %u", ginH.signal0, counter);
  std::printf("rank %d: device communicator ok\n", r);

  // ---- refusals ----
  ncclDevComm_t fake = dc;
  fake.resourceWindow = reinterpret_cast<ncclWindow_t>(reinterpret_cast<char*>(dc.resourceWindow) + 64);
  CHECK(ncclDevCommDestroy(comm, &fake) == ncclInvalidArgument, "a forged device communicator destroyed");
  CHECK(std::strstr(ncclGetLastError(comm), "not a device communicator") != nullptr, "reason: %s", ncclGetLastError(comm));
  CHECK(ncclDevCommDestroy(other, &dc) == ncclInvalidArgument, "another communicator's device communicator destroyed");
  ncclDevResourceRequirements_t a{}, b{};
  a.next = &b;
  b.next = &a;
  reqs.resourceRequirementsList = &a;
  CHECK(ncclDevCommCreate(comm, &reqs, &fake) == ncclInvalidArgument, "a cyclic list accepted");
  CHECK(std::strstr(ncclGetLastError(comm), "cycle") != nullptr, "reason: %s", ncclGetLastError(comm));
  std::vector<ncclDevResourceRequirements_t> chain(4097);
  for (size_t i = 0; i + 1 < chain.size(); i++) chain[i].next = &chain[i + 1];
  reqs.resourceRequirementsList = chain.data();
  CHECK(ncclDevCommCreate(comm, &reqs, &fake) == ncclInvalidArgument, "an over-long list accepted");
  CHECK(std::strstr(ncclGetLastError(comm), "longer than") != nullptr, "reason: %s", ncclGetLastError(comm));
  std::printf("rank %d: refusals ok\n", r);

  NCCL(ncclDevCommDestroy(comm, &dc));
  CHECK(ncclDevCommDestroy(comm, &dc) == ncclInvalidArgument, "a device communicator destroyed twice");
  NCCL(ncclCommWindowDeregister(comm, win));
  CHECK(ncclCommWindowDeregister(comm, win) == ncclInvalidArgument, "a window deregistered twice");
  NCCL(ncclMemFree(buf));
  return 0;
}

}  // namespace

int main() {
  ncclComm_t comms[2] = {nullptr, nullptr};
  int devs[2] = {0, 1};
  NCCL(ncclCommInitAll(comms, 2, devs));
  for (int r = 0; r < 2; r++)
    if (Rank(comms[r], comms[1 - r], r) != 0) g_fail = 1;
  for (ncclComm_t c : comms) NCCL(ncclCommDestroy(c));
  if (g_fail) return 1;
  std::printf("device api ok\n");
  return 0;
}

// The host backend's NCCL emulation (server/worker/libs/host/nccl_emu_*.h): its reductions and narrow
// float conversions, and a mesh of three ranks (threads here, workers in the integration test)
// exchanging messages in any order, refusing a rank without the id's secret, and failing the
// waits of an aborted mesh.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "worker/libs/host/nccl_emu_net.h"
#include "worker/libs/host/nccl_emu_reduce.h"

namespace remora::worker::emu_nccl {
namespace {

TEST(NcclEmuReduce, FoldsContributionsInRankOrderForEveryOperator) {
  float a[3] = {1, 2, 3}, b[3] = {4, -5, 6}, c[3] = {7, 8, -9}, out[3];
  std::vector<const void*> in = {a, b, c};
  Reduction sum;
  Reduce(out, in, 3, ncclFloat32, sum, 3);
  EXPECT_EQ(out[0], 12);
  EXPECT_EQ(out[1], 5);
  Reduction max{ncclMax, false, {}};
  Reduce(out, in, 3, ncclFloat32, max, 3);
  EXPECT_EQ(out[2], 6);
  Reduction avg{ncclAvg, false, {}};
  Reduce(out, in, 3, ncclFloat32, avg, 3);
  EXPECT_EQ(out[0], 4);
  Reduction premul;
  premul.premul = true;
  float two = 2;
  premul.scalar.resize(4);
  std::memcpy(premul.scalar.data(), &two, 4);
  Reduce(out, in, 3, ncclFloat32, premul, 3);
  EXPECT_EQ(out[0], 24);
  int32_t x[2] = {INT32_MAX, 3}, y[2] = {1, -4};
  int32_t o[2];
  std::vector<const void*> ints = {x, y};
  Reduce(o, ints, 2, ncclInt32, sum, 2);
  EXPECT_EQ(o[0], INT32_MIN) << "integers wrap, as on a GPU";
  Reduction prod{ncclProd, false, {}};
  Reduce(o, ints, 2, ncclInt32, prod, 2);
  EXPECT_EQ(o[1], -12);
  // In place: the output is one of the inputs.
  Reduce(a, in, 3, ncclFloat32, sum, 3);
  EXPECT_EQ(a[2], 0);
}

TEST(NcclEmuReduce, NarrowFloatsRoundToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 3.14159f, -1e-7f}) {
    float h = HalfToFloat(FloatToHalf(f));
    EXPECT_NEAR(h, f, std::fabs(f) * 1e-3 + 1e-7) << f;
    float bf = Bf16ToFloat(FloatToBf16(f));
    EXPECT_NEAR(bf, f, std::fabs(f) * 1e-2 + 1e-7) << f;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00) << "beyond a half's range: infinity";
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp8ToFloat(FloatToFp8(448.0f, true), true), 448.0f);
  EXPECT_EQ(Fp8ToFloat(FloatToFp8(1000.0f, true), true), 448.0f) << "e4m3 saturates";
  EXPECT_EQ(Fp8ToFloat(FloatToFp8(1.5f, true), true), 1.5f);
  EXPECT_EQ(Fp8ToFloat(FloatToFp8(-0.25f, false), false), -0.25f);
  uint16_t h[2] = {FloatToHalf(1.5f), FloatToHalf(2.0f)}, g[2] = {FloatToHalf(0.25f), FloatToHalf(-1.0f)}, o[2];
  Reduce(o, {h, g}, 2, ncclFloat16, Reduction{}, 2);
  EXPECT_EQ(HalfToFloat(o[0]), 1.75f);
  EXPECT_EQ(HalfToFloat(o[1]), 1.0f);
}

TEST(NcclEmuNet, ThreeRanksExchangeInAnyOrderAndAnAbortEndsTheWaits) {
  ncclUniqueId id;
  auto root = Root::Start(&id);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  std::atomic<bool> stop{false};
  std::shared_ptr<Mesh> mesh[3];
  std::thread t[3];
  for (int r = 0; r < 3; r++)
    t[r] = std::thread([&, r] {
      auto m = Mesh::Join(id, 3, r, stop);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      mesh[r] = *m;
    });
  for (auto& th : t) th.join();
  ASSERT_TRUE(mesh[0] && mesh[1] && mesh[2]);
  // Everyone sends to everyone (itself too) before anyone receives.
  Key k{1, kCollective, 0};
  for (int r = 0; r < 3; r++)
    for (int p = 0; p < 3; p++) {
      int v = r * 10 + p;
      ASSERT_TRUE(mesh[r]->Send(p, k, &v, sizeof(v)).ok());
    }
  for (int r = 0; r < 3; r++)
    for (int p = 2; p >= 0; p--) {
      auto got = mesh[r]->Receive(p, k);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      int v;
      std::memcpy(&v, got->data(), sizeof(v));
      EXPECT_EQ(v, p * 10 + r);
    }
  // A wait for a message that never comes ends when the mesh is aborted.
  std::thread waiter([&] {
    auto got = mesh[0]->Receive(1, Key{1, kCollective, 99});
    EXPECT_FALSE(got.ok());
    EXPECT_EQ(got.status().raw(), static_cast<uint32_t>(ncclRemoteError));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  mesh[0]->Abort("test");
  waiter.join();
  EXPECT_FALSE(mesh[0]->Health().ok());
}

TEST(NcclEmuNet, ARankWithoutTheSecretIsRefused) {
  ncclUniqueId id;
  auto root = Root::Start(&id);
  ASSERT_TRUE(root.ok());
  ncclUniqueId wrong = id;
  wrong.internal[20] ^= 0x55;  // a byte of the secret
  std::atomic<bool> stop{false};
  std::thread impostor([&] {
    auto m = Mesh::Join(wrong, 2, 1, stop);
    EXPECT_FALSE(m.ok()) << "joined without the secret";
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop.store(true);  // the root never answers it; the abort ends its wait
  impostor.join();
}

}  // namespace
}  // namespace remora::worker::emu_nccl

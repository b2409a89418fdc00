// shim/src/visible_devices.h: CUDA_VISIBLE_DEVICES among a session's devices, by CUDA's rules
// as PyTorch reproduces them (torch.cuda._parse_visible_devices and _device_count_nvml).
#include "visible_devices.h"

#include <gtest/gtest.h>

namespace remora::shim {
namespace {

using V = std::vector<int>;

const std::vector<std::string> kFour = {
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-0a1b2c3d-0000-1111-2222-333344445555",
    "GPU-0a1bffff-9999-8888-7777-666655554444", "GPU-f00dbabe-1234-5678-9abc-def012345678"};

TEST(VisibleDevices, IndicesSelectAndReorder) {
  EXPECT_EQ(VisibleDevices("0", kFour), V({0}));
  EXPECT_EQ(VisibleDevices("2,1", kFour), V({2, 1}));
  EXPECT_EQ(VisibleDevices("3,0,2,1", kFour), V({3, 0, 2, 1}));
  EXPECT_EQ(VisibleDevices(" 1 , 3 ", kFour), V({1, 3}));  // blanks around entries
  EXPECT_EQ(VisibleDevices("1gpu2,2ampere", kFour), V({1, 2}));  // read as strtoul reads them
  EXPECT_EQ(VisibleDevices("+2", kFour), V({2}));
}

TEST(VisibleDevices, AnInvalidEntryEndsTheList) {
  EXPECT_EQ(VisibleDevices("0,2,-1,1", kFour), V({0, 2}));
  EXPECT_EQ(VisibleDevices("1,x,2", kFour), V({1}));
  EXPECT_EQ(VisibleDevices("1,,2", kFour), V({1}));
  EXPECT_EQ(VisibleDevices("1,7,2", kFour), V({1}));  // past the last device
  EXPECT_EQ(VisibleDevices("4", kFour), V({}));
  EXPECT_EQ(VisibleDevices("-1", kFour), V({}));
  EXPECT_EQ(VisibleDevices("1,GPU-8932f937", kFour), V({1}));  // indices first: a UUID is not one
}

TEST(VisibleDevices, ADeviceNamedTwiceMakesNoneVisible) {
  EXPECT_EQ(VisibleDevices("0,0", kFour), V({}));
  EXPECT_EQ(VisibleDevices("1,2,1", kFour), V({}));
  EXPECT_EQ(VisibleDevices("0,9,0", kFour), V({}));  // counted before the range is
  EXPECT_EQ(VisibleDevices("GPU-8932,GPU-8932f937", kFour), V({}));  // the same device by two prefixes
  EXPECT_EQ(VisibleDevices("GPU-f00d,GPU-f00d", kFour), V({}));
  // ... and says why: CUDA answers cudaErrorInvalidDevice for it, cudaErrorNoDevice otherwise.
  bool twice = false;
  EXPECT_EQ(VisibleDevices("1,2,1", kFour, &twice), V({}));
  EXPECT_TRUE(twice);
  EXPECT_EQ(VisibleDevices("GPU-8932,GPU-8932f937", kFour, &twice), V({}));
  EXPECT_TRUE(twice);
  EXPECT_EQ(VisibleDevices("", kFour, &twice), V({}));
  EXPECT_FALSE(twice) << "empty hides every device without naming one twice";
  EXPECT_EQ(VisibleDevices("4", kFour, &twice), V({}));
  EXPECT_FALSE(twice);
  EXPECT_EQ(VisibleDevices("0,1", kFour, &twice), V({0, 1}));
  EXPECT_FALSE(twice);
}

TEST(VisibleDevices, UuidsAndUniquePrefixes) {
  EXPECT_EQ(VisibleDevices("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", kFour), V({0}));
  EXPECT_EQ(VisibleDevices("GPU-f00d,GPU-8932", kFour), V({3, 0}));
  EXPECT_EQ(VisibleDevices("GPU-F00DBABE", kFour), V({3}));  // hex in either case
  EXPECT_EQ(VisibleDevices("GPU-0a1b", kFour), V({}));  // ambiguous: ends the list at once
  EXPECT_EQ(VisibleDevices("GPU-f00d,GPU-0a1b,GPU-8932", kFour), V({3}));
  EXPECT_EQ(VisibleDevices("GPU-0a1b2,GPU-0a1bf", kFour), V({1, 2}));
  EXPECT_EQ(VisibleDevices("GPU-deadbeef", kFour), V({}));
  EXPECT_EQ(VisibleDevices("GPU-f00d,1", kFour), V({3}));  // UUIDs first: an index is not one
}

TEST(VisibleDevices, EmptyAndMig) {
  EXPECT_EQ(VisibleDevices("", kFour), V({}));
  EXPECT_EQ(VisibleDevices("  ", kFour), V({}));
  // "MIG-" and a GPU's UUID names the GPU, as the driver does; no other MIG UUID names anything.
  EXPECT_EQ(VisibleDevices("MIG-8932f937-d72c-4106-c12f-20bd9faed9f6", kFour), V({0}));
  EXPECT_EQ(VisibleDevices("MIG-f00d,GPU-0a1b2", kFour), V({3, 1}));
  EXPECT_EQ(VisibleDevices("MIG-deadbeef-0000-1111-2222-333344445555", kFour), V({}));
  bool twice = false;
  EXPECT_EQ(VisibleDevices("MIG-f00d,GPU-f00d", kFour, &twice), V({}));
  EXPECT_TRUE(twice);
  EXPECT_EQ(VisibleDevices("0", {}), V({}));
}

TEST(VisibleDevices, UuidText) {
  const unsigned char u[16] = {0x89, 0x32, 0xf9, 0x37, 0xd7, 0x2c, 0x41, 0x06, 0xc1, 0x2f, 0x20, 0xbd, 0x9f, 0xae, 0xd9, 0xf6};
  EXPECT_EQ(UuidText(u), "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6");
}

}  // namespace
}  // namespace remora::shim

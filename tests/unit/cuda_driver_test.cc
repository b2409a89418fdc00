// server/worker/backend/cuda/cuda_driver: the kernel-mode driver's version as /proc/driver/nvidia/version
// gives it, for both of NVIDIA's kernel modules (NVML reports the same string; XLA parses it).
#include <gtest/gtest.h>

#include "worker/backend/cuda/cuda_driver.h"

namespace remora::worker::cuda_backend {
namespace {

TEST(KernelModuleVersion, ProprietaryAndOpenModules) {
  EXPECT_EQ(KernelModuleVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Oct 28 2025"),
            "580.159.04");
  // The open module's line names the architecture first: x86_64 is no version.
  EXPECT_EQ(KernelModuleVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                                "(dvs-builder@U22-I3-AF03-09-1)  Tue Oct 28 2025"),
            "580.159.04");
  // The GPU machine's, verbatim (2026-12-02).
  EXPECT_EQ(KernelModuleVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  "),
            "580.159.04");
  EXPECT_EQ(KernelModuleVersion("NVRM version: NVIDIA UNIX aarch64 Kernel Module  570.86.15"), "570.86.15");
  EXPECT_EQ(KernelModuleVersion("no module here 1.2.3"), "");
  EXPECT_EQ(KernelModuleVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module"), "");
}

}  // namespace
}  // namespace remora::worker::cuda_backend

// The proof that a remoted program ran on Remora alone: with REMORA_ASSERT_NO_LOCAL_GPU=1 in
// its environment, the shim checks at process exit that the process opened no /dev/nvidia*
// device and mapped no NVIDIA driver library (libcuda, libnvidia-*) other than Remora's own,
// and otherwise prints "remora-shim: FAIL: ..." and exits 98. A program that silently fell
// back to the local GPU would otherwise "pass". Used by the GPU test scripts.
#pragma once

namespace remora::shim {

// Runs the check if the environment asks for it (exits the process on failure).
void CheckNoLocalGpuAtExit();

}  // namespace remora::shim

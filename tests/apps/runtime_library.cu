// The runtime's library loading (cudaLibraryLoadData, cudaLibraryLoadFromFile,
// cudaLibraryGetKernel, cudaLibraryUnload) through Remora's driver facade, on the host backend:
// a PTX library loaded from memory and from a file, a kernel looked up and launched with
// cudaLaunchKernel (not executed on the host backend: its launch is accepted), the library
// unloaded, and handles used after the unload refused.
#include <unistd.h>

#include "app_check.h"

namespace {

const char kPtx[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry remora_lib_kernel(.param .u64 p)\n"
    "{\n"
    "  ret;\n"
    "}\n";

}  // namespace

int main() {
  cudaLibrary_t lib = nullptr;
  CHECK(cudaLibraryLoadData(&lib, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  REQUIRE(lib != nullptr, "no library");
  cudaKernel_t k = nullptr;
  CHECK(cudaLibraryGetKernel(&k, lib, "remora_lib_kernel"));
  REQUIRE(k != nullptr, "no kernel");
  cudaKernel_t again = nullptr;
  CHECK(cudaLibraryGetKernel(&again, lib, "remora_lib_kernel"));
  REQUIRE(again == k, "the same kernel asked twice came back as two handles");
  int* d = nullptr;
  CHECK(cudaMalloc(&d, 64));
  void* args[] = {&d};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(1), dim3(1), args, 0, nullptr));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaLibraryUnload(lib));
  EXPECT_ERR(cudaLibraryUnload(lib), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaLibraryGetKernel(&k, lib, "remora_lib_kernel"), cudaErrorInvalidResourceHandle);
  // From a file.
  char path[] = "/tmp/remora_lib_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0, "mkstemp");
  REQUIRE(write(fd, kPtx, sizeof kPtx) == static_cast<ssize_t>(sizeof kPtx), "write");
  close(fd);
  CHECK(cudaLibraryLoadFromFile(&lib, path, nullptr, nullptr, 0, nullptr, nullptr, 0));
  unlink(path);
  CHECK(cudaLibraryGetKernel(&k, lib, "remora_lib_kernel"));
  CHECK(cudaLibraryUnload(lib));
  EXPECT_ERR(cudaLibraryLoadFromFile(&lib, "/nonexistent/remora.ptx", nullptr, nullptr, 0, nullptr, nullptr, 0),
             cudaErrorFileNotFound);
  CHECK(cudaFree(d));
  std::printf("PASS runtime_library\n");
  return 0;
}

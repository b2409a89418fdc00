// The runtime's library loading (cudaLibraryLoadData, cudaLibraryLoadFromFile,
// cudaLibraryGetKernel, cudaLibraryGetKernelCount/EnumerateKernels, cudaLibraryGetGlobal/
// GetManaged, cudaLibraryUnload) through Remora's driver facade, on the host backend: a PTX
// library loaded from memory and from a file, its kernels and variables found, a kernel looked up and launched with
// cudaLaunchKernel (not executed on the host backend: its launch is accepted), the library
// unloaded, and handles used after the unload refused.
#include <unistd.h>

#include "app_check.h"

namespace {

const char kPtx[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .global .align 4 .b8 remora_lib_table[64];\n"
    ".visible .global .attribute(.managed) .align 4 .u32 remora_lib_managed;\n"
    ".visible .entry remora_lib_kernel(.param .u64 p)\n"
    "{\n"
    "  ret;\n"
    "}\n"
    ".visible .entry remora_lib_other()\n"
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
  // Its kernels enumerated: the handles cudaLibraryGetKernel gives.
  unsigned count = 0;
  CHECK(cudaLibraryGetKernelCount(&count, lib));
  REQUIRE(count == 2, "%u kernels", count);
  cudaKernel_t all[2] = {};
  CHECK(cudaLibraryEnumerateKernels(all, 2, lib));
  cudaKernel_t other = nullptr;
  CHECK(cudaLibraryGetKernel(&other, lib, "remora_lib_other"));
  REQUIRE((all[0] == k && all[1] == other) || (all[0] == other && all[1] == k), "enumerated %p %p", static_cast<void*>(all[0]),
          static_cast<void*>(all[1]));
  // Its variables: a global of the declared size, and a managed one the host uses directly.
  void* table = nullptr;
  size_t bytes = 0;
  CHECK(cudaLibraryGetGlobal(&table, &bytes, lib, "remora_lib_table"));
  REQUIRE(table != nullptr && bytes == 64, "remora_lib_table: %zu bytes", bytes);
  EXPECT_ERR(cudaLibraryGetGlobal(&table, &bytes, lib, "remora_lib_none"), cudaErrorSymbolNotFound);
  unsigned* managed = nullptr;
  CHECK(cudaLibraryGetManaged(reinterpret_cast<void**>(&managed), &bytes, lib, "remora_lib_managed"));
  REQUIRE(managed != nullptr && bytes == 4, "remora_lib_managed: %zu bytes", bytes);
  *managed = 0x5eed;
  unsigned seen = 0;
  CHECK(cudaMemcpy(&seen, managed, sizeof(seen), cudaMemcpyDeviceToHost));
  REQUIRE(seen == 0x5eed, "the device has %x where the host wrote 5eed", seen);
  // No device of Remora shares function pointers with the host: no unified function.
  void* fn = nullptr;
  EXPECT_ERR(cudaLibraryGetUnifiedFunction(&fn, lib, "remora_lib_kernel"), cudaErrorSymbolNotFound);
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

#include "local_gpu_check.h"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace remora::shim {
namespace {

// The directory Remora's own libraries live in (a facade named libcuda.so.1 there is ours).
std::string OwnDirectory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&CheckNoLocalGpuAtExit), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

bool IsDriverLibrary(const std::string& path, const std::string& own) {
  size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (!own.empty() && path.compare(0, own.size(), own) == 0) return false;
  return base.rfind("libcuda.so", 0) == 0 || base.rfind("libnvidia-", 0) == 0;
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "remora-shim: FAIL: this process used the local GPU (%s); a remoted program must reach GPUs only through Remora\n",
               what.c_str());
  std::fflush(stderr);
  ::_exit(98);
}

}  // namespace

void CheckNoLocalGpuAtExit() {
  const char* want = std::getenv("REMORA_ASSERT_NO_LOCAL_GPU");
  if (want == nullptr || std::strcmp(want, "1") != 0) return;
  std::string own = OwnDirectory();
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    size_t p = line.find('/');
    if (p == std::string::npos) continue;
    std::string path = line.substr(p);
    if (path.rfind("/dev/nvidia", 0) == 0) Fail("mapped " + path);
    if (IsDriverLibrary(path, own)) Fail("loaded " + path);
  }
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      char target[512];
      std::string link = std::string("/proc/self/fd/") + e->d_name;
      ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (std::strncmp(target, "/dev/nvidia", 11) == 0) {
        ::closedir(d);
        Fail(std::string("opened ") + target);
      }
    }
    ::closedir(d);
  }
}

}  // namespace remora::shim

// remora-run [--server URL] -- CMD ARGS: runs an unmodified CUDA program under the shim.
// Without --server it starts a private remora-server for the duration of the command (the
// embedded default): on this machine's GPUs when an NVIDIA driver is present, otherwise
// on the host-emulated backend, and it says so.
//
// The private server is this user's alone: over shm its socket lives in a directory only
// this user can enter; over tcp (loopback) it requires a one-off tenant token that only this
// run knows (a file of mode 0600 in that directory), so other local users cannot use it.
#include <algorithm>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "admin_client.h"
#include "libraries.h"
#include "remora/base/util.h"

namespace fs = std::filesystem;

namespace {

pid_t g_child = -1;

void Forward(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  return fs::path(std::string(buf, static_cast<size_t>(n))).parent_path().string();
}

bool HaveNvidiaDriver() {
  void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  ::dlclose(h);
  return true;
}

// Remora's math libraries beside the shim, by the SONAME of the library each replaces (links
// named so, see shim/CMakeLists.txt). An application's own libraries (PyTorch's carry
// DT_RPATH) would be found first on any search path, so only a preload by SONAME replaces
// them: these go into LD_PRELOAD after the shim.
// `only`: the libraries to preload by name (cublas, cublasLt, cudnn, cufft, curand, cusolver,
// cusparse, nccl; cudnn stands for its sub-libraries too), or empty for all.
std::vector<std::string> ClientLibraries(const std::string& shim, const std::vector<std::string>& only) {
  static const char* const kSonames[] = {REMORA_CLIENT_SONAMES};  // protocol/api/*.api (libraries.h)
  std::vector<std::string> out;
  fs::path dir = fs::path(shim).parent_path();
  for (const char* name : kSonames) {
    std::string lib = std::string(name).substr(3, std::string(name).find(".so") - 3);  // libcudnn_ops.so.9 -> cudnn_ops
    lib = lib.substr(0, lib.find('_'));
    if (!only.empty() && std::find(only.begin(), only.end(), lib) == only.end()) continue;
    if (fs::exists(dir / name)) out.push_back((dir / name).string());
  }
  return out;
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Starts argv with `env` added to this process's environment and `unset` taken out of it
// (in the child only).
pid_t Start(const std::vector<std::string>& argv, const std::string& log,
            const std::vector<std::pair<std::string, std::string>>& env = {},
            const std::vector<std::string>& unset = {}) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  for (const std::string& k : unset) unsetenv(k.c_str());
  if (!log.empty()) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (f != nullptr) {
      ::dup2(fileno(f), 1);
      ::dup2(fileno(f), 2);
    }
  }
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  ::execvp(a[0], a.data());
  std::fprintf(stderr, "remora-run: cannot run %s: %s\n", a[0], std::strerror(errno));
  ::_exit(127);
}

void PrintTail(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  size_t from = lines.size() > 20 ? lines.size() - 20 : 0;
  for (size_t i = from; i < lines.size(); i++) std::fprintf(stderr, "  %s\n", lines[i].c_str());
}

// Creates the tenant "local" on the private server (through its admin socket) and writes its
// token to `path`, mode 0600.
remora::Status CreatePrivateTenant(const std::string& state_dir, const std::string& path) {
  using namespace remora;
  admin::ConnectOptions o;
  o.state_dir = state_dir;
  ASSIGN_OR_RETURN(std::unique_ptr<admin::AdminClient> c, admin::AdminClient::Connect(o));
  ASSIGN_OR_RETURN(std::string token, c->CreateTenant("local", std::nullopt, std::nullopt));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(Err::kUnknown, "create " + path, errno);
  token += "\n";
  bool ok = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  ::close(fd);
  if (!ok) return Error(Err::kUnknown, "cannot write {}", path);
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"remora-run: run a CUDA program on Remora GPUs (remote or a private local server)"};
  std::string server, backend = "auto", transport = "shm", shim, token_file, host_gpus = "1", host_mem = "16GiB";
  bool verbose = false, no_libraries = false;
  std::vector<std::string> command, only_libraries;
  std::string libraries_list;
  app.add_option("--server", server, "a running server: shm:///path.sock, tcp://HOST:PORT or rdma://HOST:PORT");
  app.add_option("--token-file", token_file, "tenant token file for --server or --pool (or set REMORA_TOKEN)");
  std::string pool;
  int pool_gpus = 0;
  app.add_option("--pool", pool, "a pool of servers, HOST:PORT,... (any of its servers' tcp:// addresses): the "
                                 "tenant's GPUs wherever the pool placed them");
  app.add_option("--gpus", pool_gpus, "with --pool: the program needs this many of the tenant's GPUs (the servers "
                                      "holding the first ones are used; fewer in the pool is an error)")
      ->check(CLI::Range(1, 256));
  app.add_option("--backend", backend, "private server only: cuda, host or auto (cuda if a driver is present)")
      ->check(CLI::IsMember({"auto", "cuda", "host"}));
  app.add_option("--transport", transport, "private server only: shm or tcp")->check(CLI::IsMember({"shm", "tcp"}));
  app.add_option("--host-gpus", host_gpus, "private host-emulated server: number of GPUs");
  app.add_option("--host-gpu-memory", host_mem, "private host-emulated server: memory per GPU");
  app.add_option("--shim", shim, "path of libremora.so (default: next to this tool's build)");
  app.add_flag("--no-libraries", no_libraries,
               "preload only the CUDA runtime, not Remora's cuBLAS, cuDNN, cuFFT, cuRAND, cuSOLVER, cuSPARSE and NCCL");
  app.add_option("--libraries", libraries_list,
                 "preload only these of Remora's math libraries (comma-separated: cublas, cublasLt, cudnn, cufft, curand, "
                 "cusolver, cusparse, nccl); the others are NVIDIA's, run on the client through the driver facade");
  app.add_flag("-v,--verbose", verbose, "show the private server's log and the shim's info lines");
  app.add_option("command", command, "the program and its arguments")->required();
  app.prefix_command(false);
  app.allow_extras(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  for (size_t start = 0; !libraries_list.empty() && start <= libraries_list.size();) {
    size_t end = std::min(libraries_list.find(',', start), libraries_list.size());
    std::string name = libraries_list.substr(start, end - start);
    static const char* const kKnown[] = {"cublas", "cublasLt", "cudnn", "cufft", "curand", "cusolver", "cusparse", "nccl"};
    if (std::find(std::begin(kKnown), std::end(kKnown), name) == std::end(kKnown)) {
      std::fprintf(stderr, "remora-run: --libraries: '%s' is not one of cublas, cublasLt, cudnn, cufft, curand, cusolver, cusparse, nccl\n",
                   name.c_str());
      return 2;
    }
    only_libraries.push_back(name);
    start = end + 1;
  }
  std::string dir = SelfDir();
  if (shim.empty()) {
    // A build tree (bin/ beside lib/), else where the remora-client package puts it.
    shim = fs::weakly_canonical(fs::path(dir) / ".." / "lib" / "libremora.so").string();
    if (!fs::exists(shim)) shim = REMORA_INSTALLED_SHIM;
  }
  if (!fs::exists(shim)) {
    std::fprintf(stderr, "remora-run: the shim %s does not exist (use --shim)\n", shim.c_str());
    return 1;
  }
  // The application's environment. The private server below must not get it: its worker
  // loads the real driver. The runtime, the driver API, NVML and CUPTI are all Remora's: preloaded
  // (so that a library opened later by name, even by its SONAME, is ours) and first on the
  // library path (for programs that dlopen a path); Triton links its launchers there.
  std::string lib_dir = fs::path(shim).parent_path().string();
  std::string preload = shim;
  // A sanitizer build's shim needs the sanitizer's runtime loaded before it (an application
  // built without it does not load it itself).
  if (*REMORA_SANITIZER_RUNTIME) preload = std::string(REMORA_SANITIZER_RUNTIME) + ":" + preload;
  for (const char* facade : {"libcuda.so.1", "libnvidia-ml.so.1", "libcupti.so.13"})
    if (fs::exists(fs::path(lib_dir) / facade)) preload += ":" + (fs::path(lib_dir) / facade).string();
  if (!no_libraries)
    for (const std::string& lib : ClientLibraries(shim, only_libraries)) preload += ":" + lib;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old) preload += std::string(":") + old;
  std::string library_path = lib_dir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old) library_path += std::string(":") + old;
  std::vector<std::pair<std::string, std::string>> app_env = {
      {"LD_PRELOAD", preload}, {"LD_LIBRARY_PATH", library_path}, {"TRITON_LIBCUDA_PATH", lib_dir}};
  if (verbose && std::getenv("REMORA_LOG") == nullptr) app_env.emplace_back("REMORA_LOG", "info");
  if (!token_file.empty()) app_env.emplace_back("REMORA_TOKEN_FILE", token_file);

  if (!pool.empty()) {
    if (!server.empty()) {
      std::fprintf(stderr, "remora-run: --server or --pool, not both\n");
      return 2;
    }
    server = pool.rfind("pool://", 0) == 0 ? pool : "pool://" + pool;
    if (pool_gpus > 0) app_env.emplace_back("REMORA_POOL_GPUS", std::to_string(pool_gpus));
  } else if (pool_gpus > 0) {
    std::fprintf(stderr, "remora-run: --gpus goes with --pool\n");
    return 2;
  }
  if (!server.empty()) {
    for (const auto& [k, v] : app_env) setenv(k.c_str(), v.c_str(), 1);
    setenv("REMORA_SERVER", server.c_str(), 1);
    std::vector<char*> a;
    for (auto& s : command) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execvp(a[0], a.data());
    std::fprintf(stderr, "remora-run: cannot run %s: %s\n", a[0], std::strerror(errno));
    return 127;
  }

  // The private server.
  if (backend == "auto") {
    backend = HaveNvidiaDriver() ? "cuda" : "host";
    if (backend == "host")
      std::fprintf(stderr,
                   "remora-run: no NVIDIA driver on this machine: using the HOST-EMULATED backend "
                   "(device memory in host RAM, kernels are not executed)\n");
  }
  char tmpl[] = "/tmp/remora-run.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("remora-run: mkdtemp");
    return 1;
  }
  std::string tmp = tmpl;
  std::string url = transport == "tcp" ? "tcp://127.0.0.1:0" : "shm://" + tmp + "/remora.sock";
  bool tcp = transport == "tcp";
  std::vector<std::string> sargs = {dir + "/remora-server", "--listen", url, "--state-dir", tmp + "/state",
                                    "--backend", backend, "--auth", tcp ? "token" : "none", "--ready-file",
                                    tmp + "/ready", "--drain-timeout", "5", "--log-level", verbose ? "info" : "warn"};
  if (backend == "host") sargs.insert(sargs.end(), {"--host-gpus", host_gpus, "--host-gpu-memory", host_mem});
  std::string log = verbose ? "" : tmp + "/server.log";
  // CUDA_VISIBLE_DEVICES is the application's: it chooses among the session's devices (the
  // shim applies it). The private server serves this machine's GPUs, all of them.
  pid_t srv = Start(sargs, log, {}, {"CUDA_VISIBLE_DEVICES"});
  auto cleanup = [&] {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  };
  std::string ready_url;
  for (int i = 0; i < 600; i++) {  // 30 s
    int status;
    if (::waitpid(srv, &status, WNOHANG) == srv) {
      std::fprintf(stderr, "remora-run: the private remora-server exited (status %d) before it was ready:\n", ExitCodeOf(status));
      if (!log.empty()) PrintTail(log);
      cleanup();
      return 1;
    }
    std::ifstream in(tmp + "/ready");
    if (in && std::getline(in, ready_url) && !ready_url.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (ready_url.empty()) {
    std::fprintf(stderr, "remora-run: the private remora-server did not become ready within 30 s\n");
    ::kill(srv, SIGKILL);
    ::waitpid(srv, nullptr, 0);
    cleanup();
    return 1;
  }
  app_env.emplace_back("REMORA_SERVER", ready_url);
  // The application talks to the private server only: a token the user may have for other
  // servers is not for it.
  unsetenv("REMORA_TOKEN");
  unsetenv("REMORA_TOKEN_FILE");
  std::erase_if(app_env, [](const auto& kv) { return kv.first == "REMORA_TOKEN_FILE"; });
  if (tcp) {
    // A one-off tenant of the private server; its token goes to a file only this user reads.
    std::string private_token = tmp + "/token";
    remora::Status st = CreatePrivateTenant(tmp + "/state", private_token);
    if (!st.ok()) {
      std::fprintf(stderr, "remora-run: cannot set up the private server's token: %s\n", st.message().c_str());
      ::kill(srv, SIGKILL);
      ::waitpid(srv, nullptr, 0);
      cleanup();
      return 1;
    }
    app_env.emplace_back("REMORA_TOKEN_FILE", private_token);
  }

  struct sigaction sa = {};
  sa.sa_handler = Forward;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  g_child = Start(command, "", app_env);
  int status = 0;
  while (::waitpid(g_child, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = -1;

  ::kill(srv, SIGTERM);
  int sstatus = 0;
  bool stopped = false;
  for (int i = 0; i < 200 && !stopped; i++) {  // 10 s
    stopped = ::waitpid(srv, &sstatus, WNOHANG) == srv;
    if (!stopped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!stopped) {
    ::kill(srv, SIGKILL);
    ::waitpid(srv, &sstatus, 0);
  }
  if (ExitCodeOf(status) != 0 && !log.empty() && std::getenv("REMORA_RUN_SHOW_LOG")) PrintTail(log);
  cleanup();
  return ExitCodeOf(status);
}

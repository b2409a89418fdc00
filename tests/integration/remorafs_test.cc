// remorafs with a real FUSE mount against a real server (host-emulated backend, 2 GPUs):
// tenants made with mkdir, limits set with `echo`, our CUDA programs run through the shim
// as the new tenant, attach/detach through `gpus`, errno of refused operations, and the
// two ways to unmount. Needs /dev/fuse and the right to mount (root); skipped otherwise.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

bool IsMounted(const std::string& path) {
  std::ifstream in("/proc/self/mounts");
  for (std::string line; std::getline(in, line);) {
    std::istringstream ss(line);
    std::string source, target;
    ss >> source >> target;
    if (target == path) return true;
  }
  return false;
}

// The whole file, or "<errno NAME>" (read with open/read: the test wants the errno).
std::string ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string("<") + strerrorname_np(errno) + ">";
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = errno;
  ::close(fd);
  return n < 0 ? std::string("<") + strerrorname_np(err) + ">" : out;
}

// One write(2) of `text` at `offset`: 0 or the errno of open or write.
int WriteFile(const std::string& path, const std::string& text, off_t offset = 0) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::pwrite(fd, text.data(), text.size(), offset);
  int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  RunResult r = remora::testing::Run({"/bin/ls", "-1", path}, {}, 30);
  std::istringstream ss(r.output);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

// Whether process `pid` (not our child) has ended: gone, or a zombie its reaper has not seen.
bool Ended(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (::kill(pid, 0) != 0 || !std::getline(in, stat)) return true;
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

RunResult Sh(const std::string& command) { return remora::testing::Run({"/bin/sh", "-c", command}, {}, 30); }

class RemoraFs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no usable /dev/fuse: " << std::strerror(errno);
    ASSERT_TRUE(s_.Start(2));
    mnt_ = dir_.path() + "/mnt";
    ASSERT_EQ(::mkdir(mnt_.c_str(), 0755), 0);
    Mount({"-f"});
  }

  // Starts remorafs on mnt_ with `extra` arguments; skips the test if mounting is not permitted.
  void Mount(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {BinDir() + "/remorafs", "--state-dir", s_.server.state_dir(), mnt_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    fs_ = std::make_unique<BackgroundProcess>(argv, std::map<std::string, std::string>{});
    if (fs_->WaitForOutput("mounted " + mnt_, 30)) return;
    std::string out = fs_->Output();
    if (out.find("Operation not permitted") != std::string::npos || out.find("Permission denied") != std::string::npos)
      GTEST_SKIP() << "mounting is not permitted here: " << out;
    FAIL() << "remorafs did not mount: " << out;
  }

  void TearDown() override {
    // Never leave a mount behind (the temporary directories are removed recursively next).
    if (!mnt_.empty() && IsMounted(mnt_)) remora::testing::Run({"fusermount3", "-u", mnt_}, {}, 30);
    if (!mnt_.empty() && IsMounted(mnt_)) remora::testing::Run({"fusermount3", "-uz", mnt_}, {}, 30);
    if (fs_) {
      fs_->Kill(SIGTERM);
      fs_->Wait(10);
    }
  }

  std::string P(const std::string& rel) const { return mnt_ + "/" + rel; }
  // The log of remorafs so far.
  std::string Log() { return fs_ ? fs_->Output() : ""; }

  // Creates tenant `name` with mkdir and returns its token, read once from the file system.
  std::string MakeTenant(const std::string& name) {
    EXPECT_EQ(::mkdir(P("tenants/" + name).c_str(), 0755), 0) << std::strerror(errno) << "\n" << Log();
    std::string token = ReadFile(P("tenants/" + name + "/token"));
    EXPECT_EQ(token.rfind("remora1." + name + ".", 0), 0u) << token;
    if (!token.empty() && token.back() == '\n') token.pop_back();
    return token;
  }

  TenancyServer s_;
  TempDir dir_;
  std::string mnt_;
  std::unique_ptr<BackgroundProcess> fs_;
};

TEST_F(RemoraFs, TenantLifecycleQuotaAndEvents) {
  ASSERT_EQ(ListDir(mnt_), (std::vector<std::string>{"gpus", "tenants"}));
  ASSERT_EQ(::mkdir(P("tenants/alice").c_str(), 0755), 0) << std::strerror(errno) << "\n" << Log();
  struct stat st;
  ASSERT_EQ(::stat(P("tenants/alice/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0400u);
  // cat, as an administrator would (it also fstats the open file).
  RunResult cat = Sh("cat " + P("tenants/alice/token"));
  ASSERT_EQ(cat.exit_code, 0) << cat.output << Log();
  std::string token = cat.output;
  ASSERT_EQ(token.rfind("remora1.alice.", 0), 0u) << token;
  ASSERT_EQ(token.back(), '\n');
  token.pop_back();
  // Read once: then it is gone.
  cat = Sh("cat " + P("tenants/alice/token"));
  EXPECT_NE(cat.exit_code, 0);
  EXPECT_NE(cat.output.find("No such file or directory"), std::string::npos) << cat.output;
  EXPECT_EQ(ReadFile(P("tenants/alice/token")), "<ENOENT>");
  // Gone once cat's close has reached remorafs (FUSE sends it asynchronously).
  EXPECT_TRUE(Eventually([&] { return ::stat(P("tenants/alice/token").c_str(), &st) != 0 && errno == ENOENT; }));
  EXPECT_EQ(ListDir(P("tenants/alice")),
            (std::vector<std::string>{"compute.max", "compute.priority", "compute.stat", "compute.weight", "gpus",
                                      "memory.current", "memory.events", "memory.max", "sessions"}));
  EXPECT_EQ(ReadFile(P("tenants/alice/memory.max")), "max\n");
  EXPECT_EQ(ReadFile(P("tenants/alice/gpus")), "0\n1\n");

  // A limit set with the shell is the server's limit.
  RunResult r = Sh("echo 64M > " + P("tenants/alice/memory.max"));
  ASSERT_EQ(r.exit_code, 0) << r.output << Log();
  EXPECT_EQ(ReadFile(P("tenants/alice/memory.max")), std::to_string(64 * kMiB) + "\n");
  r = s_.Ctl({"--json", "tenant", "list"});
  EXPECT_EQ(JsonField(r.output, "memory_limit"), std::to_string(64 * kMiB)) << r.output;

  // memory.current follows a running application, and its session is listed.
  EXPECT_EQ(ReadFile(P("tenants/alice/memory.current")), "0\n");
  BackgroundProcess app({BinDir() + "/app_hold_memory", std::to_string(16 * kMiB)}, s_.Env("shm", token));
  ASSERT_TRUE(app.WaitForOutput("holding", 60)) << app.Output();
  EXPECT_TRUE(Eventually([&] { return ReadFile(P("tenants/alice/memory.current")) == std::to_string(16 * kMiB) + "\n"; }))
      << ReadFile(P("tenants/alice/memory.current"));
  std::vector<std::string> sessions = ListDir(P("tenants/alice/sessions"));
  ASSERT_EQ(sessions.size(), 1u);
  std::string sdir = "tenants/alice/sessions/" + sessions[0] + "/";
  EXPECT_EQ(ReadFile(P(sdir + "pid")), std::to_string(app.pid()) + "\n");
  EXPECT_EQ(ReadFile(P(sdir + "transport")), "shm\n");
  EXPECT_EQ(ReadFile(P(sdir + "memory.current")), std::to_string(16 * kMiB) + "\n");
  EXPECT_GT(ReadFile(P(sdir + "host")).size(), 1u);
  long started = std::atol(ReadFile(P(sdir + "started")).c_str());
  EXPECT_LE(std::abs(static_cast<long>(std::time(nullptr)) - started), 60) << started;
  EXPECT_NE(ReadFile(P("gpus/0/memory.used")), "0\n");
  // rmdir is refused while the session runs.
  EXPECT_NE(::rmdir(P("tenants/alice").c_str()), 0);
  EXPECT_EQ(errno, EBUSY);
  app.Kill(SIGKILL);
  app.Wait(30);
  EXPECT_TRUE(Eventually([&] { return ReadFile(P("tenants/alice/memory.current")) == "0\n"; }))
      << ReadFile(P("tenants/alice/memory.current"));
  EXPECT_TRUE(Eventually([&] { return ListDir(P("tenants/alice/sessions")).empty(); }));

  // A refused allocation is counted in memory.events.
  EXPECT_EQ(ReadFile(P("tenants/alice/memory.events")), "max 0\n");
  r = RunApp("app_quota", s_.server.Url("shm"), {"64", "16"}, {{"REMORA_TOKEN", token}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string events = ReadFile(P("tenants/alice/memory.events"));
  ASSERT_EQ(events.rfind("max ", 0), 0u) << events;
  EXPECT_GE(std::atoi(events.c_str() + 4), 1) << events;
  EXPECT_EQ(events.back(), '\n');

  // Errors: errno like cgroupfs, and one line each in the daemon's log.
  EXPECT_EQ(WriteFile(P("tenants/alice/memory.max"), "lots\n"), EINVAL);
  EXPECT_EQ(WriteFile(P("tenants/alice/memory.max"), "1G\n", 3), EINVAL) << "a partial write";
  EXPECT_EQ(WriteFile(P("tenants/alice/memory.current"), "0\n"), EACCES);
  EXPECT_EQ(WriteFile(P("tenants/nobody/memory.max"), "1G\n"), ENOENT);
  r = Sh("echo 1G > " + P("tenants/nobody/memory.max"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(ReadFile(P("tenants/alice/memory.max")), std::to_string(64 * kMiB) + "\n") << "nothing changed";
  EXPECT_EQ(::mkdir(P("tenants/Bad Name").c_str(), 0755), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(::mkdir(P("gpus/9").c_str(), 0755), -1);
  EXPECT_EQ(errno, EPERM);
  std::string log = Log();
  EXPECT_NE(log.find("write " + std::string("/tenants/alice/memory.max: Invalid argument: invalid size 'lots'")),
            std::string::npos) << log;
  EXPECT_NE(log.find("/tenants/alice/memory.max: Invalid argument: partial write at offset 3"), std::string::npos) << log;
  EXPECT_NE(log.find("rmdir /tenants/alice: Device or resource busy"), std::string::npos) << log;
  EXPECT_NE(log.find("mkdir /tenants/Bad Name: Invalid argument"), std::string::npos) << log;

  // app_quota has exited, but the server may still be ending its session.
  EXPECT_TRUE(Eventually([&] { return ListDir(P("tenants/alice/sessions")).empty(); }));
  ASSERT_EQ(::rmdir(P("tenants/alice").c_str()), 0) << std::strerror(errno) << "\n" << Log();
  EXPECT_EQ(ListDir(P("tenants")), std::vector<std::string>{});
  r = s_.Ctl({"--json", "tenant", "list"});
  EXPECT_EQ(r.output, "[]\n");
  EXPECT_NE(::rmdir(P("tenants/alice").c_str()), 0);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(RemoraFs, AttachAndDetachThroughGpus) {
  EXPECT_EQ(ReadFile(P("gpus/1/memory.total")), std::to_string(4096 * kMiB) + "\n");
  auto gpus = s_.Admin()->ListGpus();
  ASSERT_TRUE(gpus.ok() && gpus->size() == 2);
  EXPECT_EQ(ReadFile(P("gpus/1/uuid")), (*gpus)[1].uuid + "\n");
  EXPECT_EQ(ReadFile(P("gpus/1/name")), (*gpus)[1].name + "\n");
  std::string token = MakeTenant("h");
  RunResult r = Sh("echo -1 > " + P("tenants/h/gpus"));
  ASSERT_EQ(r.exit_code, 0) << r.output << Log();
  EXPECT_EQ(ReadFile(P("tenants/h/gpus")), "0\n");
  EXPECT_EQ(ReadFile(P("gpus/1/tenants")), "");
  EXPECT_EQ(ReadFile(P("gpus/0/tenants")), "h\n");

  MemShell app(s_.server.dir(), s_.Env("shm", token));
  ASSERT_TRUE(app.ok());
  ASSERT_EQ(app.Do("count"), "count 1");
  r = Sh("echo +1 > " + P("tenants/h/gpus"));
  ASSERT_EQ(r.exit_code, 0) << r.output << Log();
  EXPECT_EQ(ReadFile(P("tenants/h/gpus")), "0\n1\n");
  EXPECT_EQ(ReadFile(P("gpus/1/tenants")), "h\n");
  EXPECT_TRUE(Eventually([&] { return app.Do("count") == "count 2"; })) << app.process().Output();
  ASSERT_EQ(app.Do("alloc 1 8").substr(0, 4), "ok 1");
  EXPECT_EQ(ReadFile(P("gpus/1/memory.used")), std::to_string(8 * kMiB) + "\n");
  r = Sh("echo -1 > " + P("tenants/h/gpus"));
  ASSERT_EQ(r.exit_code, 0) << r.output << Log();
  EXPECT_TRUE(Eventually([&] { return app.Do("alloc 1 1") == "err cudaErrorDevicesUnavailable"; }))
      << app.process().Output();
  EXPECT_EQ(app.Do("alloc 0 1").substr(0, 3), "ok ");
  EXPECT_EQ(WriteFile(P("tenants/h/gpus"), "+7\n"), EINVAL);
  EXPECT_EQ(WriteFile(P("tenants/h/gpus"), "1\n"), EINVAL);
  EXPECT_EQ(ReadFile(P("tenants/h/gpus")), "0\n");
  EXPECT_EQ(app.Do("quit"), "bye");
}

TEST_F(RemoraFs, UnmountsOnSigterm) {
  fs_->Kill(SIGTERM);
  EXPECT_EQ(fs_->Wait(20), 0) << Log();
  EXPECT_FALSE(IsMounted(mnt_));
  EXPECT_NE(Log().find("unmounted " + mnt_), std::string::npos) << Log();
}

TEST_F(RemoraFs, UnmountsWithFusermountAndALostServerIsEIO) {
  EXPECT_EQ(s_.server.Stop(), 0);
  EXPECT_EQ(ReadFile(P("tenants/x/memory.max")), "<EIO>");
  EXPECT_NE(::mkdir(P("tenants/y").c_str(), 0755), 0);
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(ListDir(mnt_), (std::vector<std::string>{"gpus", "tenants"})) << "the fixed part still answers";
  EXPECT_NE(Log().find("lookup /tenants/y: Input/output error"), std::string::npos) << Log();
  RunResult r = remora::testing::Run({"fusermount3", "-u", mnt_});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(fs_->Wait(20), 0) << Log();
  EXPECT_FALSE(IsMounted(mnt_));
}

TEST_F(RemoraFs, InTheBackgroundItLogsToItsFileAndEndsWhenUnmounted) {
  RunResult r = remora::testing::Run({"fusermount3", "-u", mnt_});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(fs_->Wait(20), 0) << Log();
  std::string log_file = dir_.path() + "/remorafs.log";
  r = remora::testing::Run({BinDir() + "/remorafs", "--state-dir", s_.server.state_dir(), mnt_, "--log-file", log_file}, {}, 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(ListDir(P("gpus")), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(WriteFile(P("tenants/nobody/memory.max"), "1G\n"), ENOENT);
  EXPECT_EQ(WriteFile(P("gpus/0/name"), "x\n"), EACCES);
  auto read_log = [&] {
    std::ifstream in(log_file);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::string log = read_log();
  size_t at = log.find("[remorafs ");
  ASSERT_NE(at, std::string::npos) << log;
  pid_t pid = std::atoi(log.c_str() + at + 10);
  ASSERT_GT(pid, 0) << log;
  r = remora::testing::Run({"fusermount3", "-u", mnt_});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Eventually([&] { return Ended(pid); })) << "the daemon must end when unmounted";
  log = read_log();
  EXPECT_NE(log.find("open /gpus/0/name: Permission denied: read-only file"), std::string::npos) << log;
  EXPECT_NE(log.find("unmounted " + mnt_), std::string::npos) << log;
}

}  // namespace
}  // namespace remora::testing

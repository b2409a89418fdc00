// The administrator's side with real processes (host-emulated backend): remoractl's
// commands and errors, state across restarts, a corrupt database, attach/detach while an
// application runs, sessions, the admin API's access control (socket mode, peer
// credentials, TCP with the admin token).
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(Admin, StateSurvivesARestartAndOldTokensStillAuthenticate) {
  TempDir keep;
  std::string state = keep.path() + "/state";
  std::string token_x;
  {
    TenancyServer s;
    ASSERT_TRUE(s.Start(2, state));
    token_x = s.CreateTenant("x", {"--memory", "1GiB", "--gpus", "0"});
    s.CreateTenant("y");
    s.CreateTenant("gone");
    EXPECT_EQ(s.Ctl({"tenant", "set", "y", "--memory", "8GiB"}).exit_code, 0);
    EXPECT_EQ(s.Ctl({"attach", "x", "1"}).exit_code, 0);
    EXPECT_EQ(s.Ctl({"detach", "y", "0"}).exit_code, 0);
    EXPECT_EQ(s.Ctl({"tenant", "delete", "gone"}).exit_code, 0);
    EXPECT_EQ(s.server.Stop(), 0) << s.server.Log();
  }
  TenancyServer s;
  ASSERT_TRUE(s.Start(2, state));
  auto admin = s.Admin();
  ASSERT_TRUE(admin);
  auto tenants = admin->ListTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->size(), 2u);
  EXPECT_EQ((*tenants)[0].name, "x");
  EXPECT_EQ((*tenants)[0].memory_limit, std::optional<uint64_t>(1024 * kMiB));
  EXPECT_EQ((*tenants)[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ((*tenants)[1].name, "y");
  EXPECT_EQ((*tenants)[1].memory_limit, std::optional<uint64_t>(8192 * kMiB));
  EXPECT_EQ((*tenants)[1].gpus, (std::vector<int>{1}));
  RunResult r = RunApp("app_device_info", s.server.Url("shm"), {"2"}, {{"REMORA_TOKEN", token_x}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1024 MiB"), std::string::npos) << "the tenant sees its limit: " << r.output;
  EXPECT_EQ(s.server.Stop(), 0) << s.server.Log();
}

TEST(Admin, CorruptDatabaseStopsTheServerWithAMessageNamingIt) {
  TempDir dir;
  std::string state = dir.path() + "/state";
  ::mkdir(state.c_str(), 0700);
  std::ofstream(state + "/state.db") << std::string(8192, 'x');
  RunResult r = remora::testing::Run({BinDir() + "/remora-server", "--state-dir", state, "--backend", "host", "--listen",
                     "shm://" + dir.path() + "/s.sock"},
                    {}, 30);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(state + "/state.db"), std::string::npos) << r.output;
  std::ifstream garbage(state + "/state.db");
  std::string head(16, '\0');
  garbage.read(head.data(), 16);
  EXPECT_EQ(head, std::string(16, 'x')) << "the server must not overwrite a database it cannot read";
}

TEST(Admin, AttachAndDetachWhileAnApplicationRuns) {
  TenancyServer s;
  ASSERT_TRUE(s.Start(2));
  std::string token = s.CreateTenant("h", {"--memory", "64MiB", "--gpus", "0"});
  MemShell app(s.server.dir(), s.Env("shm", token));
  ASSERT_TRUE(app.ok());
  ASSERT_EQ(app.Do("count"), "count 1");
  ASSERT_EQ(app.Do("alloc 0 8").substr(0, 4), "ok 1");

  RunResult r = s.Ctl({"attach", "h", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("host-emulated"), std::string::npos) << r.output;
  EXPECT_TRUE(Eventually([&] { return app.Do("count") == "count 2"; })) << app.process().Output();
  ASSERT_EQ(app.Do("alloc 1 8").substr(0, 4), "ok 2");
  EXPECT_EQ(app.Do("info 1"), "info " + std::to_string(56 * kMiB) + " " + std::to_string(64 * kMiB));
  RunResult gpus = s.Ctl({"gpu", "list"});
  EXPECT_NE(gpus.output.find("host-emulated"), std::string::npos) << gpus.output;

  r = s.Ctl({"detach", "h", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Eventually([&] { return app.Do("alloc 1 1") == "err cudaErrorDevicesUnavailable"; })) << app.process().Output();
  EXPECT_EQ(app.Do("check 2"), "err cudaErrorDevicesUnavailable");
  // The other device carries on.
  EXPECT_EQ(app.Do("check 1"), "ok");
  EXPECT_EQ(app.Do("alloc 0 8").substr(0, 3), "ok ");
  EXPECT_EQ(app.Do("free 1"), "ok");
  EXPECT_EQ(app.Do("quit"), "bye");
  EXPECT_EQ(s.server.Stop(), 0) << s.server.Log();
}

// Host functions and launches on a detached device fail with cudaErrorDevicesUnavailable
// and never block the application: neither once it knows of the detach, nor when it queued a
// host function before it heard of it (the worker refuses that one and says so; before, the
// next synchronous copy waited forever for a callback that could never run).
TEST(Admin, DetachedDeviceNeverHangsHostFunctionsOrLaunches) {
  TenancyServer s;
  ASSERT_TRUE(s.Start(2));
  std::string token = s.CreateTenant("h", {"--memory", "64MiB", "--gpus", "0,1"});
  MemShell app(s.server.dir(), s.Env("shm", token));
  ASSERT_TRUE(app.ok());
  ASSERT_EQ(app.Do("alloc 0 1").substr(0, 4), "ok 1");
  std::string first = app.Do("stream 1"), second = app.Do("stream 1");
  ASSERT_EQ(first.substr(0, 3), "ok ") << first;
  ASSERT_EQ(second.substr(0, 3), "ok ") << second;
  ASSERT_EQ(s.Ctl({"detach", "h", "1"}).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return s.server.Log().find("devices are now 0,-1") != std::string::npos; }))
      << s.server.Log();
  // The application has made no call since, but its watchdog takes the server's notices in
  // while it is idle: it may know of the detach or not yet. Not knowing, the host function is
  // queued and the stream must not hang on it; knowing, it is refused at once.
  std::string queued = app.Do("hostfn " + first.substr(3), 20);
  if (queued == "ok") {
    std::string check = app.Do("check 1", 20);
    EXPECT_TRUE(check == "ok" || check == "err cudaErrorDevicesUnavailable") << "'" << check << "'\n"
                                                                               << app.process().Output();
  } else {
    EXPECT_EQ(queued, "err cudaErrorDevicesUnavailable") << app.process().Output();
  }
  EXPECT_EQ(app.Do("check 1", 20), "ok");
  // Now it knows: refused at once.
  EXPECT_EQ(app.Do("hostfn " + second.substr(3)), "err cudaErrorDevicesUnavailable");
  EXPECT_EQ(app.Do("launch " + second.substr(3)), "err cudaErrorDevicesUnavailable");
  EXPECT_EQ(app.Do("check 1"), "ok");
  EXPECT_EQ(app.Do("quit"), "bye");
  EXPECT_EQ(s.server.Stop(), 0) << s.server.Log();
}

TEST(Admin, CommandsTablesJsonAndErrors) {
  TenancyServer s;
  ASSERT_TRUE(s.Start(2));
  struct stat st;
  ASSERT_EQ(::stat((s.server.state_dir() + "/admin.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  RunResult r = s.Ctl({"tenant", "create", "alice", "--memory", "512MiB", "--gpus", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("remora1.alice."), std::string::npos) << r.output;
  std::string token = s.CreateTenant("bob");
  // Usage errors: exit 2, one line.
  for (const auto& args : std::vector<std::vector<std::string>>{{"tenant", "create", "c", "--memory", "lots"},
                                                                {"tenant", "create", "c", "--gpus", "one"},
                                                                {"tenant", "frobnicate"}}) {
    r = s.Ctl(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.rfind("remoractl: ", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  // Refused operations: exit 1, one line.
  for (const auto& args : std::vector<std::vector<std::string>>{{"tenant", "create", "alice"},
                                                                {"tenant", "create", "Bad Name"},
                                                                {"tenant", "set", "nobody", "--memory", "1G"},
                                                                {"attach", "bob", "7"},
                                                                {"detach", "alice", "0"},
                                                                {"session", "kill", "999"}}) {
    r = s.Ctl(args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("remoractl: ", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  r = remora::testing::Run({BinDir() + "/remoractl", "--state-dir", s.server.dir() + "/nothing-here", "tenant", "list"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no remora-server admin socket"), std::string::npos) << r.output;

  r = s.Ctl({"tenant", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LIMIT/GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("512 MiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("host-emulated"), std::string::npos) << r.output;
  r = s.Ctl({"--json", "gpu", "list"});
  EXPECT_NE(r.output.find("\"index\":1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"emulated\":true"), std::string::npos) << r.output;

  // Sessions: listed, protected from a plain delete, ended by kill or --force.
  MemShell app(s.server.dir(), s.Env("tcp", token));
  ASSERT_TRUE(app.ok());
  ASSERT_EQ(app.Do("alloc 0 4").substr(0, 4), "ok 1");
  r = s.Ctl({"--json", "session", "list"});
  EXPECT_EQ(JsonField(r.output, "tenant"), "bob") << r.output;
  EXPECT_EQ(JsonField(r.output, "pid"), std::to_string(app.process().pid())) << r.output;
  EXPECT_EQ(JsonField(r.output, "transport"), "tcp") << r.output;
  EXPECT_EQ(JsonField(r.output, "data_path"), "socket") << r.output;
  EXPECT_EQ(JsonField(r.output, "memory_current"), std::to_string(4 * kMiB)) << r.output;
  EXPECT_NE(JsonField(r.output, "program").find("mem_shell"), std::string::npos) << r.output;
  std::string id = JsonField(r.output, "id");
  r = s.Ctl({"session", "list"});
  EXPECT_NE(r.output.find("app_mem_shell"), std::string::npos) << r.output;
  r = s.Ctl({"tenant", "delete", "bob"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--force"), std::string::npos) << r.output;
  r = s.Ctl({"session", "kill", id});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Eventually([&] { return app.Do("alloc 0 1") == "err cudaErrorDevicesUnavailable"; }))
      << app.process().Output();

  MemShell app2(s.server.dir(), s.Env("shm", token));
  ASSERT_EQ(app2.Do("alloc 0 4").substr(0, 4), "ok 1");
  r = s.Ctl({"tenant", "delete", "bob", "--force"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(app2.Do("alloc 0 1"), "err cudaErrorDevicesUnavailable");
  auto admin = s.Admin();
  auto tenants = admin->ListTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->size(), 1u);
  auto sessions = admin->ListSessions();
  ASSERT_TRUE(sessions.ok());
  EXPECT_TRUE(Eventually([&] { return admin->ListSessions()->empty(); }));
  EXPECT_EQ(s.server.Stop(), 0) << s.server.Log();
}

TEST(Admin, AccessControlPeerCredentialsAndTcpLogin) {
  TenancyServer s;
  TempDir dir;
  std::string token_file = dir.path() + "/admin.token";
  ASSERT_TRUE(s.Start(1, "", {"--admin-listen", "tcp://127.0.0.1:0", "--admin-token-file", token_file}));
  struct stat st;
  ASSERT_EQ(::stat(token_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string log = s.server.Log();
  size_t at = log.find("and tcp://");
  ASSERT_NE(at, std::string::npos) << log;
  std::string url = log.substr(at + 4, log.find(' ', at + 4) - at - 4);

  auto ctl = [&](const std::string& token_file_arg, const std::string& what) {
    std::vector<std::string> argv = {BinDir() + "/remoractl", "--admin", url};
    if (!token_file_arg.empty()) argv.insert(argv.end(), {"--admin-token-file", token_file_arg});
    argv.insert(argv.end(), {"tenant", what});
    if (what == "create") argv.push_back("t");
    return remora::testing::Run(argv);
  };
  RunResult r = ctl(token_file, "create");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = ctl(token_file, "list");
  EXPECT_NE(r.output.find("host-emulated"), std::string::npos) << r.output;
  std::ofstream(dir.path() + "/wrong.token") << "remora1.admin." << std::string(43, 'A') << "\n";
  r = ctl(dir.path() + "/wrong.token", "list");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("wrong admin token"), std::string::npos) << r.output;
  r = ctl("", "list");
  EXPECT_EQ(r.exit_code, 2) << r.output;

  // Another user: the socket's mode stops it; with the mode opened up, the server's
  // peer-credential check still does.
  std::vector<std::string> as_nobody = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                        BinDir() + "/remoractl", "--help"};
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0 || remora::testing::Run(as_nobody).exit_code != 0) {
    std::printf("not checking other users: needs root, setpriv, and a build directory uid 65534 can read\n");
  } else {
    as_nobody.pop_back();
    as_nobody.insert(as_nobody.end(), {"--state-dir", s.server.state_dir(), "tenant", "list"});
    ::chmod(s.server.dir().c_str(), 0755);
    ::chmod(s.server.state_dir().c_str(), 0755);
    r = remora::testing::Run(as_nobody);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("permission denied"), std::string::npos) << r.output;
    ::chmod((s.server.state_dir() + "/admin.sock").c_str(), 0666);
    r = remora::testing::Run(as_nobody);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("closed the admin connection"), std::string::npos) << r.output;
    EXPECT_NE(s.server.Log().find("admin connection from pid"), std::string::npos) << s.server.Log();
  }
  EXPECT_EQ(s.server.Stop(), 0) << s.server.Log();
}

}  // namespace
}  // namespace remora::testing

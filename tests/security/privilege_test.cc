// N10 (docs/SECURITY.md, "The server holds no privilege"): the packaged unit gave the server
// ambient CAP_SETUID, CAP_SETGID, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN and CAP_SETPCAP, so a
// compromised supervisor was root. Now the unit grants it nothing, and a small helper,
// remora-worker-exec (file capabilities CAP_SETUID and CAP_SETGID only, runnable only by the
// server's group), does the one privileged step: becoming remora-worker. The packaged files
// are checked here; the live test runs the server as an unprivileged user with only the
// helper (tests/ops/packages_test.sh checks the installed package's modes and capabilities).
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>

#include <set>

#include "security_support.h"

namespace remora::security {
namespace {

std::string SourceDir() {
  const char* s = std::getenv("REMORA_SOURCE_DIR");
  return s != nullptr ? s : BinDir() + "/../..";
}

// Key=Value lines of a systemd unit, comments and blank lines left out; a key may repeat.
std::multimap<std::string, std::string> UnitSettings(const std::string& text) {
  std::multimap<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line[0] == ';' || line[0] == '[') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    out.emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

std::set<std::string> Words(const std::string& s) {
  std::set<std::string> w;
  std::istringstream in(s);
  for (std::string x; in >> x;) w.insert(x);
  return w;
}

TEST(PackagedUnit, GrantsTheServerNoCapability) {
  std::string text = ReadFile(SourceDir() + "/tools/packaging/remora-server.service");
  ASSERT_FALSE(text.empty()) << "no unit at " << SourceDir();
  auto unit = UnitSettings(text);
  auto one = [&](const std::string& key) {
    auto [b, e] = unit.equal_range(key);
    std::string v;
    for (auto it = b; it != e; ++it) v += (v.empty() ? "" : " ") + it->second;
    return v;
  };
  EXPECT_EQ(one("User"), "remora");
  EXPECT_EQ(Words(one("AmbientCapabilities")), std::set<std::string>{}) << "the server gets capabilities";
  // Only what the helper's file capabilities need to pass the bounding set.
  EXPECT_EQ(Words(one("CapabilityBoundingSet")), (std::set<std::string>{"CAP_SETUID", "CAP_SETGID"}));
  EXPECT_TRUE(Words(one("SupplementaryGroups")).count("remora-worker")) << "module caches are shared through it";
  for (const char* cap : {"CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_CHOWN", "CAP_SETPCAP", "CAP_SYS_ADMIN", "CAP_KILL"})
    for (const auto& [k, v] : unit) EXPECT_EQ(v.find(cap), std::string::npos) << k << "=" << v;
  // The package's maintainer script gives the helper exactly that, and only to group remora.
  std::string postinst = ReadFile(SourceDir() + "/tools/packaging/debian/remora-server/postinst");
  EXPECT_NE(postinst.find("chown root:remora \"$helper\""), std::string::npos) << postinst;
  EXPECT_NE(postinst.find("chmod 0750 \"$helper\""), std::string::npos) << postinst;
  EXPECT_NE(postinst.find("setcap cap_setuid,cap_setgid=ep \"$helper\""), std::string::npos) << postinst;
  EXPECT_NE(postinst.find("helper=/usr/libexec/remora/remora-worker-exec"), std::string::npos) << postinst;
  // The build puts the helper beside the worker, where both the server and the package find it.
  struct stat st;
  EXPECT_EQ(::stat((BinDir() + "/remora-worker-exec").c_str(), &st), 0);
}

// `command` as uid:gid with supplementary `groups`, no capabilities, no no_new_privs.
RunResult RunAsIds(uid_t uid, gid_t gid, const std::string& groups, const std::string& command) {
  return testing::Run({"setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(gid),
                       groups.empty() ? "--clear-groups" : "--groups=" + groups, "--", "/bin/sh", "-c", command},
                      {}, 60);
}

TEST(WorkerConfinement, AServerWithoutPrivilegesStartsWorkersThroughTheHelper) {
  if (!IsRoot()) GTEST_SKIP() << "needs root (to install the helper and start the server as another user)";
  struct passwd* worker_pw = ::getpwnam("remora-worker");
  if (worker_pw == nullptr) GTEST_SKIP() << "no user remora-worker (tools/install-deps.sh creates it)";
  uid_t worker_uid = worker_pw->pw_uid;
  gid_t worker_gid = worker_pw->pw_gid;
  struct passwd* pw = ::getpwnam("nobody");
  ASSERT_NE(pw, nullptr);
  uid_t server_uid = pw->pw_uid;
  gid_t server_gid = pw->pw_gid;
  // The installed layout: server, worker and helper side by side, the helper root:<server's
  // group> 0750 with cap_setuid,cap_setgid=ep (setuid root where this filesystem has no
  // file capabilities, the package's fallback).
  testing::TempDir bin;
  ASSERT_EQ(::chmod(bin.path().c_str(), 0755), 0);
  for (const char* f : {"remora-server", "remora-worker", "remora-worker-exec"}) {
    RunResult cp = testing::Run({"cp", BinDir() + "/" + f, bin.path() + "/" + f});
    ASSERT_EQ(cp.exit_code, 0) << cp.output;
    ASSERT_EQ(::chmod((bin.path() + "/" + f).c_str(), 0755), 0);
  }
  std::string helper = bin.path() + "/remora-worker-exec";
  ASSERT_EQ(::chown(helper.c_str(), 0, server_gid), 0);
  ASSERT_EQ(::chmod(helper.c_str(), 0750), 0);
  RunResult setcap = testing::Run({"setcap", "cap_setuid,cap_setgid=ep", helper});
  bool file_caps = setcap.exit_code == 0;
  if (!file_caps) {
    std::printf("no file capabilities here (%s): the helper is setuid root instead\n", setcap.output.c_str());
    ASSERT_EQ(::chmod(helper.c_str(), 04750), 0);
  }
  ServerOptions o;
  o.launcher = {"setpriv", "--reuid=" + std::to_string(server_uid), "--regid=" + std::to_string(server_gid),
                "--groups=" + std::to_string(worker_gid), "--", "/bin/sh", "-c",
                "shift; exec " + bin.path() + "/remora-server \"$@\"", "sh"};
  TenancyServer s;
  ASSERT_EQ(::chown(s.server.dir().c_str(), server_uid, server_gid), 0);
  o.extra_args = {"--module-cache-dir", s.server.dir() + "/modules", "--module-cache-size", "64MiB"};
  ASSERT_TRUE(s.Start(o));
  pid_t server = s.server.pid();
  EXPECT_EQ(ProcStatus(server, "CapEff:"), "0000000000000000") << "the server holds capabilities";
  EXPECT_EQ(ProcStatus(server, "CapPrm:"), "0000000000000000");
  EXPECT_EQ(ProcStatus(server, "CapAmb:"), "0000000000000000");
  EXPECT_NE(s.server.Log().find("started through " + helper), std::string::npos) << s.server.Log();
  std::string token = s.CreateTenant("alice");
  auto session = RawSession::Open(s.server.Url("shm"), token);
  ASSERT_TRUE(session.ok()) << session.status().ToString() << s.server.Log();
  auto ping = (*session)->Call([](wire::Request::Builder& req) { req.setPing(); });
  ASSERT_TRUE(ping.ok()) << ping.status().ToString();
  auto pids = WorkerPids(s);
  ASSERT_EQ(pids.size(), 1u);
  pid_t w = pids[0];
  std::string uid = ProcStatus(w, "Uid:");
  EXPECT_EQ(uid, fmt::format("{}\t{}\t{}\t{}", worker_uid, worker_uid, worker_uid, worker_uid));
  EXPECT_EQ(ProcStatus(w, "CapEff:"), "0000000000000000");
  EXPECT_EQ(ProcStatus(w, "CapPrm:"), "0000000000000000");
  EXPECT_EQ(ProcStatus(w, "CapInh:"), "0000000000000000");
  EXPECT_EQ(ProcStatus(w, "CapAmb:"), "0000000000000000");
  EXPECT_EQ(ProcStatus(w, "NoNewPrivs:"), "1");
  EXPECT_EQ(ProcStatus(w, "Seccomp:"), "2");
  RunResult read = RunAsIds(worker_uid, worker_gid, "", "cat " + s.server.state_dir() + "/state.db > /dev/null");
  EXPECT_NE(read.exit_code, 0) << "the worker user can read state.db";
  // The tenant's module cache works: the directory stays the server's, shared with the
  // workers through their group, and the server can still trim it.
  std::vector<std::byte> image = FakeFatbin(4096, 3);
  ModuleAnswer m = LoadModule(**session, ModuleHash(image), &image, image.size());
  EXPECT_EQ(m.error, Err::kSuccess) << m.message;
  struct stat st;
  ASSERT_EQ(::stat((s.server.dir() + "/modules/alice").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, server_uid);
  EXPECT_EQ(st.st_gid, worker_gid);
  EXPECT_EQ(st.st_mode & 0777, 0770u);
  int files = 0;
  EXPECT_GT(TreeBytes(s.server.dir() + "/modules/alice", &files), 0u);
  // The server ends a worker it shares no uid with: stopped (it cannot answer), its tenant
  // deleted with --force, it must be killed, through the helper.
  ASSERT_EQ(::kill(w, SIGSTOP), 0);
  RunResult del = s.Ctl({"tenant", "delete", "alice", "--force"});
  EXPECT_EQ(del.exit_code, 0) << del.output << s.server.Log();
  EXPECT_TRUE(Eventually([&] { return ::kill(w, 0) != 0; }, 10000)) << "the stopped worker was not killed";
  // The helper gives its callers the worker user, nothing else: others cannot run it...
  RunResult other = RunAsIds(worker_uid, worker_gid, "", helper + " signal 1 0");
  EXPECT_EQ(other.exit_code, 126) << "the worker user ran the helper: " << other.output;
  // ...and the server's own user signals only processes of the worker user (not this
  // test, a root process), and becomes no other user.
  RunResult root_target = RunAsIds(server_uid, server_gid, std::to_string(worker_gid),
                                   helper + " signal " + std::to_string(::getpid()) + " 0");
  EXPECT_EQ(root_target.exit_code, 3) << root_target.output;
  RunResult as_root = RunAsIds(server_uid, server_gid, std::to_string(worker_gid), helper + " exec --user root -- x");
  EXPECT_EQ(as_root.exit_code, 2) << as_root.output;
  if (file_caps) {
    RunResult caps = testing::Run({"getcap", helper});
    EXPECT_NE(caps.output.find("cap_setgid,cap_setuid=ep"), std::string::npos) << caps.output;
  }
}

}  // namespace
}  // namespace remora::security

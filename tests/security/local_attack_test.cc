// F2, F7, F9, F10, F13 (docs/SECURITY.md): what a local user, or a compromised worker, can
// reach on the server's machine. Real server, real worker processes, real FUSE mount. The
// parts that need root (another uid, a mount) are skipped, saying so, without it.
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <set>

#include "remora/protocol/message.h"
#include "secure/handshake_crypto.h"

#include "security_support.h"

namespace remora::security {
namespace {

// `command` through /bin/sh as `user` (setpriv); needs root.
RunResult RunAs(const std::string& user, const std::string& command, const std::map<std::string, std::string>& env = {}) {
  struct passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr) return RunResult{-1, "no user " + user};
  return testing::Run({"setpriv", "--reuid=" + std::to_string(pw->pw_uid), "--regid=" + std::to_string(pw->pw_gid),
                       "--clear-groups", "--", "/bin/sh", "-c", command},
                      env, 60);
}

bool IsMounted(const std::string& path) {
  std::string mounts = ReadFile("/proc/self/mounts");
  return mounts.find(" " + path + " ") != std::string::npos;
}

// ---- F7: the worker's confinement -----------------------------------------------------

TEST(WorkerConfinement, WorkersRunConfined) {
  ServerOptions o;
  o.env = {{"REMORA_TEST_SECRET", "the-server-environment"}};
  TenancyServer s;
  ASSERT_TRUE(s.Start(o));
  std::string token = s.CreateTenant("alice");
  auto session = RawSession::Open(s.server.Url("shm"), token);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // A reply means the worker serves, which it does only after entering its sandbox (the
  // handshake's answer can come before that: under load the worker was seen unconfined yet).
  auto ping = (*session)->Call([](wire::Request::Builder& req) { req.setPing(); });
  ASSERT_TRUE(ping.ok()) << ping.status().ToString();
  auto pids = WorkerPids(s);
  ASSERT_EQ(pids.size(), 1u);
  pid_t w = pids[0];
  // No capabilities, no way to gain any, a seccomp filter.
  EXPECT_EQ(ProcStatus(w, "CapEff:"), "0000000000000000");
  EXPECT_EQ(ProcStatus(w, "CapPrm:"), "0000000000000000");
  EXPECT_EQ(ProcStatus(w, "CapBnd:"), "0000000000000000");
  EXPECT_EQ(ProcStatus(w, "NoNewPrivs:"), "1");
  EXPECT_EQ(ProcStatus(w, "Seccomp:"), "2");
  // Its own descriptors only: stdio, the client socket, the control socket, its session's
  // counters block, the module cache directory, the shm segment, the compute board (fd 10,
  // server/sched/board.h). The ledger's descriptors are closed after mapping.
  std::set<int> fds;
  DIR* d = ::opendir(("/proc/" + std::to_string(w) + "/fd").c_str());
  ASSERT_NE(d, nullptr);
  while (struct dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') fds.insert(std::atoi(e->d_name));
  ::closedir(d);
  EXPECT_EQ(fds, (std::set<int>{0, 1, 2, 3, 4, 6, 8, 9, 10})) << "the worker has other descriptors";
  // A clean environment.
  std::string env = ReadFile("/proc/" + std::to_string(w) + "/environ");
  EXPECT_EQ(env.find("REMORA_TEST_SECRET"), std::string::npos) << "the worker inherited the server's environment";
  // The ledger: read-only, but one page (its own slot).
  std::string maps = ReadFile("/proc/" + std::to_string(w) + "/maps");
  int writable = 0, readonly = 0;
  std::istringstream lines(maps);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("remora-ledger") == std::string::npos) continue;
    uint64_t lo = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    uint64_t hi = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    std::string perms = line.substr(line.find(' ') + 1, 4);
    if (perms[1] == 'w') {
      writable++;
      EXPECT_EQ(hi - lo, 4096u) << "a writable ledger mapping larger than the worker's slot: " << line;
    } else {
      readonly++;
    }
  }
  EXPECT_EQ(writable, 1) << maps;
  EXPECT_EQ(readonly, 1) << maps;
  if (!IsRoot()) {
    GTEST_LOG_(INFO) << "not root: workers keep the server's uid (checked above: no capabilities, seccomp)";
    return;
  }
  // Another user than the server's, which cannot reach the admin socket.
  std::string uid = ProcStatus(w, "Uid:");
  EXPECT_NE(uid.substr(0, uid.find('\t')), "0") << "the worker runs as root";
  struct passwd* pw = ::getpwnam("remora-worker");
  if (pw != nullptr) {
    EXPECT_EQ(uid.substr(0, uid.find('\t')), std::to_string(pw->pw_uid));
  }
  std::string as = pw != nullptr ? "remora-worker" : "nobody";
  RunResult ctl = RunAs(as, BinDir() + "/remoractl --state-dir " + s.server.state_dir() + " tenant list");
  EXPECT_NE(ctl.exit_code, 0) << ctl.output;
  EXPECT_EQ(ctl.output.find("alice"), std::string::npos) << ctl.output;
}

// (The packaged layout, a server without privileges that starts its workers through
// remora-worker-exec: privilege_test.cc.)

// ---- F2: remorafs --------------------------------------------------------------------

// The review mounted remorafs with -o allow_other; user nobody created and deleted tenants,
// raised a quota and read a fresh token. Now default_permissions is always on and changes
// and token reads are refused to anyone but root and the mounting user.
TEST(RemoraFsAccess, OtherUsersCannotAdministerThroughAllowOther) {
  if (!IsRoot()) GTEST_SKIP() << "needs root (another user, a FUSE mount)";
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no usable /dev/fuse";
  TenancyServer s;
  ASSERT_TRUE(s.Start());
  testing::TempDir dir;
  ::chmod(dir.path().c_str(), 0755);  // nobody must reach the mount point
  std::string mnt = dir.path() + "/mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  testing::BackgroundProcess fs({BinDir() + "/remorafs", "--state-dir", s.server.state_dir(), mnt, "-f", "-o",
                                 "allow_other"},
                                {});
  if (!fs.WaitForOutput("mounted " + mnt, 30)) {
    std::string out = fs.Output();
    if (out.find("not permitted") != std::string::npos || out.find("Permission denied") != std::string::npos)
      GTEST_SKIP() << "mounting is not permitted here: " << out;
    FAIL() << out;
  }
  ASSERT_EQ(::mkdir((mnt + "/tenants/alice").c_str(), 0755), 0);
  RunResult mk = RunAs("nobody", "mkdir " + mnt + "/tenants/mallory");
  RunResult tok = RunAs("nobody", "cat " + mnt + "/tenants/alice/token");
  RunResult raise = RunAs("nobody", "echo 1GiB > " + mnt + "/tenants/alice/memory.max");
  RunResult rm = RunAs("nobody", "rmdir " + mnt + "/tenants/alice");
  RunResult look = RunAs("nobody", "cat " + mnt + "/tenants/alice/memory.current");
  EXPECT_NE(mk.exit_code, 0) << mk.output;
  EXPECT_NE(tok.exit_code, 0) << tok.output;
  EXPECT_EQ(tok.output.find("remora1."), std::string::npos) << "nobody read a token";
  EXPECT_NE(raise.exit_code, 0) << raise.output;
  EXPECT_NE(rm.exit_code, 0) << rm.output;
  EXPECT_EQ(look.exit_code, 0) << "reading what is world-readable still works: " << look.output;
  RunResult list = s.Ctl({"--json", "tenant", "list"});
  EXPECT_EQ(list.output.find("mallory"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("\"name\":\"alice\""), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("\"memory_limit\":null"), std::string::npos) << list.output;
  // The administrator still gets the token (once).
  EXPECT_EQ(ReadFile(mnt + "/tenants/alice/token").rfind("remora1.alice.", 0), 0u);
  testing::Run({"fusermount3", "-u", mnt}, {}, 30);
  if (IsMounted(mnt)) testing::Run({"fusermount3", "-uz", mnt}, {}, 30);
  fs.Kill(SIGTERM);
  fs.Wait(10);
}

// ---- F9: remora-run's private server and --auth none ----------------------------------

// The review: `remora-run --transport tcp` served every local user without a token. Its
// private server now requires a one-off token only its user can read; and remora-server
// refuses --auth none on a network listener unless told --insecure.
TEST(PrivateServer, RemoraRunOverTcpServesOnlyItsUser) {
  testing::BackgroundProcess run({BinDir() + "/remora-run", "--transport", "tcp", "--backend", "host", "--", "/bin/sh",
                                  "-c", "echo URL=$REMORA_SERVER TOKEN_FILE=$REMORA_TOKEN_FILE; sleep 30"},
                                 {});
  ASSERT_TRUE(run.WaitForOutput("TOKEN_FILE=", 30)) << run.Output();
  std::string out = run.Output();
  std::string url = out.substr(out.find("URL=") + 4);
  url = url.substr(0, url.find(' '));
  std::string token_file = out.substr(out.find("TOKEN_FILE=") + 11);
  token_file = token_file.substr(0, token_file.find('\n'));
  ASSERT_EQ(url.rfind("tcp://127.0.0.1:", 0), 0u) << out;
  struct stat st;
  ASSERT_EQ(::stat(token_file.c_str(), &st), 0) << token_file;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Without the token: refused.
  auto env = testing::ShimEnv(url);
  RunResult intruder = testing::Run({BinDir() + "/app_device_info"}, env, 60);
  EXPECT_NE(intruder.exit_code, 0) << intruder.output;
  EXPECT_NE(intruder.output.find("requires a tenant token"), std::string::npos) << intruder.output;
  if (IsRoot()) {
    RunResult other = RunAs("nobody", "cat " + token_file);
    EXPECT_NE(other.exit_code, 0) << "another user read the private token: " << other.output;
  }
  // With it, the user's own program works.
  env["REMORA_TOKEN_FILE"] = token_file;
  RunResult own = testing::Run({BinDir() + "/app_device_info"}, env, 60);
  EXPECT_EQ(own.exit_code, 0) << own.output;
  run.Kill(SIGTERM);
  run.Wait(20);
  // remora-server itself: --auth none on tcp without --insecure does not start.
  testing::TempDir dir;
  RunResult refused = testing::Run({BinDir() + "/remora-server", "--listen", "tcp://127.0.0.1:0", "--state-dir",
                                    dir.path() + "/state", "--backend", "host", "--auth", "none"},
                                   {}, 30);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--insecure"), std::string::npos) << refused.output;
}

// ---- F10: log and terminal injection --------------------------------------------------

// A client's handshake over TCP with identity fields of its choosing (a hostile client, not
// the shim); returns the authenticated socket, or an invalid Fd.
Fd HandshakeAs(uint16_t port, const std::string& token_text, const std::string& host, const std::string& program,
               const std::string& user) {
  auto token = ParseToken(token_text);
  if (!token.ok()) return Fd();
  Fd fd = TcpConnectForTest(port);
  FrameSocket fs(fd.get());
  handshake::KeyExchange kx;
  ScratchMessage hm;
  auto h = hm.InitRoot<wire::HandshakeMessage>().initHello();
  h.setProtocolVersion(wire::PROTOCOL_VERSION);
  h.setTenant(token->tenant);
  Nonce cn = RandomNonce();
  h.setClientNonce(capnp::Data::Reader(cn.data(), cn.size()));
  h.setKeyShare(capnp::Data::Reader(kx.share.data(), kx.share.size()));
  auto id = h.initClient();
  id.setHostname(host);
  id.setProgram(program);
  id.setUser(user);
  id.setPid(4242);
  auto hflat = hm.Flatten();
  std::vector<uint64_t> hello(hflat.begin(), hflat.end());
  OutFrame f;
  f.kind = FrameKind::kHandshake;
  f.body = hello;
  if (!fs.Write(f).ok()) return Fd();
  auto ch = fs.Read(5000);
  if (!ch.ok()) return Fd();
  std::vector<uint64_t> challenge(ch->body.begin(), ch->body.end());
  std::array<uint8_t, handshake::kShareBytes> share{};
  Status st = GuardDecode("challenge", [&]() -> Status {
    BodyReader r(challenge);
    auto m = r.Root<wire::HandshakeMessage>();
    if (!m.isChallenge()) return Error(Err::kNoDevice, "refused");
    std::memcpy(share.data(), m.getChallenge().getKeyShare().begin(), share.size());
    return Status::Ok();
  });
  handshake::Derived d;
  if (!st.ok() || !handshake::Derive(kx, share, hello, challenge, &d)) return Fd();
  Key proof = ClientProof(token->secret, handshake::AuthMessage(token->tenant, d.binding));
  auto sealed = handshake::SealProof(proof, d.proof_key);
  ScratchMessage pm;
  pm.InitRoot<wire::HandshakeMessage>().initProof().setSealedProof(capnp::Data::Reader(sealed.data(), sealed.size()));
  f.body = pm.Flatten();
  if (!fs.Write(f).ok()) return Fd();
  auto answer = fs.Read(5000);
  if (!answer.ok()) return Fd();
  bool welcome = false;
  (void)GuardDecode("answer", [&]() -> Status {
    BodyReader r(answer->body);
    welcome = r.Root<wire::HandshakeMessage>().isWelcome();
    return Status::Ok();
  });
  return welcome ? std::move(fd) : Fd();
}

// The review forged a whole log line through the Hello's hostname and cleared the admin's
// terminal through the program name. Every peer byte is now escaped in logs and tables, and
// identity fields are at most 64 bytes.
TEST(Injection, PeerStringsReachNoLogOrTerminalRaw) {
  TenancyServer s;
  ASSERT_TRUE(s.Start());
  std::string token = s.CreateTenant("alice");
  uint16_t port = ParseEndpoint(s.server.Url("tcp"))->port;
  const std::string forged = "05:00:00.000000 I [remora-server 1] tenant 'root' created";
  Fd session = HandshakeAs(port, token, "laptop\n" + forged, "\x1b[2J\x1b[31mPWNED\x1b[0m", "root\r");
  ASSERT_TRUE(session.valid()) << s.server.Log();
  ASSERT_TRUE(Eventually([&] { return !WorkerPids(s).empty(); }, 10000));
  RunResult table = s.Ctl({"session", "list"});
  EXPECT_EQ(table.exit_code, 0) << table.output;
  EXPECT_EQ(table.output.find('\x1b'), std::string::npos) << "an escape sequence reached the terminal";
  EXPECT_EQ(table.output.find('\r'), std::string::npos);
  EXPECT_NE(table.output.find("\\x1b[2J"), std::string::npos) << table.output;
  // A wrong token: the refusal logs the (hostile) identity too.
  std::string wrong = "remora1.alice.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
  EXPECT_FALSE(HandshakeAs(port, wrong, "host\n" + forged, "p", "u").valid());
  ASSERT_TRUE(Eventually([&] { return s.server.Log().find("wrong token") != std::string::npos; }));
  std::string log = s.server.Log();
  EXPECT_EQ(log.find("\n" + forged), std::string::npos) << "a peer started a log line:\n" << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos);
  EXPECT_NE(log.find("\\x0a05:00:00"), std::string::npos) << log;
  // Oversized fields and a tenant name of control bytes: refused, one short log line each.
  size_t before = log.size();
  EXPECT_FALSE(HandshakeAs(port, token, std::string(65, 'h'), "p", "u").valid());
  Fd fd = TcpConnectForTest(port);
  FrameSocket fs(fd.get());
  ScratchMessage msg;
  auto hello = msg.InitRoot<wire::HandshakeMessage>().initHello();
  hello.setProtocolVersion(wire::PROTOCOL_VERSION);
  hello.setTenant(std::string(3000, '\n'));
  OutFrame f;
  f.kind = FrameKind::kHandshake;
  f.body = msg.Flatten();
  ASSERT_TRUE(fs.Write(f).ok());
  EXPECT_TRUE(fs.Read(5000).ok());
  ASSERT_TRUE(Eventually([&] { return s.server.Log().find("tenant name must be") != std::string::npos; }));
  std::string added = s.server.Log().substr(before);
  std::istringstream lines(added);
  int refusals = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("refused") == std::string::npos) continue;
    refusals++;
    EXPECT_LT(line.size(), 600u) << line;
  }
  EXPECT_EQ(refusals, 2) << added;
  EXPECT_NE(added.find("client hostname of 65 bytes"), std::string::npos) << added;
}

// ---- F13: files, sockets and the state directory ----------------------------------------

TEST(Hygiene, TokenFilesSocketsAndTheStateDirectory) {
  testing::TempDir dir;
  // The admin token file: a symbolic link, or readable by others, stops the server.
  std::string real = dir.path() + "/real.token", link = dir.path() + "/link.token";
  std::ofstream(real) << "remora1.admin.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n";
  ::chmod(real.c_str(), 0600);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  for (const std::string& file : {link, real}) {
    if (file == real) ::chmod(real.c_str(), 0644);
    RunResult r = testing::Run({BinDir() + "/remora-server", "--listen", "shm://" + dir.path() + "/x.sock", "--state-dir",
                                dir.path() + "/state", "--backend", "host", "--admin-listen", "tcp://127.0.0.1:0",
                                "--admin-token-file", file},
                               {}, 30);
    EXPECT_NE(r.exit_code, 0) << file;
    EXPECT_NE(r.output.find(file == link ? "symbolic links are refused" : "accessible to other users"), std::string::npos)
        << r.output;
  }
  // The shim refuses a token file that is a symbolic link.
  TenancyServer s;
  std::string state = dir.path() + "/state2";
  ASSERT_EQ(::mkdir(state.c_str(), 0755), 0);  // too open: fixed at start
  ASSERT_TRUE(s.Start(1, state));
  struct stat st;
  ASSERT_EQ(::stat(state.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the state directory keeps a loose mode";
  ASSERT_EQ(::stat(s.server.Url("shm").substr(6).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u) << "with --auth token the shm socket is 0666, set explicitly";
  std::string token = s.CreateTenant("alice");
  std::string tf = dir.path() + "/alice.token", tl = dir.path() + "/alice.link";
  std::ofstream(tf) << token << "\n";
  ::chmod(tf.c_str(), 0600);
  ::symlink(tf.c_str(), tl.c_str());
  auto env = testing::ShimEnv(s.server.Url("shm"));
  env["REMORA_TOKEN_FILE"] = tl;
  RunResult r = testing::Run({BinDir() + "/app_device_info"}, env, 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("symbolic link"), std::string::npos) << r.output;
  env["REMORA_TOKEN_FILE"] = tf;
  EXPECT_EQ(testing::Run({BinDir() + "/app_device_info"}, env, 60).exit_code, 0);
  // A file in the socket's place that is not a stale socket of ours is never replaced.
  std::string taken = dir.path() + "/taken.sock";
  std::ofstream(taken) << "not a socket";
  RunResult busy = testing::Run({BinDir() + "/remora-server", "--listen", "shm://" + taken, "--state-dir",
                                 dir.path() + "/state3", "--backend", "host"},
                                {}, 30);
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_EQ(ReadFile(taken), "not a socket");
  // Without authentication the socket is private (0600).
  testing::ServerProcess open;
  ASSERT_TRUE(open.Start());
  ASSERT_EQ(::stat(open.Url("shm").substr(6).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace remora::security

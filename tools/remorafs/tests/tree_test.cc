// remorafs's tree model against an in-memory AdminClient that answers like the server
// (its error codes included): paths, contents, writes, errno mapping, the one-time token.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>

#include "tree.h"

namespace remora::fs {
namespace {

using admin::GpuInfo;
using admin::SessionInfo;
using admin::TenantInfo;

constexpr uint64_t kMiB = 1 << 20;

// The server's behaviour as far as the tree sees it. `down` makes every call fail as a lost
// connection does.
class FakeAdmin final : public admin::AdminClient {
 public:
  FakeAdmin() {
    gpus = {{0, "Host GPU 0", "GPU-aaaa", "0000:00:00.0", 4096 * kMiB, 0, {}},
            {1, "Host GPU 1", "GPU-bbbb", "0000:00:01.0", 4096 * kMiB, 0, {}}};
  }

  Result<admin::ServerInfo> Info() override {
    RETURN_IF_ERROR(Down());
    return admin::ServerInfo{};
  }
  Result<std::string> CreateTenant(const std::string& name, std::optional<uint64_t> limit,
                                   std::optional<std::vector<int>> g) override {
    RETURN_IF_ERROR(Down());
    if (name.empty() || name.find_first_of(" /ABC") != std::string::npos)
      return Status(Err::kInvalidValue, "invalid tenant name");
    if (Find(name)) return Status(Err::kInvalidValue, "tenant '" + name + "' already exists");
    TenantInfo t;
    t.name = name;
    t.memory_limit = limit;
    t.gpus = g.value_or(std::vector<int>{0, 1});
    tenants.push_back(t);
    return "remora1." + name + ".secret" + std::to_string(++created);
  }
  Result<std::vector<TenantInfo>> ListTenants() override {
    RETURN_IF_ERROR(Down());
    return tenants;
  }
  Status SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) override {
    RETURN_IF_ERROR(Down());
    TenantInfo* t = Find(name);
    if (!t) return NoTenant(name);
    t->memory_limit = limit;
    return Status::Ok();
  }
  Status SetCompute(const std::string& name, const sched::ComputeSettings& settings) override {
    RETURN_IF_ERROR(Down());
    TenantInfo* t = Find(name);
    if (!t) return NoTenant(name);
    t->compute = settings;
    return Status::Ok();
  }
  Status DeleteTenant(const std::string& name, bool force) override {
    RETURN_IF_ERROR(Down());
    TenantInfo* t = Find(name);
    if (!t) return NoTenant(name);
    if (t->sessions > 0 && !force) return Status(Err::kNotPermitted, "tenant has running sessions");
    std::erase_if(tenants, [&](const TenantInfo& x) { return x.name == name; });
    return Status::Ok();
  }
  Result<std::vector<GpuInfo>> ListGpus() override {
    RETURN_IF_ERROR(Down());
    return gpus;
  }
  Status Attach(const std::string& name, int gpu) override {
    RETURN_IF_ERROR(Down());
    TenantInfo* t = Find(name);
    if (!t) return NoTenant(name);
    if (gpu < 0 || gpu >= static_cast<int>(gpus.size())) return Status(Err::kInvalidValue, "no such GPU");
    if (std::find(t->gpus.begin(), t->gpus.end(), gpu) == t->gpus.end()) t->gpus.push_back(gpu);
    std::sort(t->gpus.begin(), t->gpus.end());
    return Status::Ok();
  }
  Status Detach(const std::string& name, int gpu) override {
    RETURN_IF_ERROR(Down());
    TenantInfo* t = Find(name);
    if (!t) return NoTenant(name);
    auto it = std::find(t->gpus.begin(), t->gpus.end(), gpu);
    if (it == t->gpus.end()) return Status(Err::kInvalidValue, "GPU not attached");
    t->gpus.erase(it);
    return Status::Ok();
  }
  Result<std::vector<SessionInfo>> ListSessions() override {
    RETURN_IF_ERROR(Down());
    return sessions;
  }
  Status KillSession(uint64_t, const std::string&) override { return Status(Err::kNotSupported, "not here"); }

  Result<admin::PoolInfo> Pool() override {
    RETURN_IF_ERROR(Down());
    if (!pool) return Status(Err::kNotSupported, "this Remora server is not part of a pool");
    return *pool;
  }

  TenantInfo* Find(const std::string& name) {
    auto it = std::find_if(tenants.begin(), tenants.end(), [&](const TenantInfo& t) { return t.name == name; });
    return it == tenants.end() ? nullptr : &*it;
  }

  std::vector<TenantInfo> tenants;
  std::vector<GpuInfo> gpus;
  std::vector<SessionInfo> sessions;
  std::optional<admin::PoolInfo> pool;  // set: a server of a pool
  std::atomic<bool> down{false};
  int created = 0;

 private:
  Status Down() const {
    return down ? Status(Err::kDevicesUnavailable, "the server closed the admin connection") : Status::Ok();
  }
  static Status NoTenant(const std::string& name) { return Status(Err::kInvalidValue, "no such tenant '" + name + "'"); }
};

class TreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TenantInfo a;
    a.name = "alice";
    a.memory_limit = 512 * kMiB;
    a.memory_used = 3 * kMiB;
    a.refused = 2;
    a.sessions = 1;
    a.gpus = {0, 1};
    fake.tenants.push_back(a);
    TenantInfo b;
    b.name = "bob";
    b.gpus = {1};
    fake.tenants.push_back(b);
    fake.sessions.push_back({7, "alice", 4242, "client-host", "root", "app", "shm", "", 1700000000, 3 * kMiB, 99, "shared-memory"});
  }

  // The contents an open for reading serves, or "<errno N>".
  std::string Read(const std::string& path) {
    auto r = tree.Open(path, true, false);
    return r.ok() ? r.value.contents : "<errno " + std::to_string(r.status.err) + ">";
  }
  int Errno(const FsStatus& st) { return st.err; }
  std::vector<std::string> List(const std::string& path) {
    auto r = tree.List(path);
    EXPECT_TRUE(r.ok()) << path << ": " << r.status.message;
    return r.value;
  }

  FakeAdmin fake;
  Tree tree{fake};
};

using Names = std::vector<std::string>;

TEST_F(TreeTest, DirectoriesListWhatTheServerHas) {
  EXPECT_EQ(List("/"), (Names{"gpus", "tenants"}));
  EXPECT_EQ(List("/gpus"), (Names{"0", "1"}));
  EXPECT_EQ(List("/gpus/1"), (Names{"compute.enforced", "memory.total", "memory.used", "name", "tenants", "uuid"}));
  EXPECT_EQ(List("/tenants"), (Names{"alice", "bob"}));
  EXPECT_EQ(List("/tenants/alice"), (Names{"compute.max", "compute.priority", "compute.stat", "compute.weight", "gpus",
                                           "memory.current", "memory.events", "memory.max", "sessions"}));
  EXPECT_EQ(List("/tenants/alice/sessions"), (Names{"7"}));
  EXPECT_EQ(List("/tenants/bob/sessions"), Names{});
  EXPECT_EQ(List("/tenants/alice/sessions/7"),
            (Names{"compute.stat", "host", "memory.current", "pid", "started", "transport"}));
  EXPECT_EQ(tree.List("/tenants/alice/memory.max").status.err, ENOTDIR);
}

TEST_F(TreeTest, FilesEndWithANewline) {
  fake.gpus[1].tenants = {"alice", "bob"};
  fake.gpus[1].used = 5 * kMiB;
  EXPECT_EQ(Read("/gpus/1/name"), "Host GPU 1\n");
  EXPECT_EQ(Read("/gpus/1/uuid"), "GPU-bbbb\n");
  EXPECT_EQ(Read("/gpus/1/memory.total"), std::to_string(4096 * kMiB) + "\n");
  EXPECT_EQ(Read("/gpus/1/memory.used"), std::to_string(5 * kMiB) + "\n");
  EXPECT_EQ(Read("/gpus/1/tenants"), "alice\nbob\n");
  EXPECT_EQ(Read("/tenants/alice/memory.max"), std::to_string(512 * kMiB) + "\n");
  EXPECT_EQ(Read("/tenants/bob/memory.max"), "max\n");
  EXPECT_EQ(Read("/tenants/alice/memory.current"), std::to_string(3 * kMiB) + "\n");
  EXPECT_EQ(Read("/tenants/alice/memory.events"), "max 2\n");
  EXPECT_EQ(Read("/tenants/alice/gpus"), "0\n1\n");
  EXPECT_EQ(Read("/tenants/alice/sessions/7/pid"), "4242\n");
  EXPECT_EQ(Read("/tenants/alice/sessions/7/host"), "client-host\n");
  EXPECT_EQ(Read("/tenants/alice/sessions/7/transport"), "shm\n");
  EXPECT_EQ(Read("/tenants/alice/sessions/7/memory.current"), std::to_string(3 * kMiB) + "\n");
  EXPECT_EQ(Read("/tenants/alice/sessions/7/started"), "1700000000\n");
  auto node = tree.Stat("/tenants/alice/memory.events");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node.value.size, 6u);
  EXPECT_EQ(node.value.mode, 0444u);
  EXPECT_FALSE(node.value.dir);
  EXPECT_EQ(tree.Stat("/tenants/alice/memory.max").value.mode, 0644u);
  EXPECT_EQ(tree.Stat("/tenants/alice/gpus").value.mode, 0644u);
  EXPECT_TRUE(tree.Stat("/tenants/alice/sessions").value.dir);
}

// Compute shares read and write like cgroup v2's cpu.weight and cpu.max.
TEST_F(TreeTest, ComputeFilesAreCgroupShaped) {
  EXPECT_EQ(Read("/tenants/alice/compute.weight"), "100\n");
  EXPECT_EQ(Read("/tenants/alice/compute.max"), "max 100000\n");
  EXPECT_EQ(Read("/tenants/alice/compute.priority"), "normal\n");
  EXPECT_EQ(tree.Stat("/tenants/alice/compute.weight").value.mode, 0644u);
  EXPECT_EQ(tree.Stat("/tenants/alice/compute.stat").value.mode, 0444u);
  EXPECT_TRUE(tree.Write("/tenants/alice/compute.weight", "30%\n", 0).ok());
  EXPECT_EQ(fake.tenants[0].compute.weight, std::optional<uint32_t>(3000));
  EXPECT_TRUE(tree.Write("/tenants/alice/compute.weight", "250", 0).ok());
  EXPECT_EQ(Read("/tenants/alice/compute.weight"), "250\n");
  EXPECT_TRUE(tree.Write("/tenants/alice/compute.max", "50000 100000\n", 0).ok());
  EXPECT_EQ(Read("/tenants/alice/compute.max"), "50000 100000\n");
  EXPECT_EQ(fake.tenants[0].compute.weight, std::optional<uint32_t>(250)) << "the other settings stay";
  EXPECT_TRUE(tree.Write("/tenants/alice/compute.priority", "high\n", 0).ok());
  EXPECT_EQ(fake.tenants[0].compute.priority, sched::Priority::kHigh);
  for (const auto& [file, bad] : std::vector<std::pair<std::string, std::string>>{
           {"compute.weight", "0"}, {"compute.weight", "20000"}, {"compute.weight", "lots"},
           {"compute.max", "200000 100000"}, {"compute.max", "max 1"}, {"compute.priority", "urgent"}}) {
    FsStatus st = tree.Write("/tenants/alice/" + file, bad, 0);
    EXPECT_EQ(st.err, EINVAL) << file << " <- " << bad;
    EXPECT_EQ(st.message.find('\n'), std::string::npos) << st.message;
  }
  EXPECT_EQ(fake.tenants[0].compute.max, (std::optional<sched::ComputeMax>(sched::ComputeMax{50000, 100000})));
  EXPECT_TRUE(tree.Write("/tenants/alice/compute.max", "max", 0).ok());
  EXPECT_FALSE(fake.tenants[0].compute.max.has_value());
  EXPECT_EQ(tree.Write("/tenants/nobody/compute.weight", "50%", 0).err, ENOENT);
  EXPECT_EQ(tree.Write("/tenants/alice/compute.stat", "0", 0).err, EACCES);

  fake.tenants[0].gpu_time_ns = 2'500'000'000;
  fake.tenants[0].usage = {{0, 0, 0, 2'000'000'000}, {1, 0, 0, 500'000'000}};
  EXPECT_EQ(Read("/tenants/alice/compute.stat"), "usage_usec 2500000\ngpu0.usage_usec 2000000\ngpu1.usage_usec 500000\n");
  fake.sessions[0].gpu_time_ns = 7'000'000;
  EXPECT_EQ(Read("/tenants/alice/sessions/7/compute.stat"), "usage_usec 7000\n");
  fake.gpus[0].compute_enforced = true;
  EXPECT_EQ(Read("/gpus/0/compute.enforced"), "1\n");
  EXPECT_EQ(Read("/gpus/1/compute.enforced"), "0\n");
  fake.down = true;
  EXPECT_EQ(tree.Write("/tenants/alice/compute.weight", "50%", 0).err, EIO);
}

TEST_F(TreeTest, ASnapshotDoesNotChangeWithTheServer) {
  auto open = tree.Open("/tenants/alice/memory.current", true, false);
  ASSERT_TRUE(open.ok());
  fake.tenants[0].memory_used = 0;
  EXPECT_EQ(open.value.contents, std::to_string(3 * kMiB) + "\n");
  EXPECT_EQ(open.value.node.size, open.value.contents.size());
  EXPECT_EQ(Read("/tenants/alice/memory.current"), "0\n");
}

TEST_F(TreeTest, MemoryMaxTakesBytesSizesAndMax) {
  const std::string path = "/tenants/alice/memory.max";
  struct Case {
    std::string text;
    std::optional<uint64_t> limit;
  };
  for (const Case& c : {Case{"64M\n", 64 * kMiB}, Case{"8G", 8192 * kMiB}, Case{"1.5GiB\n", 1536 * kMiB},
                        Case{"512M", 512 * kMiB}, Case{"1048576\n", kMiB}, Case{"max\n", std::nullopt}}) {
    EXPECT_TRUE(tree.Write(path, c.text, 0).ok()) << c.text;
    EXPECT_EQ(fake.tenants[0].memory_limit, c.limit) << c.text;
  }
  EXPECT_EQ(Read(path), "max\n");
  fake.tenants[0].memory_limit = kMiB;
  for (const std::string bad : {"lots\n", "-1\n", "12 parsecs", "", "\n", "1.5"}) {
    FsStatus st = tree.Write(path, bad, 0);
    EXPECT_EQ(st.err, EINVAL) << "'" << bad << "'";
    EXPECT_FALSE(st.message.empty());
    EXPECT_EQ(st.message.find('\n'), std::string::npos) << st.message;
  }
  EXPECT_EQ(fake.tenants[0].memory_limit, std::optional<uint64_t>(kMiB)) << "a refused value changes nothing";
  FsStatus partial = tree.Write(path, "4M\n", 2);
  EXPECT_EQ(partial.err, EINVAL);
  EXPECT_NE(partial.message.find("offset 2"), std::string::npos) << partial.message;
  EXPECT_EQ(tree.Write(path, std::string(5000, '1'), 0).err, EINVAL);
  EXPECT_EQ(fake.tenants[0].memory_limit, std::optional<uint64_t>(kMiB));
}

TEST_F(TreeTest, GpusAttachAndDetach) {
  const std::string path = "/tenants/bob/gpus";
  EXPECT_TRUE(tree.Write(path, "+0\n", 0).ok());
  EXPECT_EQ(Read(path), "0\n1\n");
  EXPECT_TRUE(tree.Write(path, "-1", 0).ok());
  EXPECT_EQ(Read(path), "0\n");
  EXPECT_TRUE(tree.Write(path, "+1 -0\n", 0).ok());
  EXPECT_EQ(Read(path), "1\n");
  for (const std::string bad : {"1\n", "+\n", "+x", "*0", "+01", "\n", "+1 0"}) EXPECT_EQ(tree.Write(path, bad, 0).err, EINVAL) << bad;
  EXPECT_EQ(Read(path), "1\n") << "a malformed write changes nothing, even in part";
  FsStatus st = tree.Write(path, "+7\n", 0);  // the server refuses: no such GPU
  EXPECT_EQ(st.err, EINVAL);
  EXPECT_NE(st.message.find("no such GPU"), std::string::npos) << st.message;
  EXPECT_EQ(tree.Write(path, "-0\n", 0).err, EINVAL);  // not attached
}

TEST_F(TreeTest, MissingThingsAreENOENT) {
  for (const std::string p : {"/nothing", "/tenants/carol", "/tenants/carol/memory.max", "/tenants/alice/nothing",
                              "/tenants/alice/memory.max/x", "/gpus/2", "/gpus/01", "/gpus/x", "/gpus/0/nothing",
                              "/tenants/alice/sessions/8", "/tenants/bob/sessions/7", "/tenants/alice/sessions/7/x",
                              "/tenants/alice/token"})
    EXPECT_EQ(tree.Stat(p).status.err, ENOENT) << p;
  // The tenant went away between lookup and write: the server says "invalid", the tree ENOENT.
  fake.tenants.erase(fake.tenants.begin() + 1);
  EXPECT_EQ(tree.Write("/tenants/bob/memory.max", "1G", 0).err, ENOENT);
  EXPECT_EQ(tree.Write("/tenants/bob/gpus", "+0", 0).err, ENOENT);
  EXPECT_EQ(tree.Rmdir("/tenants/bob").err, ENOENT);
}

TEST_F(TreeTest, WhatCannotBeWritten) {
  EXPECT_EQ(tree.Open("/tenants/alice/memory.current", false, true).status.err, EACCES);
  EXPECT_EQ(tree.Open("/gpus/0/name", true, true).status.err, EACCES);
  EXPECT_EQ(tree.Open("/tenants/alice", true, false).status.err, EISDIR);
  EXPECT_EQ(tree.Write("/tenants/alice/memory.events", "max 0", 0).err, EACCES);
  EXPECT_TRUE(tree.Open("/tenants/alice/memory.max", false, true).ok());
  EXPECT_TRUE(tree.Truncate("/tenants/alice/memory.max", 0).ok());
  EXPECT_EQ(tree.Truncate("/tenants/alice/memory.max", 3).err, EINVAL);
  EXPECT_EQ(tree.Truncate("/tenants/alice/memory.current", 0).err, EACCES);
  EXPECT_EQ(tree.Mkdir("/gpus/2").err, EPERM);
  EXPECT_EQ(tree.Mkdir("/tenants/alice/sub").err, EPERM);
  EXPECT_EQ(tree.Rmdir("/gpus/0").err, EPERM);
  EXPECT_EQ(tree.Rmdir("/tenants/alice/memory.max").err, ENOTDIR);
}

TEST_F(TreeTest, MkdirCreatesATenantWhoseTokenIsReadableOnce) {
  ASSERT_TRUE(tree.Mkdir("/tenants/carol").ok());
  ASSERT_NE(fake.Find("carol"), nullptr);
  EXPECT_EQ(fake.Find("carol")->memory_limit, std::nullopt);
  EXPECT_EQ(Read("/tenants/carol/memory.max"), "max\n");
  EXPECT_EQ(List("/tenants/carol").back(), "token");
  auto node = tree.Stat("/tenants/carol/token");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node.value.mode, 0400u);
  EXPECT_EQ(tree.Open("/tenants/carol/token", true, true).status.err, EACCES) << "refused, and not consumed";
  EXPECT_TRUE(tree.Stat("/tenants/carol/token").ok());
  EXPECT_EQ(Read("/tenants/carol/token"), "remora1.carol.secret1\n");
  // Taken: not listed, cannot be opened again; stat (fstat of the open file) still finds it
  // until that open is released.
  EXPECT_EQ(List("/tenants/carol").back(), "sessions");
  EXPECT_EQ(Read("/tenants/carol/token"), "<errno " + std::to_string(ENOENT) + ">");
  EXPECT_TRUE(tree.Stat("/tenants/carol/token").ok());
  tree.Release("/tenants/carol/token");
  EXPECT_EQ(tree.Stat("/tenants/carol/token").status.err, ENOENT);
  EXPECT_EQ(Read("/tenants/carol/token"), "<errno " + std::to_string(ENOENT) + ">");

  EXPECT_EQ(tree.Mkdir("/tenants/Bad Name").err, EINVAL);
  EXPECT_EQ(tree.Mkdir("/tenants/carol").err, EEXIST);
  // A token nobody read goes with its tenant, also when someone else deleted it.
  ASSERT_TRUE(tree.Mkdir("/tenants/dave").ok());
  ASSERT_TRUE(fake.DeleteTenant("dave", false).ok());
  EXPECT_EQ(tree.Stat("/tenants/dave").status.err, ENOENT);
  ASSERT_TRUE(fake.CreateTenant("dave", std::nullopt, std::nullopt).ok());
  EXPECT_EQ(tree.Stat("/tenants/dave/token").status.err, ENOENT) << "the old token must not be shown for a new tenant";
  ASSERT_TRUE(tree.Mkdir("/tenants/erin").ok());
  ASSERT_TRUE(tree.Rmdir("/tenants/erin").ok());
  ASSERT_TRUE(fake.CreateTenant("erin", std::nullopt, std::nullopt).ok());
  EXPECT_EQ(tree.Stat("/tenants/erin/token").status.err, ENOENT);
  // Releasing an old open of a token does not take the token of a tenant created again.
  ASSERT_TRUE(tree.Mkdir("/tenants/fred").ok());
  EXPECT_EQ(Read("/tenants/fred/token"), "remora1.fred.secret6\n");
  ASSERT_TRUE(tree.Rmdir("/tenants/fred").ok());
  ASSERT_TRUE(tree.Mkdir("/tenants/fred").ok());
  tree.Release("/tenants/fred/token");
  EXPECT_EQ(Read("/tenants/fred/token"), "remora1.fred.secret7\n");
}

TEST_F(TreeTest, OneOfTwoConcurrentOpensGetsTheToken) {
  for (int round = 0; round < 50; round++) {
    std::string name = "t" + std::to_string(round);
    ASSERT_TRUE(tree.Mkdir("/tenants/" + name).ok());
    std::atomic<int> got{0};
    auto open = [&] {
      if (tree.Open("/tenants/" + name + "/token", true, false).ok()) got++;
    };
    std::thread a(open), b(open);
    a.join();
    b.join();
    EXPECT_EQ(got.load(), 1);
  }
}

TEST_F(TreeTest, RmdirDeletesATenantWithoutSessions) {
  FsStatus busy = tree.Rmdir("/tenants/alice");
  EXPECT_EQ(busy.err, EBUSY);
  EXPECT_NE(busy.message.find("running sessions"), std::string::npos) << busy.message;
  EXPECT_NE(fake.Find("alice"), nullptr);
  EXPECT_TRUE(tree.Rmdir("/tenants/bob").ok());
  EXPECT_EQ(fake.Find("bob"), nullptr);
  EXPECT_EQ(List("/tenants"), Names{"alice"});
}

TEST_F(TreeTest, ALostServerIsEIO) {
  fake.down = true;
  for (const std::string p : {"/gpus/0", "/tenants/alice", "/tenants/alice/memory.max", "/tenants/alice/sessions/7"})
    EXPECT_EQ(tree.Stat(p).status.err, EIO) << p;
  EXPECT_EQ(tree.List("/tenants").status.err, EIO);
  EXPECT_EQ(tree.Write("/tenants/alice/memory.max", "1G", 0).err, EIO);
  EXPECT_EQ(tree.Mkdir("/tenants/x").err, EIO);
  EXPECT_EQ(tree.Rmdir("/tenants/bob").err, EIO);
  FsStatus st = tree.List("/gpus").status;
  EXPECT_NE(st.message.find("closed the admin connection"), std::string::npos) << st.message;
  // The fixed part of the tree still answers: the mount point can be listed and unmounted.
  EXPECT_TRUE(tree.Stat("/").ok());
  EXPECT_TRUE(tree.Stat("/tenants").ok());
  EXPECT_TRUE(tree.Stat("/gpus").ok());
}

// Names and values a local user writes come back in error messages (the daemon's log) on one
// line, control characters escaped (found by fuzz target `remorafs_path`).
TEST_F(TreeTest, ErrorMessagesAreOneLineWhateverTheUserWrote) {
  for (const FsStatus& st : {tree.Mkdir("/tenants/Bad\nname\x1b[2J"), tree.Write("/tenants/alice/gpus", "+0\r\n+x\x07", 0),
                             tree.Write("/tenants/alice/memory.max", "12\nlines", 0),
                             // the server's "no such tenant '...'" quotes the name as written
                             tree.Rmdir(std::string("/tenants/x\ny\0", 13))}) {
    EXPECT_NE(st.err, 0);
    EXPECT_EQ(st.message.find_first_of("\n\r\x1b\x07"), std::string::npos) << st.message;
  }
}

TEST(ErrnoFor, MapsTheServersCodesLikeCgroupfs) {
  EXPECT_EQ(ErrnoFor(Status::Ok()), 0);
  EXPECT_EQ(ErrnoFor(Status(Err::kInvalidValue, "")), EINVAL);
  EXPECT_EQ(ErrnoFor(Status(Err::kNotPermitted, "")), EBUSY);
  EXPECT_EQ(ErrnoFor(Status(Err::kDevicesUnavailable, "")), EIO);
  EXPECT_EQ(ErrnoFor(Status(Err::kTimeout, "")), EIO);
  EXPECT_EQ(ErrnoFor(Status(Err::kUnknown, "")), EIO);
}

}  // namespace
}  // namespace remora::fs

namespace remora::fs {
namespace {

// A pool's server shows the pool: its servers, GPUs (a gone one apart) and totals, its tenants.
TEST_F(TreeTest, APoolsServerShowsThePool) {
  EXPECT_EQ(tree.Stat("/pool").status.err, ENOENT) << "not a pool's server";
  admin::PoolInfo p;
  p.servers = {{"s1", {"tcp://a:7070"}, "host-emulated", true, "0.1", "ok", 0, 0, 2, 10},
               {"s2", {"tcp://b:7070"}, "host-emulated", true, "0.1", "ok", 0, 0, 0, 10}};
  p.gpus = {{"s1", 0, "GPU-a", "Host GPU 0", 1024 * kMiB, 96 * kMiB, {"alice"}, false},
            {"s2", 0, "GPU-b", "Host GPU 0", 1024 * kMiB, 0, {"alice"}, false},
            {"s3", 0, "GPU-c", "", 0, 0, {"alice"}, true}};
  admin::PoolTenantInfo t;
  t.name = "alice";
  t.pool_limit = 128 * kMiB;
  t.used = 96 * kMiB;
  t.shares = 100 * kMiB;
  t.sessions = 2;
  t.gpus = 3;
  p.tenants = {t};
  p.assignments = {{"alice", "s1", 0, "GPU-a", false}, {"alice", "s2", 0, "GPU-b", false}, {"alice", "s3", 0, "GPU-c", true}};
  fake.pool = p;
  EXPECT_EQ(List("/"), (Names{"gpus", "pool", "tenants"}));
  EXPECT_EQ(List("/pool"), (Names{"status", "tenants"}));
  std::string status = Read("/pool/status");
  EXPECT_NE(status.find("server s1 health ok sessions 2 url tcp://a:7070\n"), std::string::npos) << status;
  EXPECT_NE(status.find("gpu s3:0 gone"), std::string::npos) << status;
  EXPECT_NE(status.find("total servers 2 gpus 2 gone 1 memory.total 2147483648 memory.used 100663296 tenants 1\n"),
            std::string::npos)
      << status;
  EXPECT_EQ(Read("/pool/tenants"), "alice pool.max 134217728 shares 104857600 memory.current 100663296 sessions 2 gpus "
                                   "s1:0,s2:0,s3:0\n");
  EXPECT_EQ(tree.Open("/pool/status", false, true).status.err, EACCES) << "read-only";
  EXPECT_EQ(tree.Stat("/pool/other").status.err, ENOENT);
}

}  // namespace
}  // namespace remora::fs

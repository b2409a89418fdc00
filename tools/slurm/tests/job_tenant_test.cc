// remora-slurm's logic without Slurm: tenant names, GPU choice, the token file's ownership
// and mode, the config file, and SetUpJob/TearDownJob against a fake admin API (the real
// server and Slurm are in tests/ops/slurm_test.sh).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "config.h"
#include "job_tenant.h"

namespace remora::slurm {
namespace {

using admin::GpuInfo;
using admin::TenantInfo;

class FakeAdmin final : public admin::AdminClient {
 public:
  std::vector<GpuInfo> gpus;
  std::vector<TenantInfo> tenants;
  std::vector<std::string> deleted;

  Result<admin::ServerInfo> Info() override { return admin::ServerInfo{}; }
  Result<std::string> CreateTenant(const std::string& name, std::optional<uint64_t> limit,
                                   std::optional<std::vector<int>> g) override {
    for (const auto& t : tenants)
      if (t.name == name) return Status(Err::kInvalidValue, "tenant '" + name + "' already exists");
    TenantInfo t;
    t.name = name;
    t.memory_limit = limit;
    t.gpus = g.value_or(std::vector<int>{});
    tenants.push_back(t);
    return "remora1." + name + ".secret";
  }
  Result<std::vector<TenantInfo>> ListTenants() override { return tenants; }
  Status SetMemoryLimit(const std::string&, std::optional<uint64_t>) override { return Status::Ok(); }
  Status DeleteTenant(const std::string& name, bool force) override {
    EXPECT_TRUE(force) << "a job's tenant is always deleted with its sessions";
    size_t before = tenants.size();
    std::erase_if(tenants, [&](const TenantInfo& t) { return t.name == name; });
    if (tenants.size() == before) return Status(Err::kInvalidValue, "no such tenant '" + name + "'");
    deleted.push_back(name);
    return Status::Ok();
  }
  Result<std::vector<GpuInfo>> ListGpus() override { return gpus; }
  Status Attach(const std::string&, int) override { return Status::Ok(); }
  Status Detach(const std::string&, int) override { return Status::Ok(); }
  Result<std::vector<admin::SessionInfo>> ListSessions() override { return std::vector<admin::SessionInfo>{}; }
  Status KillSession(uint64_t, const std::string&) override { return Status::Ok(); }
};

GpuInfo Gpu(int index, uint64_t used, std::vector<std::string> tenants = {}) {
  GpuInfo g;
  g.index = index;
  g.used = used;
  g.tenants = std::move(tenants);
  return g;
}

class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/remora-slurm-test.XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() { (void)std::system(("rm -rf " + path).c_str()); }
  std::string path;
};

TEST(JobTenant, Names) {
  EXPECT_EQ(TenantName(42, 1, "node7.cluster"), "slurm-42");
  EXPECT_EQ(TenantName(42, 3, "Node7.cluster"), "slurm-42-node7");
  EXPECT_EQ(TenantName(42, 3, "n:1"), "slurm-42-n_1");
  EXPECT_LE(TenantName(4294967295u, 2, std::string(100, 'a')).size(), 63u);
  EXPECT_TRUE(IsJobTenant("slurm-42", 42));
  EXPECT_TRUE(IsJobTenant("slurm-42-node7", 42));
  EXPECT_FALSE(IsJobTenant("slurm-421", 42));
  EXPECT_FALSE(IsJobTenant("alice", 42));
}

TEST(JobTenant, ChoosesTheLeastLoadedGpus) {
  std::vector<GpuInfo> g = {Gpu(0, 100), Gpu(1, 0, {"a", "b"}), Gpu(2, 0, {"a"}), Gpu(3, 50)};
  EXPECT_EQ(*ChooseGpus(g, 1), std::vector<int>({2}));
  EXPECT_EQ(*ChooseGpus(g, 2), std::vector<int>({1, 2}));
  EXPECT_EQ(*ChooseGpus(g, 3), std::vector<int>({1, 2, 3}));
  EXPECT_EQ(ChooseGpus(g, 5).status().code(), Err::kInvalidValue);
  EXPECT_EQ(ChooseGpus(g, 0).status().code(), Err::kInvalidValue);
}

TEST(JobTenant, TokenFileBelongsToTheJobsUserOnly) {
  TempDir d;
  std::string dir = d.path + "/tokens";
  ASSERT_TRUE(WriteTokenFile(dir, 7, "remora1.slurm-7.s", 65534, 65534).ok());
  struct stat st;
  ASSERT_EQ(::stat((dir + "/job-7.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0400u);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);
  std::ifstream in(dir + "/job-7.token");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "remora1.slurm-7.s");
  EXPECT_EQ(::access((dir + "/job-7.token.tmp").c_str(), F_OK), -1);
  // Written again (a requeued job): replaced, not appended.
  ASSERT_TRUE(WriteTokenFile(dir, 7, "remora1.slurm-7.t", 65534, 65534).ok());
  std::ifstream again(dir + "/job-7.token");
  std::getline(again, line);
  EXPECT_EQ(line, "remora1.slurm-7.t");
}

TEST(JobTenant, RefusesADirectoryOthersCanWrite) {
  TempDir d;
  ASSERT_EQ(::chmod(d.path.c_str(), 0777), 0);
  Status st = WriteTokenFile(d.path, 1, "t", 0, 0);
  EXPECT_EQ(st.code(), Err::kNotPermitted) << st.ToString();
  ASSERT_EQ(::symlink("/tmp", (d.path + "/link").c_str()), 0);
  ASSERT_EQ(::chmod(d.path.c_str(), 0755), 0);
  EXPECT_FALSE(WriteTokenFile(d.path + "/link", 1, "t", 0, 0).ok()) << "a symlinked token_dir is refused";
}

// A tenant with nothing but a name, attached to GPU 0.
TenantInfo TenantOnGpu0(const std::string& name) {
  TenantInfo t;
  t.name = name;
  t.gpus = {0};
  return t;
}

TEST(JobTenant, SetUpAndTearDown) {
  TempDir d;
  FakeAdmin admin;
  admin.gpus = {Gpu(0, 10), Gpu(1, 0)};
  admin.tenants.push_back(TenantOnGpu0("slurm-9"));  // a leftover of a requeued job
  admin.tenants.push_back(TenantOnGpu0("alice"));
  JobRequest job;
  job.job_id = 9;
  job.uid = ::getuid();
  job.gid = ::getgid();
  job.memory = 1ull << 30;
  job.gpus = 1;
  auto name = SetUpJob(admin, job, d.path);
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_EQ(*name, "slurm-9");
  EXPECT_EQ(admin.deleted, std::vector<std::string>({"slurm-9"}));
  ASSERT_EQ(admin.tenants.size(), 2u);
  EXPECT_EQ(admin.tenants[1].name, "slurm-9");
  EXPECT_EQ(admin.tenants[1].memory_limit, std::optional<uint64_t>(1ull << 30));
  EXPECT_EQ(admin.tenants[1].gpus, std::vector<int>({1}));
  EXPECT_EQ(::access((d.path + "/job-9.token").c_str(), R_OK), 0);

  admin.tenants.push_back(TenantOnGpu0("slurm-9-other"));
  auto removed = TearDownJob(admin, 9, d.path);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, std::vector<std::string>({"slurm-9", "slurm-9-other"}));
  ASSERT_EQ(admin.tenants.size(), 1u);
  EXPECT_EQ(admin.tenants[0].name, "alice");
  EXPECT_EQ(::access((d.path + "/job-9.token").c_str(), F_OK), -1);
  // Nothing left: a second epilog (the controller's after the node's) succeeds quietly.
  removed = TearDownJob(admin, 9, d.path);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());
}

TEST(JobTenant, NothingIsLeftWhenTheTokenCannotBeWritten) {
  TempDir d;
  ASSERT_EQ(::chmod(d.path.c_str(), 0777), 0);  // refused by WriteTokenFile
  FakeAdmin admin;
  admin.gpus = {Gpu(0, 0)};
  JobRequest job;
  job.job_id = 3;
  EXPECT_FALSE(SetUpJob(admin, job, d.path).ok());
  EXPECT_TRUE(admin.tenants.empty()) << "the tenant is rolled back";
  job.gpus = 2;
  ASSERT_EQ(::chmod(d.path.c_str(), 0755), 0);
  EXPECT_EQ(SetUpJob(admin, job, d.path).status().code(), Err::kInvalidValue) << "more GPUs than the server has";
  EXPECT_TRUE(admin.tenants.empty());
}

TEST(Config, ParsesAndRejects) {
  auto c = ParseConfig("# Remora\nserver = tcp://gpu1:7070\nadmin=tcp://gpu1:7071  # admin API\n"
                       "admin_token_file = /etc/remora/admin.token\nshim = /usr/lib/x/libremora.so\n"
                       "default_gpus = 2\ndefault_memory = 8GiB\n",
                       "t");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server, "tcp://gpu1:7070");
  EXPECT_EQ(c->admin, "tcp://gpu1:7071");
  EXPECT_EQ(c->token_dir, "/run/remora-slurm");
  EXPECT_EQ(c->default_gpus, 2);
  EXPECT_EQ(c->default_memory, std::optional<uint64_t>(8ull << 30));
  EXPECT_FALSE(ParseConfig("state_dir = /var/lib/remora\nsever = x\n", "t").ok()) << "a typo is an error";
  EXPECT_FALSE(ParseConfig("server = x\n", "t").ok()) << "no admin access";
  EXPECT_FALSE(ParseConfig("admin = tcp://a:1\nstate_dir = /x\n", "t").ok()) << "both";
  EXPECT_FALSE(ParseConfig("state_dir = /x\ndefault_gpus = lots\n", "t").ok());
  EXPECT_FALSE(ParseConfig("state_dir = /x\ntoken_dir = relative\n", "t").ok());
  auto e = ParseConfig("state_dir = /x\njust words\n", "f.conf");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("f.conf:2"), std::string::npos) << e.status().message();
}

// N11 (docs/SECURITY.md): a job chose its own quota, `unlimited` included. The
// administrator's caps now bound what a job gets, and no limit at all is refused by default.
TEST(Config, CapsBoundWhatAJobMayAskFor) {
  auto c = ParseConfig("state_dir = /x\nmax_memory = 16GiB\nmax_gpus = 2\n", "t");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->max_memory, std::optional<uint64_t>(16ull << 30));
  EXPECT_EQ(c->max_gpus, std::optional<int>(2));
  EXPECT_TRUE(CheckJobRequest(*c, 16ull << 30, 2).ok());
  Status more = CheckJobRequest(*c, (16ull << 30) + 1, 1);
  EXPECT_EQ(more.code(), Err::kNotPermitted);
  EXPECT_NE(more.message().find("max_memory"), std::string::npos) << more.message();
  Status gpus = CheckJobRequest(*c, 1ull << 30, 3);
  EXPECT_EQ(gpus.code(), Err::kNotPermitted);
  EXPECT_NE(gpus.message().find("max_gpus"), std::string::npos) << gpus.message();
  EXPECT_EQ(CheckJobRequest(*c, std::nullopt, 1).code(), Err::kNotPermitted) << "unlimited past a max_memory";
  // A job that gives no --remora-mem gets default_memory, else the cap.
  EXPECT_EQ(JobMemory(*c, std::nullopt), std::optional<uint64_t>(16ull << 30));
  EXPECT_EQ(JobMemory(*c, std::optional<uint64_t>(1024)), std::optional<uint64_t>(1024));
  EXPECT_EQ(JobMemory(*c, std::optional<uint64_t>()), std::nullopt) << "--remora-mem=unlimited asks for no limit";
  // Without caps, still no unlimited quota unless the administrator says so.
  auto plain = ParseConfig("state_dir = /x\n", "t");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(JobMemory(*plain, std::nullopt), std::nullopt);
  EXPECT_EQ(CheckJobRequest(*plain, std::nullopt, 1).code(), Err::kNotPermitted);
  EXPECT_TRUE(CheckJobRequest(*plain, 1ull << 40, 64).ok());
  auto permissive = ParseConfig("state_dir = /x\nallow_unlimited = yes\n", "t");
  ASSERT_TRUE(permissive.ok());
  EXPECT_TRUE(CheckJobRequest(*permissive, std::nullopt, 1).ok());
  // Contradictions are configuration errors.
  EXPECT_FALSE(ParseConfig("state_dir = /x\nmax_memory = 1GiB\ndefault_memory = 2GiB\n", "t").ok());
  EXPECT_FALSE(ParseConfig("state_dir = /x\nmax_gpus = 1\ndefault_gpus = 2\n", "t").ok());
  EXPECT_FALSE(ParseConfig("state_dir = /x\nmax_memory = 1GiB\nallow_unlimited = yes\n", "t").ok());
  EXPECT_FALSE(ParseConfig("state_dir = /x\nmax_memory = unlimited\n", "t").ok());
  EXPECT_FALSE(ParseConfig("state_dir = /x\nallow_unlimited = maybe\n", "t").ok());
}

}  // namespace
}  // namespace remora::slurm

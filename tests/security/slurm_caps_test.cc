// N11 (docs/SECURITY.md, "Slurm jobs get what the administrator allows"): any Slurm user
// chose its job's quota, `unlimited` included (spank_remora.c passed it on; remora-slurm
// created the tenant with it). Now the administrator's caps in /etc/remora/slurm.conf bound
// it. The real remora-slurm prolog (what slurmd runs as root) against a real server; the
// SPANK plugin's refusal at submission is in tests/ops/slurm_test.sh.
#include "security_support.h"

namespace remora::security {
namespace {

class SlurmCaps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "needs root (remora-slurm hands the job's token file to the job's user)";
    ASSERT_TRUE(s_.Start(2));
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  }
  std::string Config(const std::string& caps) {
    std::string path = dir_.path() + "/slurm" + std::to_string(++configs_) + ".conf";
    std::ofstream(path) << "state_dir = " << s_.server.state_dir() << "\ntoken_dir = " << dir_.path()
                        << "/tokens\n" << caps;
    return path;
  }
  // remora-slurm prolog for job `job` of user nobody (as slurmd runs it).
  RunResult Prolog(const std::string& config, int job, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinDir() + "/remora-slurm", "--config", config, "prolog", "--job",
                                     std::to_string(job), "--uid", "65534", "--gid", "65534"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::Run(argv, {}, 60);
  }
  // The tenant's memory limit as remoractl --json shows it ("" if there is no such tenant;
  // "null" if unlimited).
  std::string Limit(const std::string& tenant) {
    RunResult r = s_.Ctl({"--json", "tenant", "list"});
    size_t at = r.output.find("\"name\":\"" + tenant + "\"");
    return at == std::string::npos ? "" : JsonField(r.output, "memory_limit", at);
  }

  TenancyServer s_;
  testing::TempDir dir_;
  int configs_ = 0;
};

TEST_F(SlurmCaps, AJobCannotChooseItsOwnQuota) {
  std::string capped = Config("max_memory = 256MiB\nmax_gpus = 1\n");
  RunResult unlimited = Prolog(capped, 41, {"--memory", "unlimited"});
  EXPECT_EQ(unlimited.exit_code, 1) << unlimited.output;
  EXPECT_NE(unlimited.output.find("max_memory"), std::string::npos) << unlimited.output;
  RunResult big = Prolog(capped, 42, {"--memory", "1GiB"});
  EXPECT_EQ(big.exit_code, 1) << big.output;
  EXPECT_NE(big.output.find("at most 256 MiB"), std::string::npos) << big.output;
  RunResult gpus = Prolog(capped, 43, {"--memory", "128MiB", "--gpus", "2"});
  EXPECT_EQ(gpus.exit_code, 1) << gpus.output;
  EXPECT_NE(gpus.output.find("max_gpus"), std::string::npos) << gpus.output;
  for (const char* t : {"slurm-41", "slurm-42", "slurm-43"}) EXPECT_EQ(Limit(t), "") << t << " was created";
  // Within the caps: what was asked for; nothing asked for: the cap.
  RunResult within = Prolog(capped, 44, {"--memory", "128MiB"});
  EXPECT_EQ(within.exit_code, 0) << within.output;
  EXPECT_EQ(Limit("slurm-44"), "134217728");
  RunResult plain = Prolog(capped, 45, {});
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(Limit("slurm-45"), "268435456");
  // Without caps, still no unlimited quota unless the administrator allows it.
  RunResult refused = Prolog(Config(""), 46, {"--memory", "unlimited"});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("allow_unlimited"), std::string::npos) << refused.output;
  EXPECT_EQ(Limit("slurm-46"), "");
  RunResult allowed = Prolog(Config("allow_unlimited = yes\n"), 47, {"--memory", "unlimited"});
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_EQ(Limit("slurm-47"), "null");
}

}  // namespace
}  // namespace remora::security

// remora-slurm: creates and removes the Remora tenant of a Slurm job (see job_tenant.h).
//
//   remora-slurm [--config FILE] prolog --job ID --uid UID --gid GID [--nodes N] [--memory SIZE] [--gpus N]
//   remora-slurm [--config FILE] epilog --job ID
//   remora-slurm                      (as Slurm's Prolog, Epilog or EpilogSlurmctld program)
//
// The SPANK plugin (spank_remora.c) runs the first two from slurmd's job prolog and epilog.
// Run with no subcommand, it acts on Slurm's environment (SLURM_SCRIPT_CONTEXT, SLURM_JOB_ID,
// ... and the SPANK_REMORA_MEM / SPANK_REMORA_GPUS the plugin sets for the job), so
// slurm.conf can name it as EpilogSlurmctld: slurmctld runs that for every job that ends,
// also when its node failed and no node epilog ran. A job that asked for no Remora GPUs is
// left alone. Messages go to stderr (Slurm's logs); exit status 0 on success, 1 on failure,
// 2 on a usage error.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "config.h"
#include "job_tenant.h"
#include "remora/base/util.h"

namespace remora::slurm {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

Result<std::unique_ptr<admin::AdminClient>> ConnectAdmin(const Config& c) {
  ASSIGN_OR_RETURN(admin::ConnectOptions o, admin::ConnectOptionsFrom(c.state_dir, c.admin, c.admin_token_file));
  return admin::AdminClient::Connect(o);
}

int Fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "remora-slurm: %s: %s\n", what.c_str(), st.message().c_str());
  return 1;
}

int Prolog(const Config& c, JobRequest job, const std::string& memory_arg) {
  std::optional<std::optional<uint64_t>> requested;
  if (!memory_arg.empty()) {
    auto m = ParseSize(memory_arg);
    if (!m.ok()) return Fail(fmt::format("job {}: --remora-mem={}", job.job_id, memory_arg), m.status());
    requested = *m;
  }
  job.memory = JobMemory(c, requested);
  // The administrator's caps: a job never chooses more than slurm.conf allows.
  if (Status st = CheckJobRequest(c, job.memory, job.gpus); !st.ok())
    return Fail(fmt::format("job {}: refused", job.job_id), st);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  job.node_name = host;
  job.pool = c.server.rfind("pool://", 0) == 0;
  auto admin = ConnectAdmin(c);
  if (!admin.ok()) return Fail(fmt::format("job {}: the Remora server", job.job_id), admin.status());
  auto name = SetUpJob(**admin, job, c.token_dir);
  if (!name.ok()) return Fail(fmt::format("job {}: cannot create its Remora tenant", job.job_id), name.status());
  std::fprintf(stderr, "remora-slurm: job %u: tenant '%s' (memory limit %s per GPU, %d GPU(s)%s), token in %s\n",
               job.job_id, name->c_str(), job.memory ? FormatSize(*job.memory).c_str() : "unlimited", job.gpus,
               job.pool ? " placed across the pool" : "", TokenFilePath(c.token_dir, job.job_id).c_str());
  return 0;
}

int Epilog(const Config& c, uint32_t job_id) {
  auto admin = ConnectAdmin(c);
  if (!admin.ok()) return Fail(fmt::format("job {}: the Remora server", job_id), admin.status());
  auto removed = TearDownJob(**admin, job_id, c.token_dir);
  if (!removed.ok()) return Fail(fmt::format("job {}: cannot remove its Remora tenant", job_id), removed.status());
  for (const auto& n : *removed)
    std::fprintf(stderr, "remora-slurm: job %u: tenant '%s' removed, its sessions ended\n", job_id, n.c_str());
  return 0;
}

// As a Slurm Prolog/Epilog/EpilogSlurmctld program: everything comes from the environment.
int FromSlurmEnvironment(const Config& c) {
  const char* context = Env("SLURM_SCRIPT_CONTEXT");
  const char* id = Env("SLURM_JOB_ID");
  if (context == nullptr || id == nullptr) {
    std::fprintf(stderr, "remora-slurm: give a subcommand (prolog or epilog); see --help\n");
    return 2;
  }
  const char* mem = Env("SPANK_REMORA_MEM");
  const char* gpus = Env("SPANK_REMORA_GPUS");
  if (mem == nullptr && gpus == nullptr) return 0;  // not a Remora job
  uint32_t job_id = static_cast<uint32_t>(std::strtoul(id, nullptr, 10));
  std::string ctx = context;
  if (ctx == "prolog_slurmd") {
    JobRequest job;
    job.job_id = job_id;
    job.uid = static_cast<uid_t>(std::strtoul(Env("SLURM_JOB_UID") ? Env("SLURM_JOB_UID") : "0", nullptr, 10));
    job.gid = static_cast<gid_t>(std::strtoul(Env("SLURM_JOB_GID") ? Env("SLURM_JOB_GID") : "0", nullptr, 10));
    job.nodes = static_cast<uint32_t>(std::strtoul(Env("SLURM_JOB_NUM_NODES") ? Env("SLURM_JOB_NUM_NODES") : "1", nullptr, 10));
    job.gpus = gpus ? std::atoi(gpus) : c.default_gpus;
    return Prolog(c, job, mem ? mem : "");
  }
  if (ctx == "epilog_slurmd" || ctx == "epilog_slurmctld") return Epilog(c, job_id);
  return 0;  // other contexts (prolog_slurmctld): nothing to do
}

}  // namespace
}  // namespace remora::slurm

int main(int argc, char** argv) {
  using namespace remora::slurm;
  CLI::App app{"remora-slurm: the Remora tenant of a Slurm job (run by the SPANK plugin or as a Slurm prolog/epilog)"};
  std::string config_path = kDefaultConfigPath, memory;
  JobRequest job;
  long uid = -1, gid = -1;
  app.add_option("--config", config_path, "the Remora side of the cluster (default /etc/remora/slurm.conf)");
  auto* prolog = app.add_subcommand("prolog", "create the job's tenant and write its token file");
  prolog->add_option("--job", job.job_id, "Slurm job id")->required();
  prolog->add_option("--uid", uid, "the job's user")->required()->check(CLI::Range(0L, 4294967294L));
  prolog->add_option("--gid", gid, "the job's group")->required()->check(CLI::Range(0L, 4294967294L));
  prolog->add_option("--nodes", job.nodes, "nodes of the job")->check(CLI::Range(1, 1 << 20));
  prolog->add_option("--memory", memory, "memory limit per GPU, e.g. 16GiB (default: the config's default_memory)");
  auto* gpus_opt = prolog->add_option("--gpus", job.gpus, "Remora GPUs from the pool")->check(CLI::Range(1, 1024));
  auto* epilog = app.add_subcommand("epilog", "remove the job's tenants and token file");
  uint32_t epilog_job = 0;
  epilog->add_option("--job", epilog_job, "Slurm job id")->required();
  app.require_subcommand(0, 1);
  CLI11_PARSE(app, argc, argv);

  auto config = LoadConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "remora-slurm: %s\n", config.status().message().c_str());
    return 1;
  }
  if (*prolog) {
    job.uid = static_cast<uid_t>(uid);
    job.gid = static_cast<gid_t>(gid);
    if (gpus_opt->count() == 0) job.gpus = config->default_gpus;
    return Prolog(*config, job, memory);
  }
  if (*epilog) return Epilog(*config, epilog_job);
  return FromSlurmEnvironment(*config);
}

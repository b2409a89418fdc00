// One Slurm job's Remora tenant: created by the job's prolog on each of its nodes, removed
// by its epilogs (the node's, and slurmctld's, which also runs when the node failed).
//
// Naming: a job on one node gets the tenant "slurm-<jobid>"; a job on several nodes gets one
// per node, "slurm-<jobid>-<node>" (each node has its own token file, and the limit applies
// per node like Slurm's --mem). Removal takes every tenant of the job, so the controller
// needs no node list. The token goes to <token_dir>/job-<jobid>.token, owned by the job's
// user, mode 0400, in a root-owned directory that only root can write.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "admin_client.h"
#include "remora/base/status.h"

namespace remora::slurm {

struct JobRequest {
  uint32_t job_id = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  uint32_t nodes = 1;
  std::string node_name;              // this node (used when nodes > 1)
  std::optional<uint64_t> memory;     // per GPU; nullopt = unlimited
  int gpus = 1;
  // The jobs reach a pool of servers (REMORA_SERVER=pool://...): the tenant is made in the
  // pool and its GPUs placed across the pool's servers, least loaded first.
  bool pool = false;
};

std::string TenantName(uint32_t job_id, uint32_t nodes, const std::string& node_name);
bool IsJobTenant(const std::string& tenant, uint32_t job_id);
std::string TokenFilePath(const std::string& token_dir, uint32_t job_id);

// The `count` GPUs that carry the least: least memory in use, then fewest tenants, then
// lowest index. kInvalidValue if the server has fewer.
Result<std::vector<int>> ChooseGpus(const std::vector<admin::GpuInfo>& gpus, int count);

// Writes `token` for the job's user, atomically (a temporary file renamed into place),
// never following a symlink. Creates token_dir (0755) if missing and refuses one that
// others could write into.
Status WriteTokenFile(const std::string& token_dir, uint32_t job_id, const std::string& token, uid_t uid, gid_t gid);

// Creates the job's tenant (replacing a leftover of the same job, e.g. after a requeue) and
// writes its token file; on failure nothing is left behind. Returns the tenant's name. With
// job.pool, `admin` is any server of the pool and the GPUs come from the whole pool.
Result<std::string> SetUpJob(admin::AdminClient& admin, const JobRequest& job, const std::string& token_dir);

// Removes every tenant of the job (ending their sessions, so their memory returns) and the
// token file on this node. Returns the names removed.
Result<std::vector<std::string>> TearDownJob(admin::AdminClient& admin, uint32_t job_id, const std::string& token_dir);

}  // namespace remora::slurm

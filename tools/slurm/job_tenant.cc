#include "job_tenant.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "remora/base/fd.h"
#include "remora/base/util.h"

namespace remora::slurm {

std::string TenantName(uint32_t job_id, uint32_t nodes, const std::string& node_name) {
  std::string name = fmt::format("slurm-{}", job_id);
  if (nodes <= 1) return name;
  std::string node;
  for (char c : node_name.substr(0, node_name.find('.'))) {  // short host name
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    node += (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ? c : '_';
  }
  if (node.empty()) node = "node";
  return (name + "-" + node).substr(0, 63);
}

bool IsJobTenant(const std::string& tenant, uint32_t job_id) {
  std::string base = fmt::format("slurm-{}", job_id);
  return tenant == base || tenant.rfind(base + "-", 0) == 0;
}

std::string TokenFilePath(const std::string& token_dir, uint32_t job_id) {
  return fmt::format("{}/job-{}.token", token_dir, job_id);
}

Result<std::vector<int>> ChooseGpus(const std::vector<admin::GpuInfo>& gpus, int count) {
  if (count < 1) return Error(Err::kInvalidValue, "a job asks for at least one Remora GPU, not {}", count);
  if (static_cast<size_t>(count) > gpus.size())
    return Error(Err::kInvalidValue, "the job asks for {} Remora GPU(s); the server has {}", count, gpus.size());
  std::vector<const admin::GpuInfo*> order;
  for (const auto& g : gpus) order.push_back(&g);
  std::sort(order.begin(), order.end(), [](const admin::GpuInfo* a, const admin::GpuInfo* b) {
    if (a->used != b->used) return a->used < b->used;
    if (a->tenants.size() != b->tenants.size()) return a->tenants.size() < b->tenants.size();
    return a->index < b->index;
  });
  std::vector<int> chosen;
  for (int i = 0; i < count; i++) chosen.push_back(order[static_cast<size_t>(i)]->index);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

Status WriteTokenFile(const std::string& token_dir, uint32_t job_id, const std::string& token, uid_t uid, gid_t gid) {
  if (::mkdir(token_dir.c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoStatus(Err::kInitializationError, "mkdir(" + token_dir + ")", errno);
  struct stat st;
  if (::lstat(token_dir.c_str(), &st) != 0) return ErrnoStatus(Err::kInitializationError, "stat(" + token_dir + ")", errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
    return Error(Err::kNotPermitted, "{} must be a directory owned by uid {} that no one else can write to", token_dir,
                 ::geteuid());
  std::string path = TokenFilePath(token_dir, job_id), tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
  if (!fd) return ErrnoStatus(Err::kInitializationError, "create " + tmp, errno);
  std::string text = token + "\n";
  bool ok = ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fchown(fd.get(), uid, gid) == 0 && ::fchmod(fd.get(), 0400) == 0 && ::fsync(fd.get()) == 0;
  int err = errno;
  fd.reset();
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(Err::kInitializationError, "write " + path, err);
  }
  return Status::Ok();
}

namespace {

// The pool's way: the tenant in the pool, `job.gpus` GPUs placed across its servers.
Result<std::string> SetUpPoolJob(admin::AdminClient& admin, const JobRequest& job, const std::string& name,
                                 const std::string& token_dir) {
  ASSIGN_OR_RETURN(admin::PoolInfo pool, admin.Pool());
  for (const auto& t : pool.tenants)
    if (t.name == name) RETURN_IF_ERROR(admin.DeleteTenant(name, /*force=*/true));  // a leftover of this job id
  ASSIGN_OR_RETURN(std::string token, admin.CreatePoolTenant(name, job.memory, std::nullopt, std::nullopt));
  admin::PoolPlacement place;
  place.tenant = name;
  place.count = job.gpus;
  auto placed = admin.PoolAttach(place);
  Status st = placed.ok() ? WriteTokenFile(token_dir, job.job_id, token, job.uid, job.gid) : placed.status();
  if (!st.ok()) {
    (void)admin.DeleteTenant(name, /*force=*/true);
    return st;
  }
  return name;
}

}  // namespace

Result<std::string> SetUpJob(admin::AdminClient& admin, const JobRequest& job, const std::string& token_dir) {
  std::string name = TenantName(job.job_id, job.nodes, job.node_name);
  if (job.pool) return SetUpPoolJob(admin, job, name, token_dir);
  ASSIGN_OR_RETURN(std::vector<admin::GpuInfo> gpus, admin.ListGpus());
  ASSIGN_OR_RETURN(std::vector<admin::TenantInfo> tenants, admin.ListTenants());
  for (const auto& t : tenants) {
    if (t.name != name) continue;
    // A leftover of this job id (a requeued job whose epilog did not run): start afresh.
    RETURN_IF_ERROR(admin.DeleteTenant(name, /*force=*/true));
    for (auto& g : gpus) {
      g.tenants.erase(std::remove(g.tenants.begin(), g.tenants.end(), name), g.tenants.end());
      for (const auto& u : t.usage)
        if (u.gpu == g.index) g.used -= std::min(g.used, u.used);
    }
  }
  ASSIGN_OR_RETURN(std::vector<int> chosen, ChooseGpus(gpus, job.gpus));
  ASSIGN_OR_RETURN(std::string token, admin.CreateTenant(name, job.memory, chosen));
  Status st = WriteTokenFile(token_dir, job.job_id, token, job.uid, job.gid);
  if (!st.ok()) {
    (void)admin.DeleteTenant(name, /*force=*/true);
    return st;
  }
  return name;
}

Result<std::vector<std::string>> TearDownJob(admin::AdminClient& admin, uint32_t job_id, const std::string& token_dir) {
  std::vector<std::string> removed;
  ASSIGN_OR_RETURN(std::vector<admin::TenantInfo> tenants, admin.ListTenants());
  Status first_error = Status::Ok();
  for (const auto& t : tenants) {
    if (!IsJobTenant(t.name, job_id)) continue;
    Status st = admin.DeleteTenant(t.name, /*force=*/true);
    if (st.ok()) {
      removed.push_back(t.name);
    } else if (first_error.ok()) {
      // The node's and the controller's epilogs may race: gone is what was wanted.
      ASSIGN_OR_RETURN(std::vector<admin::TenantInfo> now, admin.ListTenants());
      if (std::any_of(now.begin(), now.end(), [&](const admin::TenantInfo& x) { return x.name == t.name; }))
        first_error = st;
    }
  }
  std::string path = TokenFilePath(token_dir, job_id);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT && first_error.ok())
    first_error = ErrnoStatus(Err::kUnknown, "unlink " + path, errno);
  RETURN_IF_ERROR(first_error);
  return removed;
}

}  // namespace remora::slurm

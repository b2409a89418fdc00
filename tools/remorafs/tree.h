// remorafs's tree model: the control plane of one remora-server as a cgroup-style file tree,
// with no FUSE types, so that it can be tested against a fake AdminClient.
//
//   /gpus/<id>/{name,uuid,memory.total,memory.used,tenants,compute.enforced}
//   /tenants/<name>/{memory.max,memory.current,memory.events,gpus,token,
//                    compute.weight,compute.max,compute.priority,compute.stat}
//   /tenants/<name>/sessions/<id>/{pid,host,transport,memory.current,started,compute.stat}
//   /pool/{status,tenants}   (a server of a pool only: the pool's servers, GPUs, totals, tenants)
//
// compute.weight and compute.max read and write what cgroup v2's cpu.weight and cpu.max do
// (a weight 1..10000, "QUOTA PERIOD" or "max PERIOD" in microseconds; a percent like 30% is
// accepted too); compute.stat is "usage_usec N" (GPU time) and per GPU "gpuN.usage_usec N".
//
// Contract:
//  - A thin client of the admin API: every call asks the server (no cache). The only state
//    kept here is the token of each tenant created by Mkdir (the server shows a token only
//    at creation), until its `token` file has been read once: the first open for reading
//    takes it; from then on the file is not listed and cannot be opened, and once that open
//    is released (Release) it does not exist. Until then Stat still finds it, because
//    fstat(2) of the open file reaches FUSE as a stat of its path.
//  - Contents end with a newline. Open takes the snapshot that the open file's reads serve.
//  - Write applies one complete value at offset 0; anything at offset > 0 is EINVAL.
//  - Errors are a positive errno and a one-line message: invalid value EINVAL, missing
//    tenant/GPU/session ENOENT, change refused by the server EBUSY, server lost or not
//    answering EIO, writing a read-only file EACCES, changing the shape of the tree elsewhere
//    than tenants/ EPERM.
//  - Thread-safe (the AdminClient is; the pending tokens are under a mutex). Every method
//    may block on the server, up to the client's timeout.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "admin_client.h"

namespace remora::fs {

struct FsStatus {
  int err = 0;          // 0, or a positive errno
  std::string message;  // one line, for the daemon's log; empty when err == 0
  bool ok() const { return err == 0; }
};

template <typename T>
struct FsResult {
  FsResult(T v) : value(std::move(v)) {}            // NOLINT: implicit by design
  FsResult(FsStatus s) : status(std::move(s)) {}    // NOLINT
  bool ok() const { return status.ok(); }
  T value{};
  FsStatus status;
};

struct Node {
  bool dir = false;
  unsigned mode = 0;  // permission bits: 0755 directories, 0644 writable, 0444 read-only, 0400 token
  uint64_t size = 0;  // files: the length of their contents now
};

class Tree {
 public:
  // `client` must outlive the Tree.
  explicit Tree(admin::AdminClient& client) : client_(client) {}

  // `path` is absolute ("/tenants/alice/memory.max"), as FUSE's high-level API passes it.
  FsResult<Node> Stat(const std::string& path);
  // A directory's entries (without "." and "..").
  FsResult<std::vector<std::string>> List(const std::string& path);
  // Checks access and returns the node and the contents to serve (empty when !read).
  // Opening `token` for reading takes it (see above).
  struct Snapshot {
    Node node;
    std::string contents;
  };
  FsResult<Snapshot> Open(const std::string& path, bool read, bool write);
  // The end of an open that succeeded.
  void Release(const std::string& path);
  FsStatus Write(const std::string& path, std::string_view data, uint64_t offset);
  // O_TRUNC and truncate(2): size 0 of a writable file is accepted (and changes nothing).
  FsStatus Truncate(const std::string& path, uint64_t size);
  // tenants/<name> only: creates the tenant (no memory limit, every GPU) / deletes it.
  FsStatus Mkdir(const std::string& path);
  FsStatus Rmdir(const std::string& path);

 private:
  // A node with its directory entries or its file contents, as the server has them now.
  struct Resolved {
    Node node;
    std::vector<std::string> children;
    std::string contents;
    static Resolved Dir(std::vector<std::string> children) { return {{true, 0755, 0}, std::move(children), {}}; }
    static Resolved File(std::string contents, unsigned mode) {
      Node n{false, mode, contents.size()};
      return {n, {}, std::move(contents)};
    }
  };
  FsResult<Resolved> Resolve(const std::string& path, bool consume_token);
  FsResult<Resolved> ResolveTenant(const std::vector<std::string>& parts, bool consume_token);
  FsResult<Resolved> ResolveGpu(const std::vector<std::string>& parts);
  // pool/{status,tenants}: a pool's servers, GPUs and totals, its tenants (read-only).
  FsResult<Resolved> ResolvePool(const std::vector<std::string>& parts);
  // compute.weight, compute.max or compute.priority of tenant `name` (the rest unchanged).
  FsStatus WriteCompute(const std::string& name, const std::string& file, std::string_view data);
  // The server's refusal of a change to tenant `name`, as an errno (ENOENT if it is gone).
  FsStatus TenantError(const std::string& name, const Status& st, const std::string& what);

  admin::AdminClient& client_;
  std::mutex mu_;
  struct PendingToken {
    std::string token;
    bool taken = false;  // opened for reading, not yet released
  };
  std::map<std::string, PendingToken> tokens_;  // by tenant; under mu_
};

// The errno for a server Status: kInvalidValue EINVAL, kNotPermitted EBUSY, else EIO (the
// connection was lost, a call timed out, or the server failed).
int ErrnoFor(const Status& st);

}  // namespace remora::fs

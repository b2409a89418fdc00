// Fuzz target `remorafs_path`: remorafs's path handling (tools/remorafs/tree.*), the code
// between any local user's file-system calls and the admin API. The Tree runs against an
// in-memory AdminClient that answers as the server does (tenant names are checked with the
// server's own ValidateTenantName; two GPUs; one session of tenant "alice").
//
// Input: ops until the input ends: op byte (% 8: stat, list, open, release, write, truncate,
// mkdir, rmdir), then the path (u16 length + bytes; op bit 7 clear: "/" is put in front, as
// FUSE passes absolute paths), then for write a u16-length value and a u16 offset, for open a
// flags byte (bit 0 read, bit 1 write), for truncate a u16 size.
// Checks besides memory safety: errors are positive errno values with a one-line message;
// every entry a directory lists can be stat'ed; an open file's snapshot is as long as stat
// says the file is.
#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "remora/protocol/auth.h"
#include "tree.h"

namespace remora::fuzz {
namespace {

using admin::GpuInfo;
using admin::SessionInfo;
using admin::TenantInfo;

class FakeAdmin final : public admin::AdminClient {
 public:
  FakeAdmin() {
    gpus_ = {{0, "Remora host-emulated GPU 0", "GPU-00", "0000:80:00.0", 1ull << 30, 0, {"alice"}},
             {1, "Remora host-emulated GPU 1", "GPU-01", "0000:81:00.0", 1ull << 30, 0, {}}};
    TenantInfo alice;
    alice.name = "alice";
    alice.memory_limit = 1ull << 20;
    alice.gpus = {0};
    alice.sessions = 1;
    tenants_.push_back(alice);
    SessionInfo s;
    s.id = 3;
    s.tenant = "alice";
    s.client_pid = 42;
    s.host = "client";
    s.transport = "shm";
    sessions_.push_back(s);
  }
  Result<admin::ServerInfo> Info() override { return admin::ServerInfo{}; }
  Result<std::string> CreateTenant(const std::string& name, std::optional<uint64_t> limit,
                                   std::optional<std::vector<int>> gpus) override {
    RETURN_IF_ERROR(ValidateTenantName(name));
    if (Find(name)) return Status(Err::kInvalidValue, "tenant '" + name + "' already exists");
    TenantInfo t;
    t.name = name;
    t.memory_limit = limit;
    t.gpus = gpus.value_or(std::vector<int>{0, 1});
    tenants_.push_back(t);
    return "remora1." + name + ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
  }
  Result<std::vector<TenantInfo>> ListTenants() override { return tenants_; }
  Status SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) override {
    TenantInfo* t = Find(name);
    if (!t) return Status(Err::kInvalidValue, "no tenant '" + name + "'");
    t->memory_limit = limit;
    return Status::Ok();
  }
  Status DeleteTenant(const std::string& name, bool force) override {
    TenantInfo* t = Find(name);
    if (!t) return Status(Err::kInvalidValue, "no tenant '" + name + "'");
    if (t->sessions > 0 && !force) return Status(Err::kNotPermitted, "tenant has running sessions");
    std::erase_if(tenants_, [&](const TenantInfo& x) { return x.name == name; });
    return Status::Ok();
  }
  Result<std::vector<GpuInfo>> ListGpus() override { return gpus_; }
  Status Attach(const std::string& name, int gpu) override {
    TenantInfo* t = Find(name);
    if (!t) return Status(Err::kInvalidValue, "no tenant '" + name + "'");
    if (gpu < 0 || gpu >= static_cast<int>(gpus_.size())) return Status(Err::kInvalidValue, "no such GPU");
    if (std::find(t->gpus.begin(), t->gpus.end(), gpu) == t->gpus.end()) t->gpus.push_back(gpu);
    std::sort(t->gpus.begin(), t->gpus.end());
    return Status::Ok();
  }
  Status Detach(const std::string& name, int gpu) override {
    TenantInfo* t = Find(name);
    if (!t) return Status(Err::kInvalidValue, "no tenant '" + name + "'");
    std::erase(t->gpus, gpu);
    return Status::Ok();
  }
  Result<std::vector<SessionInfo>> ListSessions() override { return sessions_; }
  Status KillSession(uint64_t id, const std::string&) override {
    auto n = std::erase_if(sessions_, [&](const SessionInfo& s) { return s.id == id; });
    return n ? Status::Ok() : Status(Err::kInvalidValue, "no such session");
  }

 private:
  TenantInfo* Find(const std::string& name) {
    for (TenantInfo& t : tenants_)
      if (t.name == name) return &t;
    return nullptr;
  }
  std::vector<GpuInfo> gpus_;
  std::vector<TenantInfo> tenants_;
  std::vector<SessionInfo> sessions_;
};

void CheckStatus(const fs::FsStatus& st, const char* op, const std::string& path) {
  if (st.err < 0) Finding("negative errno", std::string(op) + " " + path);
  if (st.err != 0 && (st.message.empty() || st.message.find('\n') != std::string::npos))
    Finding("an error without a one-line message", std::string(op) + " " + path + ": " + st.message);
}

void Run(FuzzInput& in) {
  FakeAdmin admin;
  fs::Tree tree(admin);
  for (int ops = 0; !in.empty() && ops < 64; ops++) {
    uint8_t op = in.Byte();
    std::string path = in.String();
    if (!(op & 0x80)) path = "/" + path;
    switch (op % 8) {
      case 0: {
        auto r = tree.Stat(path);
        CheckStatus(r.status, "stat", path);
        break;
      }
      case 1: {
        auto r = tree.List(path);
        CheckStatus(r.status, "list", path);
        if (!r.ok()) break;
        for (const std::string& child : r.value) {
          if (child.empty() || child.find('/') != std::string::npos) Finding("a listed name is empty or has a slash", child);
          if (child == "token") continue;  // read once: may vanish meanwhile by design
          std::string p = !path.empty() && path.back() == '/' ? path + child : path + "/" + child;
          auto st = tree.Stat(p);
          if (!st.ok()) Finding("a listed entry cannot be stat'ed", p + ": " + st.status.message);
        }
        break;
      }
      case 2: {
        uint8_t flags = in.Byte();
        auto r = tree.Open(path, flags & 1, flags & 2);
        CheckStatus(r.status, "open", path);
        if (r.ok() && (flags & 1) && !r.value.node.dir && r.value.node.size != r.value.contents.size())
          Finding("an open file's snapshot differs from its size", path);
        break;
      }
      case 3:
        tree.Release(path);
        break;
      case 4: {
        std::string value = in.String();
        uint16_t offset = in.Take<uint16_t>();
        CheckStatus(tree.Write(path, value, offset), "write", path);
        break;
      }
      case 5:
        CheckStatus(tree.Truncate(path, in.Take<uint16_t>()), "truncate", path);
        break;
      case 6:
        CheckStatus(tree.Mkdir(path), "mkdir", path);
        break;
      case 7:
        CheckStatus(tree.Rmdir(path), "rmdir", path);
        break;
    }
  }
}

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    auto add = [&](const std::string& name, const std::vector<std::tuple<uint8_t, std::string, std::string>>& ops) {
      SeedWriter w;
      for (auto& [op, path, extra] : ops) {
        w.Put(op).String(path);
        if (op % 8 == 2) w.Put<uint8_t>(extra == "w" ? 2 : 1);
        if (op % 8 == 4) w.String(extra).Put<uint16_t>(0);
        if (op % 8 == 5) w.Put<uint16_t>(0);
      }
      s.emplace_back(name, w.bytes());
    };
    add("walk", {{1, "", ""}, {1, "gpus", ""}, {1, "gpus/0", ""}, {2, "gpus/0/name", "r"}, {1, "tenants", ""},
                 {1, "tenants/alice", ""}, {1, "tenants/alice/sessions/3", ""}, {2, "tenants/alice/memory.max", "r"}});
    add("create-read-token", {{6, "tenants/bob", ""}, {2, "tenants/bob/token", "r"}, {0, "tenants/bob/token", ""},
                              {3, "tenants/bob/token", ""}, {1, "tenants/bob", ""}, {7, "tenants/bob", ""}});
    add("writes", {{2, "tenants/alice/memory.max", "w"}, {5, "tenants/alice/memory.max", ""},
                   {4, "tenants/alice/memory.max", "64MiB\n"}, {4, "tenants/alice/gpus", "0 1\n"},
                   {4, "tenants/alice/memory.max", "max"}, {4, "gpus/0/name", "x"}});
    add("odd-paths", {{0, "/tenants//alice/", ""}, {0x80, "tenants/alice", ""}, {0, "tenants/alice/sessions/03", ""},
                      {6, "gpus/9", ""}, {7, "tenants/alice", ""}});
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  remora::fuzz::FuzzInput in(data, size);
  remora::fuzz::Run(in);
  return 0;
}

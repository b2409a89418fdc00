#include "pool_cmds.h"

#include <iostream>
#include <set>

#include "output.h"
#include "remora/base/util.h"

namespace remora::ctl {
namespace {

std::string Limit(const std::optional<uint64_t>& v) { return v ? FormatSize(*v) : "unlimited"; }

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out.empty() ? "-" : out;
}

Status Status_(admin::AdminClient& c, const PoolOptions& o) {
  ASSIGN_OR_RETURN(admin::PoolInfo p, c.Pool());
  uint64_t total = 0, used = 0;
  size_t live = 0, gone = 0;
  bool emulated = false;
  for (const auto& g : p.gpus) {
    if (g.gone) {
      gone++;
      continue;
    }
    live++;
    total += g.total_memory;
    used += g.used;
  }
  for (const auto& s : p.servers) emulated |= s.emulated;
  if (o.json) {
    Json j;
    j.BeginObject().Key("server").String(p.name).Key("revision").Int(p.revision).Key("fresh").Bool(p.fresh);
    j.Key("registered").Bool(p.registered).Key("endpoints").BeginArray();
    for (const auto& e : p.endpoints) j.String(e);
    j.EndArray().Key("servers").BeginArray();
    for (const auto& s : p.servers) {
      j.BeginObject().Key("name").String(s.name).Key("urls").BeginArray();
      for (const auto& u : s.urls) j.String(u);
      j.EndArray().Key("backend").String(s.backend).Key("emulated").Bool(s.emulated).Key("version").String(s.version);
      j.Key("health").String(s.health).Key("started").Int(s.started_at).Key("updated").Int(s.updated_at);
      j.Key("sessions").Uint(s.sessions).Key("applied_revision").Int(s.applied_revision).EndObject();
    }
    j.EndArray().Key("gpus").BeginArray();
    for (const auto& g : p.gpus) {
      j.BeginObject().Key("server").String(g.server).Key("index").Int(g.index).Key("uuid").String(g.uuid);
      j.Key("name").String(g.name).Key("memory").Uint(g.total_memory).Key("used").Uint(g.used).Key("gone").Bool(g.gone);
      j.Key("tenants").BeginArray();
      for (const auto& t : g.tenants) j.String(t);
      j.EndArray().EndObject();
    }
    j.EndArray().Key("total").BeginObject().Key("servers").Uint(p.servers.size()).Key("gpus").Uint(live);
    j.Key("gpus_gone").Uint(gone).Key("memory").Uint(total).Key("used").Uint(used).Key("tenants").Uint(p.tenants.size());
    std::cout << j.EndObject().EndObject().str();
    return Status::Ok();
  }
  Table servers({"SERVER", "URL", "HEALTH", ">GPUS", ">SESSIONS", ">APPLIED", "UP", "REPORTED"});
  for (const auto& s : p.servers) {
    size_t n = 0;
    for (const auto& g : p.gpus) n += g.server == s.name && !g.gone;
    servers.Row({s.name, Join(s.urls), s.health, std::to_string(n), std::to_string(s.sessions),
                 std::to_string(s.applied_revision), FormatAge(s.started_at), FormatAge(s.updated_at) + " ago"});
  }
  Table gpus({"SERVER", "GPU", "NAME", ">MEMORY", ">USED", "TENANTS", "STATE"});
  for (const auto& g : p.gpus)
    gpus.Row({g.server, std::to_string(g.index), g.gone ? "-" : g.name, g.gone ? "-" : FormatSize(g.total_memory),
              g.gone ? "-" : FormatSize(g.used), Join(g.tenants), g.gone ? "gone (server left the pool)" : "live"});
  std::cout << "pool of " << Join(p.endpoints) << " (keys " << p.prefix << ", revision " << p.revision << ")"
            << (p.fresh ? "" : " - the store does not answer: this is server '" + p.name + "''s last copy") << "\n\n"
            << servers.Render() << "\n" << gpus.Render() << "\n"
            << "total: " << p.servers.size() << " server(s), " << live << " GPU(s)" << (gone ? ", " + std::to_string(gone) + " gone" : "")
            << ", memory " << FormatSize(total) << ", " << FormatSize(used) << " charged, " << p.tenants.size()
            << " tenant(s)\n"
            << (emulated ? "backend: host-emulated on some servers (device memory lives in host RAM and kernels are not "
                           "executed; these are not GPU figures)\n"
                         : "");
  return Status::Ok();
}

Status Tenants(admin::AdminClient& c, const PoolOptions& o) {
  ASSIGN_OR_RETURN(admin::PoolInfo p, c.Pool());
  if (o.json) {
    Json j;
    j.BeginArray();
    for (const auto& t : p.tenants) {
      j.BeginObject().Key("name").String(t.name).Key("memory_limit").OptUint(t.memory_limit);
      j.Key("pool_limit").OptUint(t.pool_limit).Key("used").Uint(t.used).Key("shares").Uint(t.shares);
      j.Key("sessions").Uint(t.sessions).Key("gpus").Uint(t.gpus).Key("servers").BeginArray();
      for (const auto& h : t.servers)
        j.BeginObject().Key("server").String(h.server).Key("used").Uint(h.used).Key("sessions").Uint(h.sessions)
            .Key("share").Uint(h.share).EndObject();
      j.EndArray().Key("assignments").BeginArray();
      for (const auto& a : p.assignments)
        if (a.tenant == t.name)
          j.BeginObject().Key("server").String(a.server).Key("gpu").Int(a.gpu).Key("uuid").String(a.uuid)
              .Key("gone").Bool(a.gone).EndObject();
      j.EndArray().EndObject();
    }
    std::cout << j.EndArray().str();
    return Status::Ok();
  }
  Table t({"TENANT", ">LIMIT/GPU", ">POOL LIMIT", ">USED", ">SHARES", ">SESSIONS", "GPUS (SERVER:GPU)"});
  for (const auto& x : p.tenants) {
    std::vector<std::string> where;
    for (const auto& a : p.assignments)
      if (a.tenant == x.name) where.push_back(a.server + ":" + std::to_string(a.gpu) + (a.gone ? " (gone)" : ""));
    t.Row({x.name, Limit(x.memory_limit), Limit(x.pool_limit), FormatSize(x.used), FormatSize(x.shares),
           std::to_string(x.sessions), Join(where)});
  }
  Table h({"TENANT", "SERVER", ">USED", ">SHARE", ">SESSIONS"});
  for (const auto& x : p.tenants)
    for (const auto& s : x.servers) h.Row({x.name, s.server, FormatSize(s.used), FormatSize(s.share), std::to_string(s.sessions)});
  std::cout << t.Render();
  if (!h.empty()) std::cout << "\n" << h.Render();
  return Status::Ok();
}

Status Attach(admin::AdminClient& c, const PoolOptions& o) {
  if (o.gpu >= 0) {  // one given GPU, no placement
    if (o.servers.size() != 1) return Error(Err::kInvalidValue, "usage: --gpu needs one --server");
    RETURN_IF_ERROR(c.PoolAssign(o.name, o.servers[0], o.gpu));
    std::string what = "GPU " + o.servers[0] + ":" + std::to_string(o.gpu) + " attached to tenant '" + o.name + "'";
    if (o.json) std::cout << Json().BeginObject().Key("ok").Bool(true).Key("message").String(what).EndObject().str();
    else std::cout << what << "\n";
    return Status::Ok();
  }
  admin::PoolPlacement r;
  r.tenant = o.name;
  r.count = o.count;
  r.policy = o.policy;
  r.model = o.model;
  if (!o.min_free.empty()) {
    auto m = ParseSize(o.min_free);
    if (!m.ok() || !m->has_value()) return Error(Err::kInvalidValue, "usage: --min-free: a size like 8GiB");
    r.min_free_memory = **m;
  }
  r.servers = o.servers;
  ASSIGN_OR_RETURN(auto placed, c.PoolAttach(r));
  if (o.json) {
    Json j;
    j.BeginArray();
    for (const auto& a : placed)
      j.BeginObject().Key("server").String(a.server).Key("gpu").Int(a.gpu).Key("uuid").String(a.uuid).EndObject();
    std::cout << j.EndArray().str();
    return Status::Ok();
  }
  std::vector<std::string> where;
  for (const auto& a : placed) where.push_back(a.server + ":" + std::to_string(a.gpu));
  std::cout << placed.size() << " GPU(s) attached to tenant '" << o.name << "': " << Join(where) << "\n";
  return Status::Ok();
}

Status Detach(admin::AdminClient& c, const PoolOptions& o) {
  if (o.gpu >= 0 && o.server.empty()) return Error(Err::kInvalidValue, "usage: --gpu needs --server");
  ASSIGN_OR_RETURN(int n, c.PoolDetach(o.name, o.server, o.gpu));
  std::string what = std::to_string(n) + " GPU(s) detached from tenant '" + o.name + "'";
  if (o.json) std::cout << Json().BeginObject().Key("detached").Int(n).Key("message").String(what).EndObject().str();
  else std::cout << what << "\n";
  return Status::Ok();
}

}  // namespace

PoolCommands AddPoolCommands(CLI::App& app, PoolOptions& o) {
  auto* pool = app.add_subcommand("pool", "a pool of servers (remora-server --pool), through any of its servers")
                   ->require_subcommand(1)
                   ->fallthrough();
  PoolCommands c;
  c.status = pool->add_subcommand("status", "the pool's servers and GPUs, per server and in total");
  c.tenants = pool->add_subcommand("tenants", "tenants: pool-wide limits, the servers' shares and use, their GPUs");
  c.attach = pool->add_subcommand("attach", "choose GPUs across the pool's servers and attach them to a tenant");
  c.attach->add_option("NAME", o.name)->required();
  c.attach->add_option("--gpus", o.count, "how many GPUs (default 1)")->check(CLI::Range(1, 64));
  c.attach->add_option("--policy", o.policy, "spread (least loaded, default) or pack (fill servers)")
      ->check(CLI::IsMember({"spread", "pack"}));
  c.attach->add_option("--model", o.model, "only GPUs whose name contains this (e.g. H200)");
  c.attach->add_option("--min-free", o.min_free, "only GPUs with at least this much memory not charged to tenants");
  c.attach->add_option("--server", o.servers, "only this server (repeatable)");
  c.attach->add_option("--gpu", o.gpu, "this GPU (index) of the one --server, instead of a placement")
      ->check(CLI::NonNegativeNumber);
  c.detach = pool->add_subcommand("detach", "detach a tenant's GPUs: all, a server's (--server) or one (--gpu)");
  c.detach->add_option("NAME", o.name)->required();
  c.detach->add_option("--server", o.server, "only this server's");
  c.detach->add_option("--gpu", o.gpu, "only this GPU of --server")->check(CLI::NonNegativeNumber);
  return c;
}

Status RunPool(admin::AdminClient& c, const PoolCommands& cmds, const PoolOptions& o) {
  if (cmds.status->parsed()) return Status_(c, o);
  if (cmds.tenants->parsed()) return Tenants(c, o);
  if (cmds.attach->parsed()) return Attach(c, o);
  return Detach(c, o);
}

}  // namespace remora::ctl

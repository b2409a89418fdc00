// remoractl: the administrator's CLI of a remora-server (tenants, memory quotas, compute
// shares, GPUs, sessions).
//
// Reaches the server through its state directory (--state-dir DIR, or REMORA_STATE_DIR: the
// unix socket DIR/admin.sock, root or the server's user only) or an admin URL (--admin
// tcp://HOST:PORT with the admin token from --admin-token-file or REMORA_ADMIN_TOKEN).
// Output: aligned tables by default, JSON with --json. Errors: one line "remoractl: ..." on
// stderr; exit 1 for a failed operation, 2 for a usage error.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "admin_client.h"
#include "output.h"
#include "pool_cmds.h"
#include "remora/base/util.h"
#include "remora/protocol/auth.h"

namespace remora::ctl {
namespace {

using admin::AdminClient;

struct UsageError {
  std::string message;
};

struct Options {
  std::string state_dir, admin_url, token_file;
  bool json = false;
  // Arguments of the subcommands.
  std::string name, memory, gpus = "all", session_reason, migrate_url, migrate_token, migrate_token_file;
  int migrate_wait_s = 120;
  std::string compute, compute_max, priority;  // empty: not given
  std::string pool_memory;                      // a pool's tenant: its limit across the pool
  bool force = false;
  int gpu = -1;
  uint64_t session_id = 0;
};

// "512MiB", "8GiB", "1.5G", "max"/"unlimited" (nullopt).
std::optional<uint64_t> ParseMemory(const std::string& text) {
  if (text == "unlimited" || text == "none") return std::nullopt;
  auto r = ParseSize(text);
  if (!r.ok()) throw UsageError{"--memory: " + r.status().message() + " (sizes look like 512MiB, 8GiB, 1.5G or unlimited)"};
  return *r;
}

// "all" (nullopt), "none" or "0,2".
std::optional<std::vector<int>> ParseGpuList(const std::string& text) {
  if (text == "all") return std::nullopt;
  std::vector<int> out;
  if (text == "none" || text.empty()) return out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > 1023)
      throw UsageError{"bad GPU list '" + text + "': expected 'all', 'none' or indices like 0,1"};
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string Limit(const std::optional<uint64_t>& v) { return v ? FormatSize(*v) : "unlimited"; }

bool ComputeGiven(const Options& o) { return !o.compute.empty() || !o.compute_max.empty() || !o.priority.empty(); }

// The given compute options applied over `base` (what the tenant has now); usage errors throw.
sched::ComputeSettings ApplyComputeOptions(const Options& o, sched::ComputeSettings base) {
  if (!o.compute.empty()) {
    auto w = sched::ParseWeight(o.compute);
    if (!w.ok()) throw UsageError{"--compute: " + w.status().message()};
    base.weight = *w;
  }
  if (!o.compute_max.empty()) {
    auto m = sched::ParseMax(o.compute_max);
    if (!m.ok()) throw UsageError{"--compute-max: " + m.status().message()};
    base.max = *m;
  }
  if (!o.priority.empty()) {
    auto p = sched::ParsePriority(o.priority);
    if (!p.ok()) throw UsageError{"--priority: " + p.status().message()};
    base.priority = *p;
  }
  return base;
}

// "30%", "-" (no share set).
std::string Share(const sched::ComputeSettings& c) { return c.weight ? sched::FormatShare(c.weight) : "-"; }
std::string Cap(const sched::ComputeSettings& c) { return c.max ? sched::DescribeMax(c.max) : "-"; }

void WriteComputeJson(Json& j, const sched::ComputeSettings& c) {
  j.Key("compute").BeginObject();
  j.Key("weight").Uint(c.effective_weight()).Key("weight_set").Bool(c.weight.has_value());
  j.Key("max");
  if (c.max) j.BeginObject().Key("quota_us").Uint(c.max->quota_us).Key("period_us").Uint(c.max->period_us).EndObject();
  else j.Null();
  j.Key("priority").String(sched::PriorityName(c.priority)).EndObject();
}

// Sets the given compute options of tenant `name`, keeping the others it has.
Status SetComputeOptions(AdminClient& c, const Options& o) {
  ASSIGN_OR_RETURN(auto tenants, c.ListTenants());
  auto t = std::find_if(tenants.begin(), tenants.end(), [&](const admin::TenantInfo& x) { return x.name == o.name; });
  if (t == tenants.end()) return Error(Err::kInvalidValue, "no such tenant '{}'", o.name);
  return c.SetCompute(o.name, ApplyComputeOptions(o, t->compute));
}

std::string DescribeCompute(const sched::ComputeSettings& c) {
  return "compute share " + sched::FormatShare(c.weight) + " (weight " + sched::FormatWeight(c.weight) + "), cap " +
         sched::DescribeMax(c.max) + ", priority " + std::string(sched::PriorityName(c.priority));
}

// Every figure about GPU memory says so when the server's GPUs are emulated.
std::string BackendNote(const admin::ServerInfo& info) {
  if (info.emulated)
    return "backend: host-emulated (device memory lives in host RAM and kernels are not executed; these are not GPU "
           "figures)\n";
  return "backend: " + info.backend + "\n";
}

Result<std::unique_ptr<AdminClient>> ConnectFrom(const Options& o) {
  auto c = admin::ConnectOptionsFrom(o.state_dir, o.admin_url, o.token_file);
  if (!c.ok() && c.status().code() == Err::kInvalidValue) throw UsageError{c.status().message()};
  if (!c.ok()) return c.take_status();
  return AdminClient::Connect(*c);
}

void WriteTenantJson(Json& j, const admin::TenantInfo& t) {
  j.BeginObject().Key("name").String(t.name).Key("memory_limit").OptUint(t.memory_limit);
  j.Key("memory_used").Uint(t.memory_used).Key("context_overhead").Uint(t.context_overhead);
  j.Key("refused").Uint(t.refused).Key("sessions").Uint(t.sessions);
  j.Key("gpus").BeginArray();
  for (int g : t.gpus) j.Int(g);
  j.EndArray().Key("usage").BeginArray();
  for (const auto& u : t.usage)
    j.BeginObject().Key("gpu").Int(u.gpu).Key("used").Uint(u.used).Key("context_overhead").Uint(u.context_overhead)
        .Key("gpu_time_ns").Uint(u.gpu_time_ns).EndObject();
  j.EndArray().Key("created_at").Int(t.created_at).Key("pool_limit").OptUint(t.pool_limit);
  j.Key("pool_share").Uint(t.pool_share);
  WriteComputeJson(j, t.compute);
  j.Key("gpu_time_ns").Uint(t.gpu_time_ns).EndObject();
}

Status TenantCreate(AdminClient& c, const Options& o) {
  auto memory = o.memory.empty() ? std::nullopt : ParseMemory(o.memory);
  auto gpus = ParseGpuList(o.gpus);
  // A pool's tenant is made in the pool: GPUs come from `remoractl pool attach` (or --gpus
  // names GPUs of this server), and --pool-memory limits it across the pool.
  bool pooled = c.Pool().ok();
  std::optional<uint64_t> pool_limit;
  if (!o.pool_memory.empty()) pool_limit = ParseMemory(o.pool_memory);
  if (pooled && o.gpus == "all") gpus = std::vector<int>{};
  Result<std::string> made = pooled || pool_limit ? c.CreatePoolTenant(o.name, memory, pool_limit, gpus)
                                                  : c.CreateTenant(o.name, memory, gpus);
  ASSIGN_OR_RETURN(std::string token, std::move(made));
  if (ComputeGiven(o)) RETURN_IF_ERROR(c.SetCompute(o.name, ApplyComputeOptions(o, {})));
  if (o.json) {
    std::cout << Json().BeginObject().Key("name").String(o.name).Key("token").String(token).EndObject().str();
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(auto info, c.Info());
  std::cout << "tenant '" << o.name << "' created" << (pooled ? " in the pool" : "") << ": memory limit " << Limit(memory)
            << " per GPU" << (pooled ? ", " + Limit(pool_limit) + " across the pool" : std::string()) << ", GPUs "
            << (gpus ? JoinInts(*gpus) : std::string("all")) << (pooled ? " of this server (remoractl pool attach adds more)" : "")
            << (info.emulated ? " (host-emulated)" : "")
            << (ComputeGiven(o) ? ", " + DescribeCompute(ApplyComputeOptions(o, {})) : std::string()) << "\n"
            << "token (shown once, keep it secret; clients use it as REMORA_TOKEN):\n"
            << token << "\n";
  return Status::Ok();
}

Status TenantList(AdminClient& c, const Options& o, bool usage_view) {
  ASSIGN_OR_RETURN(auto tenants, c.ListTenants());
  if (usage_view && !o.name.empty()) {
    std::erase_if(tenants, [&](const admin::TenantInfo& t) { return t.name != o.name; });
    if (tenants.empty()) return Error(Err::kInvalidValue, "no such tenant '{}'", o.name);
  }
  ASSIGN_OR_RETURN(auto info, c.Info());
  if (o.json) {
    Json j;
    if (usage_view) {
      j.BeginObject().Key("backend").String(info.backend).Key("emulated").Bool(info.emulated).Key("tenants").BeginArray();
      for (const auto& t : tenants) WriteTenantJson(j, t);
      j.EndArray().EndObject();
    } else {
      j.BeginArray();
      for (const auto& t : tenants) WriteTenantJson(j, t);
      j.EndArray();
    }
    std::cout << j.str();
    return Status::Ok();
  }
  if (!usage_view) {
    Table t({"NAME", ">LIMIT/GPU", ">USED", ">CONTEXT", ">REFUSED", ">SESSIONS", "GPUS", ">SHARE", "CAP", "PRIORITY",
             ">GPU TIME", "CREATED"});
    for (const auto& x : tenants)
      t.Row({x.name, Limit(x.memory_limit), FormatSize(x.memory_used), FormatSize(x.context_overhead),
             std::to_string(x.refused), std::to_string(x.sessions), JoinInts(x.gpus), Share(x.compute), Cap(x.compute),
             std::string(sched::PriorityName(x.compute.priority)), FormatGpuTime(x.gpu_time_ns), FormatTime(x.created_at)});
    std::cout << t.Render() << BackendNote(info);
    return Status::Ok();
  }
  Table t({"TENANT", "GPU", ">LIMIT", ">USED", ">FREE", ">CONTEXT", ">REFUSED", ">SESSIONS", ">GPU TIME"});
  for (const auto& x : tenants) {
    std::string refused = std::to_string(x.refused), sessions = std::to_string(x.sessions);
    if (x.usage.empty()) t.Row({x.name, "-", Limit(x.memory_limit), "0 B", "-", "0 B", refused, sessions, "0 s"});
    for (const auto& u : x.usage) {
      std::string free = x.memory_limit ? FormatSize(*x.memory_limit > u.used ? *x.memory_limit - u.used : 0) : "-";
      bool attached = std::find(x.gpus.begin(), x.gpus.end(), u.gpu) != x.gpus.end();
      t.Row({x.name, std::to_string(u.gpu) + (attached ? "" : " (detached)"), Limit(x.memory_limit), FormatSize(u.used),
             free, FormatSize(u.context_overhead), refused, sessions, FormatGpuTime(u.gpu_time_ns)});
    }
  }
  std::cout << t.Render() << BackendNote(info);
  return Status::Ok();
}

Status GpuList(AdminClient& c, const Options& o) {
  ASSIGN_OR_RETURN(auto gpus, c.ListGpus());
  ASSIGN_OR_RETURN(auto info, c.Info());
  if (o.json) {
    Json j;
    j.BeginArray();
    for (const auto& g : gpus) {
      j.BeginObject().Key("index").Int(g.index).Key("name").String(g.name).Key("uuid").String(g.uuid);
      j.Key("pci_bus_id").String(g.pci_bus_id).Key("memory").Uint(g.total_memory).Key("used").Uint(g.used);
      j.Key("compute_enforced").Bool(g.compute_enforced).Key("turn_session").Uint(g.turn_session);
      j.Key("backend").String(info.backend).Key("emulated").Bool(info.emulated).Key("tenants").BeginArray();
      for (const auto& t : g.tenants) j.String(t);
      j.EndArray().EndObject();
    }
    std::cout << j.EndArray().str();
    return Status::Ok();
  }
  Table t({"GPU", "NAME", ">MEMORY", ">USED", "TENANTS", "SHARES", "PCI", "BACKEND"});
  for (const auto& g : gpus) {
    std::string tenants;
    for (const auto& n : g.tenants) tenants += (tenants.empty() ? "" : ",") + n;
    std::string shares = !g.compute_enforced ? "off"
                         : g.turn_session != 0 ? "on (session " + std::to_string(g.turn_session) + ")"
                                               : "on";
    t.Row({std::to_string(g.index), g.name, FormatSize(g.total_memory), FormatSize(g.used), tenants.empty() ? "-" : tenants,
           shares, g.pci_bus_id, info.emulated ? "host-emulated" : info.backend});
  }
  std::cout << t.Render() << BackendNote(info);
  return Status::Ok();
}

Status SessionList(AdminClient& c, const Options& o) {
  ASSIGN_OR_RETURN(auto sessions, c.ListSessions());
  if (o.json) {
    Json j;
    j.BeginArray();
    for (const auto& s : sessions) {
      j.BeginObject().Key("id").Uint(s.id).Key("tenant").String(s.tenant).Key("pid").Uint(s.client_pid);
      j.Key("host").String(s.host).Key("user").String(s.user).Key("program").String(s.program);
      j.Key("transport").String(s.transport).Key("data_path").String(s.data_path).Key("peer").String(s.peer).Key("started").Int(s.started_at);
      j.Key("memory_current").Uint(s.memory_current).Key("worker_pid").Int(s.worker_pid);
      j.Key("gpu_time_ns").Uint(s.gpu_time_ns).EndObject();
    }
    std::cout << j.EndArray().str();
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(auto info, c.Info());
  Table t({">ID", "TENANT", ">PID", "HOST", "USER", "PROGRAM", "TRANSPORT", "DATA PATH", "STARTED", ">MEMORY", ">GPU TIME",
           ">WORKER"});
  for (const auto& s : sessions)
    t.Row({std::to_string(s.id), s.tenant, std::to_string(s.client_pid), s.host, s.user, s.program, s.transport, s.data_path,
           FormatAge(s.started_at) + " ago", FormatSize(s.memory_current), FormatGpuTime(s.gpu_time_ns),
           std::to_string(s.worker_pid)});
  std::cout << t.Render() << BackendNote(info);
  return Status::Ok();
}

Status Info(AdminClient& c, const Options& o) {
  ASSIGN_OR_RETURN(auto i, c.Info());
  if (o.json) {
    std::cout << Json().BeginObject().Key("version").String(i.version).Key("hostname").String(i.hostname)
                     .Key("backend").String(i.backend).Key("emulated").Bool(i.emulated).Key("driver_version")
                     .Int(i.driver_version).Key("pid").Int(i.pid).Key("started").Int(i.started_at)
                     .Key("auth_required").Bool(i.auth_required).EndObject().str();
    return Status::Ok();
  }
  std::cout << "remora-server " << i.version << " on " << i.hostname << ", pid " << i.pid << ", up "
            << FormatAge(i.started_at) << ", authentication " << (i.auth_required ? "required" : "off (--auth none)")
            << "\n" << BackendNote(i);
  return Status::Ok();
}

// Prints "ok" lines for the state-changing commands.
Status Done(const Options& o, const std::string& what) {
  if (o.json) std::cout << Json().BeginObject().Key("ok").Bool(true).Key("message").String(what).EndObject().str();
  else std::cout << what << "\n";
  return Status::Ok();
}

// The tenant token for `session migrate --token-file FILE` ('-': standard input): its first
// line, which must be a token. Keeps tokens off the command line, where every local user
// can read them (ps, /proc/PID/cmdline).
std::string ReadMigrateToken(const std::string& path) {
  std::string token;
  if (path == "-") {
    if (!std::getline(std::cin, token)) throw UsageError{"--token-file -: nothing on standard input"};
  } else {
    auto t = admin::ReadTokenFile(path);
    if (!t.ok()) throw UsageError{"--token-file: cannot read " + path};
    token = *t;
  }
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
  if (!ParseToken(token).ok()) throw UsageError{"--token-file " + path + ": not a Remora token (remora1.TENANT.SECRET)"};
  return token;
}

// Asks the session's application to move, then waits until the session left this server
// (its application said goodbye here once the target had everything).
Status SessionMigrate(AdminClient& c, const Options& o) {
  RETURN_IF_ERROR(c.MigrateSession(o.session_id, o.migrate_url, o.migrate_token));
  std::string id = std::to_string(o.session_id);
  if (o.migrate_wait_s == 0) return Done(o, "session " + id + ": asked to move to " + o.migrate_url);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o.migrate_wait_s);
  for (;;) {
    ASSIGN_OR_RETURN(auto sessions, c.ListSessions());
    auto s = std::find_if(sessions.begin(), sessions.end(), [&](const admin::SessionInfo& x) { return x.id == o.session_id; });
    if (s == sessions.end()) return Done(o, "session " + id + " moved to " + o.migrate_url);
    if (!s->migrate_failed.empty())
      return Error(Err::kNotSupported, "session {} stays on this server: {}", id, s->migrate_failed);
    if (std::chrono::steady_clock::now() >= until)
      return Error(Err::kTimeout,
                   "session {} is still on this server after {} s: its application refused or failed the move (its log "
                   "says why) and goes on here",
                   id, o.migrate_wait_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string GpuLabel(AdminClient& c, int gpu) {
  auto info = c.Info();
  return "GPU " + std::to_string(gpu) + (info.ok() && info->emulated ? " (host-emulated)" : "");
}

}  // namespace
}  // namespace remora::ctl

int main(int argc, char** argv) {
  using namespace remora;
  using namespace remora::ctl;
  Options o;
  CLI::App app{"remoractl: administer a remora-server (tenants, memory quotas, compute shares, GPUs, sessions)"};
  app.add_option("-D,--state-dir", o.state_dir, "the server's state directory (its admin.sock); default $REMORA_STATE_DIR");
  app.add_option("--admin", o.admin_url, "admin URL instead: unix:///path/admin.sock or tcp://HOST:PORT");
  app.add_option("--admin-token-file", o.token_file, "admin token for tcp:// (default $REMORA_ADMIN_TOKEN)");
  app.add_flag("--json", o.json, "machine-readable output");
  app.require_subcommand(1);
  app.fallthrough();  // global options after the subcommand too: `remoractl tenant list --json`

  auto* tenant = app.add_subcommand("tenant", "manage tenants")->require_subcommand(1)->fallthrough();
  auto* t_create = tenant->add_subcommand("create", "create a tenant and print its token (once)");
  t_create->add_option("NAME", o.name, "tenant name: 1-63 of [a-z0-9_-]")->required();
  t_create->add_option("--memory", o.memory, "memory limit per GPU: 512MiB, 8GiB, 1.5G (default unlimited)");
  t_create->add_option("--gpus", o.gpus, "GPUs to attach: all (default), none, or a list like 0,1 (a pool: this "
                                       "server's, none by default)");
  t_create->add_option("--pool-memory", o.pool_memory, "a pool's tenant: memory limit across all GPUs of the pool");
  auto add_compute = [&](CLI::App* cmd) {
    cmd->add_option("--compute", o.compute,
                    "compute share of each GPU: a percent like 30% (weight 3000), a weight 1..10000, or default "
                    "(weight 100); shares are relative among the GPU's busy tenants");
    cmd->add_option("--compute-max", o.compute_max,
                    "hard cap of GPU time on each GPU: a percent like 50%, 'QUOTA PERIOD' in us, or max (none)");
    cmd->add_option("--priority", o.priority, "low, normal (default) or high: a higher class is served first within its share");
  };
  add_compute(t_create);
  auto* t_list = tenant->add_subcommand("list", "tenants with their limits, shares and current use");
  auto* t_set = tenant->add_subcommand("set", "change a tenant's memory limit or compute settings (applies to running sessions)");
  t_set->add_option("NAME", o.name)->required();
  t_set->add_option("--memory", o.memory, "new limit per GPU (or 'unlimited')");
  t_set->add_option("--pool-memory", o.pool_memory, "a pool's tenant: new limit across the pool (or 'unlimited')");
  add_compute(t_set);
  auto* t_delete = tenant->add_subcommand("delete", "delete a tenant");
  t_delete->add_option("NAME", o.name)->required();
  t_delete->add_flag("--force", o.force, "end its running sessions");

  auto* gpu = app.add_subcommand("gpu", "this server's GPUs")->require_subcommand(1)->fallthrough();
  auto* g_list = gpu->add_subcommand("list", "GPUs with memory, tenants and use");
  auto* attach = app.add_subcommand("attach", "attach a GPU of this server to a tenant (running apps see a new device)");
  attach->add_option("NAME", o.name)->required();
  attach->add_option("GPU", o.gpu)->required()->check(CLI::NonNegativeNumber);
  auto* detach = app.add_subcommand("detach", "detach a GPU from a tenant (its calls on it fail)");
  detach->add_option("NAME", o.name)->required();
  detach->add_option("GPU", o.gpu)->required()->check(CLI::NonNegativeNumber);
  auto* session = app.add_subcommand("session", "client sessions")->require_subcommand(1)->fallthrough();
  auto* s_list = session->add_subcommand("list", "running sessions");
  auto* s_kill = session->add_subcommand("kill", "end a session (its application's calls fail)");
  s_kill->add_option("ID", o.session_id)->required();
  s_kill->add_option("--reason", o.session_reason, "told to the application");
  auto* s_migrate = session->add_subcommand("migrate", "move a running session to another server (its application goes on)");
  s_migrate->add_option("ID", o.session_id)->required();
  s_migrate->add_option("--to", o.migrate_url, "the server to move to (tcp://HOST:PORT, shm://PATH...)")->required();
  auto* migrate_token_file =
      s_migrate->add_option("--token-file", o.migrate_token_file,
                            "file holding the tenant's token there ('-': read it from standard input; default: the "
                            "application's own token)");
  s_migrate->add_option("--token", o.migrate_token, "the token itself (visible to other local users: prefer --token-file)")
      ->excludes(migrate_token_file);
  s_migrate->add_option("--wait", o.migrate_wait_s, "seconds to wait for the move to complete (0: do not wait)")
      ->check(CLI::NonNegativeNumber);
  auto* usage = app.add_subcommand("usage", "memory use and GPU time per tenant and GPU");
  usage->add_option("NAME", o.name, "only this tenant");
  auto* info = app.add_subcommand("info", "the server: version, backend, uptime");
  PoolOptions po;
  PoolCommands pool = AddPoolCommands(app, po);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::fprintf(stderr, "remoractl: %s (see remoractl --help)\n", what.c_str());
    return 2;
  }

  try {
    // Usage errors before any connection attempt.
    if (!o.memory.empty()) (void)ParseMemory(o.memory);
    if (!o.pool_memory.empty()) (void)ParseMemory(o.pool_memory);
    (void)ParseGpuList(o.gpus);
    (void)ApplyComputeOptions(o, {});
    if (t_set->parsed() && o.memory.empty() && o.pool_memory.empty() && !ComputeGiven(o))
      throw UsageError{"tenant set: give --memory, --pool-memory, --compute, --compute-max or --priority"};
    if (s_migrate->parsed() && !o.migrate_token.empty())
      std::fprintf(stderr, "remoractl: warning: --token shows the token to every local user (ps); use --token-file FILE "
                           "or --token-file - (standard input)\n");
    if (s_migrate->parsed() && !o.migrate_token_file.empty()) o.migrate_token = ReadMigrateToken(o.migrate_token_file);
    auto client = ConnectFrom(o);
    if (!client.ok()) {
      std::fprintf(stderr, "remoractl: %s\n", client.status().message().c_str());
      return 1;
    }
    AdminClient& c = **client;
    Status st;
    if (t_create->parsed()) st = TenantCreate(c, o);
    else if (t_list->parsed()) st = TenantList(c, o, false);
    else if (t_set->parsed()) {
      std::string what;
      if (!o.memory.empty()) {
        auto limit = ParseMemory(o.memory);
        st = c.SetMemoryLimit(o.name, limit);
        what = "memory limit " + Limit(limit) + " per GPU";
      }
      if (st.ok() && !o.pool_memory.empty()) {
        auto limit = ParseMemory(o.pool_memory);
        st = c.SetPoolLimit(o.name, limit);
        what += (what.empty() ? "" : ", ") + std::string("memory limit ") + Limit(limit) + " across the pool";
      }
      if (st.ok() && ComputeGiven(o)) {
        st = SetComputeOptions(c, o);
        if (st.ok()) {
          auto tenants = c.ListTenants();
          for (const auto& t : tenants.ok() ? *tenants : std::vector<admin::TenantInfo>{})
            if (t.name == o.name) what += (what.empty() ? "" : ", ") + DescribeCompute(t.compute);
        }
      }
      if (st.ok()) st = Done(o, "tenant '" + o.name + "': " + what);
    } else if (t_delete->parsed()) {
      st = c.DeleteTenant(o.name, o.force);
      if (st.ok()) st = Done(o, "tenant '" + o.name + "' deleted");
    } else if (g_list->parsed()) st = GpuList(c, o);
    else if (attach->parsed()) {
      st = c.Attach(o.name, o.gpu);
      if (st.ok()) st = Done(o, GpuLabel(c, o.gpu) + " attached to tenant '" + o.name + "'");
    } else if (detach->parsed()) {
      st = c.Detach(o.name, o.gpu);
      if (st.ok()) st = Done(o, GpuLabel(c, o.gpu) + " detached from tenant '" + o.name + "'");
    } else if (s_list->parsed()) st = SessionList(c, o);
    else if (s_kill->parsed()) {
      st = c.KillSession(o.session_id, o.session_reason);
      if (st.ok()) st = Done(o, "session " + std::to_string(o.session_id) + " ended");
    } else if (s_migrate->parsed()) {
      st = SessionMigrate(c, o);
    } else if (usage->parsed()) st = TenantList(c, o, true);
    else if (info->parsed()) st = Info(c, o);
    else if (pool.parsed()) {
      po.json = o.json;
      st = RunPool(c, pool, po);
      if (!st.ok() && st.message().rfind("usage: ", 0) == 0) throw UsageError{st.message().substr(7)};
    }
    if (!st.ok()) {
      std::fprintf(stderr, "remoractl: %s\n", st.message().c_str());
      return 1;
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "remoractl: %s\n", e.message.c_str());
    return 2;
  }
  return 0;
}

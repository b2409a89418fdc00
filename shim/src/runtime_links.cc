// Runtime (runtime.h), the session's links: connecting to the servers of REMORA_SERVER with
// the environment's tokens and options, routing application ordinals to links, and moving a
// link to another server (planned migration, migration.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/ranges.h>

#include "callbacks.h"
#include "migration.h"
#include "modules.h"
#include "runtime.h"
#include "watchdog.h"
#include "remora/memmgr/handle_table.h"
#include "remora/base/fd.h"
#include "remora/base/log.h"
#include "remora/protocol/secure.h"
#include "remora/protocol/transport.h"

namespace remora::shim {

namespace {

constexpr const char* kDefaultServer = "shm:///run/remora/remora.sock";


// Several servers of one session at most (windows 0..kMaxServers-1).
constexpr size_t kMaxServers = 16;

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    if (comma > pos) out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// REMORA_TOKEN (or the first line of REMORA_TOKEN_FILE): no token, one token for every
// server, or one per server of REMORA_SERVER, comma-separated in the same order.
Result<std::vector<std::optional<Token>>> TokensFromEnvironment(size_t servers) {
  std::string text;
  if (const char* t = std::getenv("REMORA_TOKEN"); t != nullptr && *t) {
    text = t;
  } else if (const char* f = std::getenv("REMORA_TOKEN_FILE"); f != nullptr && *f) {
    // Never through a symbolic link (a token is a credential: read the file that was named).
    Fd fd(::open(f, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
      return Error(Err::kNoDevice, "cannot read REMORA_TOKEN_FILE {} (a regular file, not a symbolic link)", f);
    if ((st.st_mode & 077) != 0)
      LOG_WARN("REMORA_TOKEN_FILE {} can be read by other users (mode {:o}): chmod 600 it", f, st.st_mode & 0777);
    char buf[4096];
    ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
    if (n <= 0) return Error(Err::kNoDevice, "cannot read REMORA_TOKEN_FILE {}", f);
    text.assign(buf, static_cast<size_t>(n));
    text = text.substr(0, text.find('\n'));
  } else {
    return std::vector<std::optional<Token>>(servers);
  }
  std::vector<std::string> texts = SplitList(text);
  if (texts.size() != 1 && texts.size() != servers)
    return Error(Err::kNoDevice, "the Remora token holds {} tokens for {} servers (one for all, or one per server in "
                 "REMORA_SERVER's order)", texts.size(), servers);
  std::vector<std::optional<Token>> out;
  for (size_t i = 0; i < servers; i++) {
    auto tok = ParseToken(texts[texts.size() == 1 ? 0 : i]);
    if (!tok.ok()) return Error(Err::kNoDevice, "bad Remora token: {}", tok.status().message());
    out.emplace_back(*tok);
  }
  return out;
}

// REMORA_ENCRYPT, REMORA_INSECURE_LOCAL, REMORA_TCP_STREAMS, and REMORA_DEADLINE_S: how long
// the shim waits for a silent server also bounds how long a server's worker may take to set
// its session up (0, no deadline: the connection's own 15 s).
Status OptionsFromEnvironment(ConnectOptions* options) {
  options->server_setup_ms = static_cast<int>(std::min<uint64_t>(DeadlineFromEnvironment() / 1'000'000, 86'400'000));
  if (const char* e = std::getenv("REMORA_ENCRYPT"); e != nullptr && *e) {
    ASSIGN_OR_RETURN(options->encrypt, ParseEncryptMode(e));
  }
  if (const char* e = std::getenv("REMORA_INSECURE_LOCAL"); e != nullptr) options->insecure_local = std::string_view(e) == "1";
  if (const char* e = std::getenv("REMORA_TCP_STREAMS"); e != nullptr && *e) {
    ASSIGN_OR_RETURN(options->data_streams, ParseTcpStreams(e));
  }
  return Status::Ok();
}

// REMORA_SERVER=pool://HOST:PORT,...: asks the pool's servers in turn where the tenant's GPUs
// are (a locate handshake) and returns those servers' URLs in the order of its devices, as
// many as REMORA_POOL_GPUS needs (all when unset).
Result<std::vector<std::string>> LocateInPool(const std::string& address) {
  std::vector<std::string> members = SplitList(address.substr(std::string_view("pool://").size()));
  if (members.empty()) return Error(Err::kInvalidValue, "{} names no server of the pool", address);
  ASSIGN_OR_RETURN(auto tokens, TokensFromEnvironment(1));
  if (!tokens[0]) return Error(Err::kNoDevice, "a pool:// address needs the tenant's token (REMORA_TOKEN or REMORA_TOKEN_FILE)");
  ConnectOptions options;
  options.token = tokens[0];
  RETURN_IF_ERROR(OptionsFromEnvironment(&options));
  uint32_t want = 0;
  if (const char* e = std::getenv("REMORA_POOL_GPUS"); e != nullptr && *e) {
    char* end = nullptr;
    long n = std::strtol(e, &end, 10);
    if (*end != '\0' || n < 1 || n > 256) return Error(Err::kInvalidValue, "REMORA_POOL_GPUS='{}': expected 1 to 256", e);
    want = static_cast<uint32_t>(n);
  }
  Status last;
  for (const std::string& member : members) {
    auto ep = ParseEndpoint(member.find("://") == std::string::npos ? "tcp://" + member : member);
    if (!ep.ok()) return ep.status();
    auto where = LocatePool(*ep, options);
    if (!where.ok()) {
      last = where.status();
      LOG_INFO("pool server {}: {}", member, last.message());
      continue;
    }
    std::vector<std::string> urls;
    uint32_t have = 0, total = 0;
    for (const auto& [url, gpus] : *where) total += gpus;
    if (want > total)
      return Error(Err::kNoDevice, "tenant '{}' has {} GPU(s) in the pool, {} needed (REMORA_POOL_GPUS)", tokens[0]->tenant,
                   total, want);
    for (const auto& [url, gpus] : *where) {
      if (want != 0 && have >= want) break;
      urls.push_back(url);
      have += gpus;
    }
    LOG_INFO("pool: tenant '{}' has {} GPU(s) on {} server(s); using {}", tokens[0]->tenant, total, where->size(),
             fmt::join(urls, ","));
    return urls;
  }
  return Error(Err::kNoDevice, "no server of the pool answered where the tenant's GPUs are ({})", last.message());
}

}  // namespace

Result<Client*> Runtime::SessionFor(int device) {
  ASSIGN_OR_RETURN(Client * c, Session());
  return c->LinkFor(device);
}

bool Runtime::SameServer(int a, int b) const {
  return routes_.links.size() <= 1 || routes_.LinkIndex(a) == routes_.LinkIndex(b);
}

int Runtime::DeviceOfHandle(uint64_t h) const {
  if (routes_.links.size() <= 1) return -1;
  uint64_t kind = h >> 56;
  if (kind < static_cast<uint8_t>(HandleKind::kStream) || kind > static_cast<uint8_t>(HandleKind::kSurfObject)) return -1;
  int link = static_cast<int>((h >> 48) & 0xff);
  for (int g = 0; g < Routes::kMax; g++) {
    uint32_t v = routes_.table[static_cast<size_t>(g)].load(std::memory_order_acquire);
    if (v != 0 && static_cast<int>(v >> 16) - 1 == link) return g;
  }
  return -1;
}

int Runtime::LocalOrdinal(int device) const {
  int local = device;
  if (routed_) (void)routes_.Route(device, &local);
  return local;
}

Client* Runtime::Routes::Route(int device, int* local) const {
  if (device < 0 || device >= kMax) return nullptr;
  uint32_t v = table[static_cast<size_t>(device)].load(std::memory_order_acquire);
  if (v == 0) return nullptr;
  *local = static_cast<int>(v & 0xffff);
  return links[(v >> 16) - 1];
}

int Runtime::Routes::LinkIndex(int device) const {
  if (device < 0 || device >= kMax) return 0;
  uint32_t v = table[static_cast<size_t>(device)].load(std::memory_order_acquire);
  return v == 0 ? 0 : static_cast<int>(v >> 16) - 1;
}

Status Runtime::Connect() {
  const char* env = std::getenv("REMORA_SERVER");
  std::string servers = env && *env ? env : kDefaultServer;
  std::string url = servers;
  auto fail = [&](const Status& why) {
    Status st(Err::kNoDevice, fmt::format("cannot use the Remora server at {}: {}", url, why.message()));
    LOG_ERROR("{}", st.message());
    return st;
  };
  // Several servers: "URL,URL,...", the application's devices being theirs in that order; or
  // a pool, which says which servers hold the tenant's GPUs.
  std::vector<std::string> urls;
  if (servers.rfind("pool://", 0) == 0) {
    auto located = LocateInPool(servers);
    if (!located.ok()) return fail(located.status());
    urls = std::move(*located);
  } else {
    urls = SplitList(servers);
  }
  if (urls.empty() || urls.size() > kMaxServers)
    return fail(Error(Err::kInvalidValue, "REMORA_SERVER names {} servers (1 to {})", urls.size(), kMaxServers));
  auto tokens = TokensFromEnvironment(urls.size());
  if (!tokens.ok()) return fail(tokens.status());
  for (size_t i = 0; i < urls.size(); i++) {
    url = urls[i];
    auto ep = ParseEndpoint(url);
    if (!ep.ok()) return fail(ep.status());
    ConnectOptions options;
    options.token = (*tokens)[i];
    options.window = static_cast<uint8_t>(i);
    if (Status env_ok = OptionsFromEnvironment(&options); !env_ok.ok()) return fail(env_ok);
    auto conn = remora::Connect(*ep, options);
    if (!conn.ok()) {
      links_.clear();  // the servers connected so far end their sessions
      return fail(conn.status());
    }
    Install(std::move(conn->connection), conn->session);
  }
  Publish();
  return Status::Ok();
}

Status Runtime::Adopt(std::unique_ptr<Connection> conn, SessionInfo session) {
  std::lock_guard<std::mutex> lock(connect_mu_);
  if (connected_.load() != nullptr) return Error(Err::kInvalidValue, "this process already has a Remora session");
  connect_error_.reset();
  Install(std::move(conn), session);
  Publish();
  return Status::Ok();
}

void Runtime::Install(std::unique_ptr<Connection> connection, const SessionInfo& s) {
  SetLogIdentity(fmt::format("remora-shim s{}{}", s.session_id, s.emulated ? " (host-emulated)" : ""));
  LOG_INFO("session {} as tenant '{}' on {} ({} backend, {})", s.session_id, s.tenant, s.server_name, s.backend,
           connection->Describe());
  if (s.emulated)
    LOG_WARN("connected to a host-emulated Remora server: device memory lives in host RAM and kernels are NOT executed");
  auto link = std::make_unique<Client>(std::move(connection), s);
  Client* raw = link.get();  // the link a notice came by is the one to answer on
  link->SetCallbackSink([raw](Client::CallbackEvent e, uint64_t id) { HostCallbacks::Get().Notify(e, id, raw); });
  link->SetGraphNodeSink([this, raw](wire::GraphHostNode::Reader n) { GraphHostNodeReached(n, raw); });
  link->Watch(DeadlineFromEnvironment());  // heartbeats and the deadline (watchdog.h)
  size_t window = links_.size();
  link->SetMigrationSink([this, raw, window](std::string url, std::string token) {
    StartMigration(raw, window, std::move(url), std::move(token));
  });
  links_.push_back(std::move(link));
}

void Runtime::GraphHostNodeReached(wire::GraphHostNode::Reader n, Client* from) {
  // Only where the graph's own device-to-host copies write: a server writes nothing else of
  // this process's memory.
  std::vector<api::cuda::WireBinding> bindings = graphs().Bindings(n.getExec());
  for (auto w : n.getWrites()) {
    auto data = w.getData();
    uint64_t addr = w.getAddr(), end = 0;
    bool inside = !__builtin_add_overflow(addr, data.size(), &end);
    bool written = false;
    for (const auto& b : bindings)
      if (inside && !b.to_device && addr >= b.client_addr && end <= b.client_addr + b.size) {
        std::memcpy(reinterpret_cast<void*>(addr), data.begin(), data.size());
        written = true;
        break;
      }
    if (!written)
      LOG_WARN("the server sent {} bytes for 0x{:x}, where no copy of executable graph 0x{:x} writes: ignored", data.size(),
               addr, n.getExec());
  }
  HostCallbacks::Get().NotifyGraphNode(n.getId(), n.getExec(), from);
}

void Runtime::Publish() {
  std::vector<Client*> links;
  for (auto& l : links_) links.push_back(l.get());
  routes_.links = links;
  // Ordinals are translated (application -> link and server ordinal) with several servers,
  // and under CUDA_VISIBLE_DEVICES, which may hide and reorder one server's devices.
  routed_ = links.size() > 1 || std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
  if (routed_)
    for (Client* l : links) l->SetLinks(&routes_, &work_sequence_, links);
  if (links.size() > 1) LOG_INFO("one session on {} servers", links.size());
  connected_.store(links.front(), std::memory_order_release);
}

void Runtime::StartMigration(Client* link, size_t window, std::string url, std::string token) {
  std::lock_guard<std::mutex> lock(migrate_mu_);
  if (migrating_) {
    LOG_WARN("a move of this session is in progress: the move to {} is ignored", url);
    return;
  }
  if (migrator_.joinable()) migrator_.join();  // the previous move, finished
  migrating_ = true;
  migrator_ = std::thread([this, link, window, url = std::move(url), token = std::move(token)] {
    Status st = Migrate(*link, window, url, token);
    if (st.ok()) {
      (void)Devices(true);
    } else {
      LOG_ERROR("could not move this session to {}: {} (it goes on where it was)", url, st.message());
      std::string why = st.message();  // the administrator hears it through the old server
      (void)link->PostLocal(0, [&](wire::Request::Builder& r) { r.setMigrateFailed(why); });
      (void)link->Flush();
    }
    std::lock_guard<std::mutex> done(migrate_mu_);
    migrating_ = false;
  });
}

Status Runtime::Migrate(Client& link, size_t window, const std::string& url, const std::string& token) {
  ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(url));
  ConnectOptions options;
  options.window = static_cast<uint8_t>(window);
  RETURN_IF_ERROR(OptionsFromEnvironment(&options));
  if (!token.empty()) {
    ASSIGN_OR_RETURN(options.token, ParseToken(token));
  } else {
    ASSIGN_OR_RETURN(auto tokens, TokensFromEnvironment(routes_.links.size()));
    options.token = tokens[window];
  }
  RETURN_IF_ERROR(MoveLink(link, ep, options));
  ForgetOccupancy();  // the new server's GPU answers for itself
  if (window == 0) {
    const SessionInfo& s = link.session();
    SetLogIdentity(fmt::format("remora-shim s{}{}", s.session_id, s.emulated ? " (host-emulated)" : ""));
  }
  return Status::Ok();
}

}  // namespace remora::shim

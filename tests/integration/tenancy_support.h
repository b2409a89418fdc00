// Helpers of the tenancy and administration tests: a server with authentication, remoractl,
// tokens, and mem_shell (tests/apps/mem_shell.cu) driven through a FIFO.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "admin_client.h"
#include "process_harness.h"

namespace remora::testing {

// The raw text of `"key":VALUE` in a JSON document (strings without quotes); "" if absent.
inline std::string JsonField(const std::string& json, const std::string& key, size_t from = 0) {
  size_t k = json.find("\"" + key + "\":", from);
  if (k == std::string::npos) return "";
  size_t v = k + key.size() + 3;
  if (v < json.size() && json[v] == '"') return json.substr(v + 1, json.find('"', v + 1) - v - 1);
  size_t end = json.find_first_of(",}]", v);
  return json.substr(v, end - v);
}

class TenancyServer {
 public:
  // A server with token authentication; false if it did not start. The host backend, unless
  // REMORA_TEST_BACKEND names another (cuda: these tests run against a GPU on the GPU host).
  bool Start(int gpus = 1, const std::string& state_dir = "", std::vector<std::string> extra = {}) {
    ServerOptions o;
    if (const char* b = std::getenv("REMORA_TEST_BACKEND"); b != nullptr && *b != '\0') o.backend = b;
    o.auth = true;
    o.host_gpus = gpus;
    o.state_dir = state_dir;
    o.extra_args = std::move(extra);
    return server.Start(o);
  }

  // The same with every option of the harness (authentication is forced on).
  bool Start(ServerOptions o) {
    o.auth = true;
    return server.Start(o);
  }

  // remoractl --state-dir <ours> ARGS.
  RunResult Ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinDir() + "/remoractl", "--state-dir", server.state_dir()};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv, {}, 60);
  }

  // Creates a tenant with remoractl --json and returns its token ("" on failure, with a
  // test failure recorded).
  std::string CreateTenant(const std::string& name, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--json", "tenant", "create", name};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = Ctl(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::string token = JsonField(r.output, "token");
    EXPECT_EQ(token.rfind("remora1." + name + ".", 0), 0u) << r.output;
    return token;
  }

  std::unique_ptr<admin::AdminClient> Admin() {
    admin::ConnectOptions o;
    o.state_dir = server.state_dir();
    auto c = admin::AdminClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // The tenant's charged bytes, as the admin API reads the ledger (~0 if unknown).
  uint64_t MemoryUsed(const std::string& tenant) {
    auto admin = Admin();
    if (!admin) return ~0ull;
    auto tenants = admin->ListTenants();
    if (!tenants.ok()) return ~0ull;
    for (const auto& t : *tenants)
      if (t.name == tenant) return t.memory_used;
    return ~0ull;
  }
  // The ids of the sessions running now.
  std::vector<uint64_t> SessionIds() {
    std::vector<uint64_t> ids;
    auto admin = Admin();
    auto list = admin ? admin->ListSessions() : Result<std::vector<admin::SessionInfo>>(Status(Err::kUnknown, "no admin"));
    if (list.ok())
      for (const auto& x : *list) ids.push_back(x.id);
    return ids;
  }
  std::map<std::string, std::string> Env(const std::string& transport, const std::string& token) {
    auto env = ShimEnv(server.Url(transport));
    env["REMORA_TOKEN"] = token;
    return env;
  }

  ServerProcess server;
};

// mem_shell driven line by line.
class MemShell {
 public:
  MemShell(const std::string& dir, const std::map<std::string, std::string>& env,
           const std::string& program = "app_mem_shell") {
    static int counter = 0;
    fifo_ = dir + "/shell" + std::to_string(counter++) + ".fifo";
    ::mkfifo(fifo_.c_str(), 0600);
    proc_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{BinDir() + "/" + program, fifo_}, env);
    for (int i = 0; i < 1000 && fd_ < 0; i++) {
      fd_ = ::open(fifo_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // ENXIO until the reader opens
      if (fd_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (fd_ >= 0) ::fcntl(fd_, F_SETFL, 0);
  }
  ~MemShell() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

  // Sends one command and returns its answer without the sequence number ("" on timeout).
  std::string Do(const std::string& command, int timeout_s = 30) {
    std::string seq = std::to_string(++seq_);
    std::string line = seq + " " + command + "\n";
    if (fd_ < 0 || ::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    std::string key = "\n" + seq + " ";
    if (!proc_->WaitForOutput(key, timeout_s)) return "";
    std::string out = proc_->Output();
    size_t at = out.find(key) + key.size();
    // The answer is complete once its newline is there.
    for (int i = 0; i < 1000 && out.find('\n', at) == std::string::npos; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      out = proc_->Output();
    }
    return out.substr(at, out.find('\n', at) - at);
  }

  BackgroundProcess& process() { return *proc_; }

 private:
  std::string fifo_;
  int fd_ = -1;
  int seq_ = 0;
  std::unique_ptr<BackgroundProcess> proc_;
};

// Polls `fn` every 20 ms until it returns true or `timeout_ms` passes.
template <typename Fn>
bool Eventually(Fn&& fn, int timeout_ms = 10000) {
  for (int waited = 0; waited < timeout_ms; waited += 20) {
    if (fn()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return fn();
}

}  // namespace remora::testing

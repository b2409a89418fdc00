// remoractl pool ...: a pool of servers seen through any one of them (remora-server --pool):
// its servers and GPUs (per server and in total), its tenants' pool-wide limits and shares,
// and placing a tenant's GPUs across servers.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "admin_client.h"

namespace remora::ctl {

struct PoolOptions {
  std::string name;
  int count = 1;
  std::string policy = "spread", model, min_free, server;
  std::vector<std::string> servers;
  int gpu = -1;
  bool json = false;
};

struct PoolCommands {
  CLI::App* status = nullptr;
  CLI::App* tenants = nullptr;
  CLI::App* attach = nullptr;
  CLI::App* detach = nullptr;
  bool parsed() const { return status->parsed() || tenants->parsed() || attach->parsed() || detach->parsed(); }
};

PoolCommands AddPoolCommands(CLI::App& app, PoolOptions& o);
// Runs the parsed one. Usage errors are kInvalidValue with a message starting "usage:".
Status RunPool(admin::AdminClient& c, const PoolCommands& cmds, const PoolOptions& o);

}  // namespace remora::ctl

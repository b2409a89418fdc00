// The pool agent's way into its supervisor (pool/pool_agent.h's PoolHost): each method runs
// its work on the supervisor's loop thread through Call (supervisor_pool.cc), so the agent's
// threads may wait for the loop, never the other way round.
#pragma once

#include "pool/pool_agent.h"

namespace remora::server {

class Supervisor;

class PoolLink final : public pool::PoolHost {
 public:
  explicit PoolLink(Supervisor& s) : s_(s) {}
  pool::ServerRecord LocalRecord() override;
  void Apply(const pool::PoolView& view, bool fresh) override;
  void LeaseGranted(int64_t lease) override;
  void Fence(const std::string& why) override;
  void RaiseShare(int64_t lease, const std::string& tenant, uint64_t bytes) override;
  uint64_t LowerShare(const std::string& tenant, uint64_t bytes) override;
  std::map<std::string, Claim> Claims() override;

 private:
  Supervisor& s_;
};

}  // namespace remora::server

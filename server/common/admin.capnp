# The administration API of remora-server (Cap'n Proto RPC, two-party).
#
# Where it is served:
#  - <state-dir>/admin.sock, a unix socket with mode 0600: the server checks the peer's
#    credentials (SO_PEERCRED: root or the server's own uid) when it accepts; the bootstrap
#    capability of such a connection is `Admin` itself.
#  - optionally tcp://HOST:PORT (--admin-listen): the bootstrap capability is `AdminLogin`;
#    the client proves that it knows the admin token with the SCRAM proof of a tenant's
#    handshake under its own label (AdminAuthMessage in protocol/include/remora/protocol/auth.h),
#    so the token never crosses the wire, checks the server's signature, and receives `Admin`.
#
# Errors: every method answers with an `Outcome` (code = cudaError_t number of the failure, 0 for
# success, plus a one-line message); a broken connection surfaces as an RPC exception.
# Sizes are bytes; "unlimited" limits are `hasLimit = false`.
@0xc3a1f4e2b7d95a01;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("remora::admin::rpc");

struct Outcome {
  code @0 :UInt32;              # 0: success; else the remora::Err (cudaError_t) number
  message @1 :Text;
}

struct ServerInfo {
  version @0 :Text;
  hostname @1 :Text;
  backend @2 :Text;             # "cuda" or "host-emulated"
  emulated @3 :Bool;            # true: device memory lives in host RAM, kernels do not run
  driverVersion @4 :Int32;
  pid @5 :Int32;
  startedAt @6 :Int64;          # unix seconds
  authRequired @7 :Bool;
}

struct TenantGpuUsage {
  gpu @0 :Int32;                # server GPU index
  used @1 :UInt64;              # counted against the limit
  contextOverhead @2 :UInt64;   # reported, not counted
  gpuTimeNs @3 :UInt64;         # GPU time its work took here since the server started (measured while enforced)
}

# A tenant's compute settings (server/sched/compute_settings.h), the same on each GPU.
struct ComputeSettings {
  hasWeight @0 :Bool;           # false: unset (weight 100)
  weight @1 :UInt32;            # 1..10000, relative to the GPU's other busy tenants; 30% is 3000
  hasMax @2 :Bool;              # false: no cap
  maxQuotaUs @3 :UInt64;        # GPU time allowed per period (a hard cap), when hasMax
  maxPeriodUs @4 :UInt64;
  priority @5 :Text;            # low | normal | high
}

struct Tenant {
  name @0 :Text;
  hasLimit @1 :Bool;
  memoryLimit @2 :UInt64;       # per GPU, when hasLimit
  memoryUsed @3 :UInt64;        # sum over the tenant's GPUs
  contextOverhead @4 :UInt64;   # sum over the tenant's GPUs
  refused @5 :UInt64;           # allocations refused by the quota since the server started
  sessions @6 :UInt32;
  gpus @7 :List(Int32);         # attached GPUs of this server, ascending
  usage @8 :List(TenantGpuUsage);  # one entry per GPU with any use or attachment
  createdAt @9 :Int64;
  compute @10 :ComputeSettings;
  gpuTimeNs @11 :UInt64;        # sum over the tenant's GPUs
  hasPoolLimit @12 :Bool;       # a pool's tenant with a limit across the pool
  poolLimit @13 :UInt64;        # bytes on all GPUs of all servers, when hasPoolLimit
  poolShare @14 :UInt64;        # the part of poolLimit this server holds now
}

struct Gpu {
  index @0 :Int32;
  name @1 :Text;
  uuid @2 :Text;
  pciBusId @3 :Text;
  totalMemory @4 :UInt64;
  used @5 :UInt64;              # the ledger's sum over all tenants on this GPU
  tenants @6 :List(Text);       # tenants attached to it
  computeEnforced @7 :Bool;     # its work is scheduled by compute shares (and measured)
  turnSession @8 :UInt64;       # the session whose turn it is now (0: none)
}

struct Session {
  id @0 :UInt64;
  tenant @1 :Text;
  clientPid @2 :UInt32;
  host @3 :Text;
  user @4 :Text;
  program @5 :Text;
  transport @6 :Text;           # shm | tcp | rdma
  peer @7 :Text;
  startedAt @8 :Int64;          # unix seconds
  memoryCurrent @9 :UInt64;     # bytes the session holds, all GPUs
  workerPid @10 :Int32;
  dataPath @11 :Text;           # how bulk data moves: shared-memory | socket | rdma-host-staged
  gpuTimeNs @12 :UInt64;        # GPU time its work took, all GPUs (measured while enforced)
  migrateFailed @13 :Text;      # why the last move the administrator asked for did not happen ("": none)
}

# ---- A pool of servers (remora-server --pool; docs/ARCHITECTURE.md "A pool of servers") ----
# Any server of a pool answers for the whole pool: these read and change the pool's store.

struct PoolServer {
  name @0 :Text;
  urls @1 :List(Text);          # where clients reach it
  backend @2 :Text;
  emulated @3 :Bool;
  version @4 :Text;
  health @5 :Text;              # ok | draining
  startedAt @6 :Int64;          # unix seconds
  updatedAt @7 :Int64;          # unix seconds of its last report
  sessions @8 :UInt32;
  appliedRevision @9 :Int64;    # how far it applied the pool's tenants and assignments
}

struct PoolGpu {
  server @0 :Text;
  index @1 :Int32;              # the server's GPU index
  uuid @2 :Text;
  name @3 :Text;
  totalMemory @4 :UInt64;
  used @5 :UInt64;              # charged to tenants (the server's last report)
  tenants @6 :List(Text);       # assigned to it
  gone @7 :Bool;                # its server left the pool (its lease ended): assigned, unreachable
}

struct PoolTenantHere {
  server @0 :Text;
  used @1 :UInt64;              # bytes charged there (its last report)
  sessions @2 :UInt32;
  share @3 :UInt64;             # the part of the pool limit it holds
}

struct PoolTenant {
  name @0 :Text;
  hasLimit @1 :Bool;
  memoryLimit @2 :UInt64;       # per GPU, when hasLimit
  hasPoolLimit @3 :Bool;
  poolLimit @4 :UInt64;         # across the pool, when hasPoolLimit
  used @5 :UInt64;              # sum of the servers' reports
  shares @6 :UInt64;            # sum of the servers' shares (never above poolLimit)
  sessions @7 :UInt32;
  gpus @8 :UInt32;              # assigned, gone ones included
  servers @9 :List(PoolTenantHere);
}

struct PoolAssignment {
  tenant @0 :Text;
  server @1 :Text;
  gpu @2 :Int32;
  uuid @3 :Text;
  gone @4 :Bool;
}

struct PoolInfo {
  name @0 :Text;                # the answering server's name in the pool
  endpoints @1 :List(Text);     # the store's (etcd) client URLs
  prefix @2 :Text;
  revision @3 :Int64;
  fresh @4 :Bool;               # read from the store now; false: it is unreachable, this is the mirror
  registered @5 :Bool;          # the answering server holds its lease
  servers @6 :List(PoolServer);
  gpus @7 :List(PoolGpu);
  tenants @8 :List(PoolTenant);
  assignments @9 :List(PoolAssignment);  # by tenant, in its devices' order
}

interface Admin {
  info @0 () -> (outcome :Outcome, info :ServerInfo);
  # gpus: the GPUs to attach when !allGpus; allGpus: every GPU of this server.
  # A pool's tenant is created in the pool (served by every server; GPUs by poolAttach, or
  # `gpus` of the answering server; allGpus is ignored) with a limit across the pool when
  # hasPoolLimit.
  createTenant @1 (name :Text, hasLimit :Bool, memoryLimit :UInt64, allGpus :Bool, gpus :List(Int32),
                   hasPoolLimit :Bool, poolLimit :UInt64)
      -> (outcome :Outcome, token :Text);
  listTenants @2 () -> (outcome :Outcome, tenants :List(Tenant));
  # Takes effect for running sessions; lowering below current use refuses new allocations
  # and frees nothing.
  setMemoryLimit @3 (name :Text, hasLimit :Bool, memoryLimit :UInt64) -> (outcome :Outcome);
  # Refused (kNotPermitted) while sessions run unless force, which ends them.
  deleteTenant @4 (name :Text, force :Bool) -> (outcome :Outcome);
  listGpus @5 () -> (outcome :Outcome, gpus :List(Gpu));
  attach @6 (name :Text, gpu :Int32) -> (outcome :Outcome);
  detach @7 (name :Text, gpu :Int32) -> (outcome :Outcome);
  listSessions @8 () -> (outcome :Outcome, sessions :List(Session));
  killSession @9 (id :UInt64, reason :Text) -> (outcome :Outcome);
  # Replaces the tenant's compute settings; running sessions follow at their next decision.
  setCompute @10 (name :Text, settings :ComputeSettings) -> (outcome :Outcome);
  # Planned migration: asks session `id`'s application to move the session to the server at
  # `url` (token: the tenant's token there; empty: the application's own). Answered once the
  # request is on its way; the session leaves this server's list when the move completes.
  migrateSession @11 (id :UInt64, url :Text, token :Text) -> (outcome :Outcome);
  # A pool: the whole pool. kNotSupported on a server of its own.
  poolInfo @12 () -> (outcome :Outcome, pool :PoolInfo);
  # Chooses `count` GPUs across the pool's servers (policy spread | pack; model: the name
  # contains it; minFreeMemory; servers: only these) and assigns them to the tenant.
  poolAttach @13 (tenant :Text, count :Int32, policy :Text, model :Text, minFreeMemory :UInt64, servers :List(Text))
      -> (outcome :Outcome, placed :List(PoolAssignment));
  # Unassigns one GPU (server and index), all of a server's (gpu < 0), or all (server "").
  poolDetach @14 (tenant :Text, server :Text, gpu :Int32) -> (outcome :Outcome, detached :Int32);
  setPoolLimit @15 (name :Text, hasLimit :Bool, limit :UInt64) -> (outcome :Outcome);
  # Assigns GPU `gpu` (the server's index) of server `server` to the tenant (the Kubernetes
  # driver: the GPU the scheduler allocated). Ok if it is the tenant's already.
  poolAssign @16 (tenant :Text, server :Text, gpu :Int32) -> (outcome :Outcome);
}

interface AdminLogin {
  # Step 1: the client's nonce in, the server's nonce and a one-shot prover out.
  challenge @0 (clientNonce :Data) -> (serverNonce :Data, prover :AdminProver);
}

interface AdminProver {
  # Step 2 (once): proof = ClientProof(secret, AdminAuthMessage(clientNonce, serverNonce)).
  # serverSignature = ServerSignature(ServerKey, AdminAuthMessage | "|server"): the server's
  # proof that it holds the admin token's verifier (auth.h). One challenge per connection.
  prove @0 (proof :Data) -> (outcome :Outcome, admin :Admin, serverSignature :Data);
}

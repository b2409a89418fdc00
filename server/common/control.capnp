# Supervisor <-> worker control messages, on the socketpair each worker gets as fd 4.
@0x9050e78dc0a515dc;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("remora::control");

struct SessionKeys {
  cipher @0 :UInt8;            # remora::Cipher
  clientToServer @1 :Data;     # 32 bytes each
  serverToClient @2 :Data;
}

# IPC between sessions of one server (server/supervisor/ipc_registry.h, docs/ARCHITECTURE.md
# "IPC between processes"). A worker asks, the supervisor answers with an ipcReply of the
# same requestId on the same socket.
struct IpcExport {             # worker -> supervisor: register an export
  requestId @0 :UInt64;
  kind @1 :UInt8;              # 0 memory, 1 event, 2 physical (cuMemCreate), 3 pool, 4 pool pointer (worker/session/ipc_link.h)
  gpu @2 :Int32;               # server GPU index
  size @3 :UInt64;             # bytes (memory)
  real @4 :Data;               # the driver's 64-byte handle (cuda backend); a memfd may ride along
  localId @5 :UInt64;          # the exporter's own name for it (its allocation's base, its event)
}
struct IpcOpen {               # worker -> supervisor: open a handle a client presented
  requestId @0 :UInt64;
  kind @1 :UInt8;
  handle @2 :Data;             # the 64 opaque bytes
}
struct IpcUnexport {
  requestId @0 :UInt64;
  exportId @1 :UInt64;
}
struct IpcReply {              # supervisor -> worker
  requestId @0 :UInt64;
  status @1 :UInt32;           # CUresult
  handle @2 :Data;             # ipcExport: the Remora handle for the client
  exportId @3 :UInt64;
  real @4 :Data;               # ipcOpen: the exporter's driver handle (and its memfd, if any)
  size @5 :UInt64;
  gpu @6 :Int32;
  importers @7 :UInt32;        # ipcUnexport: opens still live (the free is deferred until 0)
}

# A pool's tenant (docs/ARCHITECTURE.md, "Pool-wide quotas"): this server's share of its
# pool-wide memory limit is used up; the worker asks for `bytes` more. Answered by an ipcReply
# of the same requestId: status 0 (the share was raised: reserve again) or 2 (no more).
struct QuotaBorrow {
  requestId @0 :UInt64;
  gpu @1 :Int32;
  bytes @2 :UInt64;
}

struct MigrateOrder {
  url @0 :Text;
  token @1 :Text;
}

# NCCL (server/supervisor/nccl_registry.h, docs/ARCHITECTURE.md "NCCL"): a worker registers
# the real ncclUniqueId it made and gets the capability its application sees; it presents a
# capability to get the real id; the supervisor tells it when a member of a communicator's
# clique is gone. Answers come as ncclAnswer with the question's requestId, in any order.
struct NcclAsk {               # worker -> supervisor
  requestId @0 :UInt64;
  op @1 :UInt8;                # 0: register a real id, 1: resolve a capability, 2: leave (no answer)
  id @2 :Data;                 # 128 bytes: the real id (register) or the capability (resolve)
  cliqueServer @3 :UInt64;     # leave: the session destroyed its last communicator of this clique
  cliqueId @4 :UInt64;
}
struct NcclAnswer {            # supervisor -> worker; also origin server -> member server
  requestId @0 :UInt64;
  status @1 :UInt32;           # ncclResult_t
  id @2 :Data;                 # register: the capability; resolve: the real id
  cliqueServer @3 :UInt64;     # the id's clique: its origin server and number
  cliqueId @4 :UInt64;
}
struct NcclLost {              # supervisor -> worker: a member of the clique is gone
  cliqueServer @0 :UInt64;
  cliqueId @1 :UInt64;
  reason @2 :Text;
}

# Between the supervisors of two servers (server/supervisor/peer_link.h): sealed frames after
# an authenticated exchange on the cluster key.
struct PeerResolve {           # member server -> origin server
  requestId @0 :UInt64;
  capability @1 :Data;
  tenant @2 :Text;
  session @3 :UInt64;          # the member's session on its server
}
struct PeerLost {              # either way: a member session (or all of a server's) is gone
  cliqueServer @0 :UInt64;
  cliqueId @1 :UInt64;
  session @2 :UInt64;          # the member's session on the sending server
  reason @3 :Text;
  left @4 :Bool;               # member -> origin: it left cleanly (destroyed its communicators)
}
struct PeerMessage {
  union {
    heartbeat @0 :Void;
    resolve @1 :PeerResolve;
    resolved @2 :NcclAnswer;
    lost @3 :PeerLost;
  }
}

struct ControlMessage {
  union {
    setGpus @0 :List(Int32);   # the tenant's GPUs on this server, now (attach/detach)
    endSession @1 :Text;       # reason: admin kill, tenant deleted, server shutdown
    sessionKeys @2 :SessionKeys;  # first message of an encrypted session (--encrypted)
    dataConnection @3 :UInt8;  # tcp data stream INDEX, authenticated; its socket rides along (SCM_RIGHTS)
    ipcExport @4 :IpcExport;
    ipcOpen @5 :IpcOpen;
    ipcClose @6 :UInt64;       # worker -> supervisor: this session closed its open of export ID
    ipcUnexport @7 :IpcUnexport;  # worker -> supervisor: the exporter freed an export (answered: importers left)
    ipcReply @8 :IpcReply;
    ipcRelease @9 :UInt64;     # supervisor -> exporter: the last importer of freed export ID closed it
    migrate @10 :MigrateOrder; # supervisor -> worker: tell the client to move to another server
    migrateFailed @11 :Text;   # worker -> supervisor: why its client did not move (shown to the admin)
    ncclAsk @12 :NcclAsk;
    ncclAnswer @13 :NcclAnswer;
    ncclLost @14 :NcclLost;
    quotaBorrow @15 :QuotaBorrow;  # worker -> supervisor: more of a pool-wide limit (answered: ipcReply)
  }
}

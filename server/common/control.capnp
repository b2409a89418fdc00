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
  kind @1 :UInt8;              # 0 memory, 1 event, 2 physical (cuMemCreate), 3 pool, 4 pool pointer (worker/ipc_link.h)
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
    quotaBorrow @12 :QuotaBorrow;  # worker -> supervisor: more of a pool-wide limit (answered: ipcReply)
  }
}

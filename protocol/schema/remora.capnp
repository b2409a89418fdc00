# Remora wire schema: the handshake, one union of calls (Request), its replies (Reply) and
# server-initiated notices. See docs/PROTOCOL.md for framing and the bulk-data rules.
#
# Compatibility rules: fields are only ever added (never renumbered or retyped); a peer that
# receives a union member it does not know answers cudaErrorNotSupported. The handshake's
# protocolVersion changes only when the framing itself changes.
@0xc11f3d3e1ee05282;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("remora::wire");

const protocolVersion :UInt32 = 1;

# ---------------------------------------------------------------------------------------
# Handshake: Hello -> Challenge -> Proof -> Welcome | Refusal (see docs/PROTOCOL.md).
# The token never crosses the wire: the client proves knowledge of it (SCRAM-style).

struct ClientIdentity {
  hostname @0 :Text;
  pid @1 :UInt32;
  program @2 :Text;
  user @3 :Text;
}

struct Hello {
  protocolVersion @0 :UInt32;
  tenant @1 :Text;             # from the token ("remora1.<tenant>.<secret>"); empty if none
  clientNonce @2 :Data;        # 32 random bytes
  client @3 :ClientIdentity;
  shimVersion @4 :Text;
}

struct Challenge {
  serverNonce @0 :Data;        # 32 random bytes
  authRequired @1 :Bool;       # false on a server started with --auth none
  serverVersion @2 :Text;
}

struct Proof {
  clientProof @0 :Data;        # ClientKey XOR HMAC(StoredKey, AuthMessage)
}

struct Welcome {
  sessionId @0 :UInt64;
  tenant @1 :Text;
  backend @2 :Text;            # "cuda" or "host-emulated"
  emulated @3 :Bool;
  serverName @4 :Text;
  driverVersion @5 :Int32;     # cuDriverGetVersion of the server (CUDA_VERSION style)
}

struct Refusal {
  error @0 :UInt32;            # cudaError_t the shim returns (cudaErrorNoDevice for auth)
  message @1 :Text;
}

struct HandshakeMessage {
  union {
    hello @0 :Hello;
    challenge @1 :Challenge;
    proof @2 :Proof;
    welcome @3 :Welcome;
    refusal @4 :Refusal;
  }
}

# ---------------------------------------------------------------------------------------
# Calls. The frame header carries the sequence number (tag); replies echo it.
# Handles (streams, events, modules, functions) are opaque 64-bit ids issued by the worker
# and valid only in the session that created them. Stream 0 is the legacy default stream,
# 1 is cudaStreamLegacy, 2 is cudaStreamPerThread.

struct StreamRef {
  handle @0 :UInt64;
  perThread @1 :Bool;          # resolve 0 as the calling thread's per-thread stream (_ptds)
}

struct MemAlloc { size @0 :UInt64; }
struct MemFree { ptr @0 :UInt64; }

struct MemcpyHtoD {
  dst @0 :UInt64;
  size @1 :UInt64;             # bytes; the payload travels as the frame's bulk data
  stream @2 :StreamRef;
  async @3 :Bool;              # cudaMemcpyAsync: no reply; errors surface at the next sync
}

struct MemcpyDtoH {
  src @0 :UInt64;
  size @1 :UInt64;             # the reply's bulk data is the bytes
  stream @2 :StreamRef;
}

struct MemcpyDtoD {
  dst @0 :UInt64;
  src @1 :UInt64;
  size @2 :UInt64;
  stream @3 :StreamRef;
  async @4 :Bool;
}

struct Memset {
  dst @0 :UInt64;
  value @1 :UInt8;
  size @2 :UInt64;
  stream @3 :StreamRef;
  async @4 :Bool;
}

struct StreamCreate {
  flags @0 :UInt32;
  priority @1 :Int32;
}

struct StreamWaitEvent {
  stream @0 :StreamRef;
  event @1 :UInt64;
  flags @2 :UInt32;
}

struct EventRecord {
  event @0 :UInt64;
  stream @1 :StreamRef;
}

struct EventPair {
  start @0 :UInt64;
  end @1 :UInt64;
}

struct Request {
  device @0 :Int32;            # the calling thread's current device ordinal
  thread @1 :UInt64;           # calling thread (for per-thread default streams)
  union {
    getDevices @2 :Void;
    memAlloc @3 :MemAlloc;
    memFree @4 :MemFree;
    memcpyHtoD @5 :MemcpyHtoD;
    memcpyDtoH @6 :MemcpyDtoH;
    memcpyDtoD @7 :MemcpyDtoD;
    memset @8 :Memset;
    memGetInfo @9 :Void;
    streamCreate @10 :StreamCreate;
    streamDestroy @11 :StreamRef;
    streamSynchronize @12 :StreamRef;
    streamQuery @13 :StreamRef;
    streamWaitEvent @14 :StreamWaitEvent;
    eventCreate @15 :UInt32;   # flags
    eventDestroy @16 :UInt64;
    eventRecord @17 :EventRecord;
    eventSynchronize @18 :UInt64;
    eventQuery @19 :UInt64;
    eventElapsedTime @20 :EventPair;
    deviceSynchronize @21 :Void;
    deviceReset @22 :Void;
    goodbye @23 :Void;         # orderly end of session (process exit)
    ping @24 :Void;            # answers with the current device generation
  }
}

struct DeviceInfo {
  ordinal @0 :Int32;           # as the application sees it
  gpuId @1 :UInt32;            # server-side GPU id
  name @2 :Text;
  uuid @3 :Data;               # 16 bytes
  totalMemory @4 :UInt64;      # the tenant's view: min(limit, physical)
  physicalMemory @5 :UInt64;
  attributes @6 :List(Int32);  # indexed by cudaDeviceAttr; 0 where unknown
  emulated @7 :Bool;
  pciBusId @8 :Text;
}

struct MemInfo {
  free @0 :UInt64;
  total @1 :UInt64;
}

struct Reply {
  error @0 :UInt32;            # cudaError_t of this call
  message @1 :Text;            # human detail for logs (empty on success)
  asyncError @2 :UInt32;       # first failure of an earlier asynchronous call, if any
  asyncMessage @3 :Text;
  deviceGeneration @4 :UInt64; # bumps when GPUs are attached or detached
  union {
    none @5 :Void;
    devices @6 :List(DeviceInfo);
    pointer @7 :UInt64;
    handle @8 :UInt64;
    memInfo @9 :MemInfo;
    elapsedMs @10 :Float32;
  }
}

# Server-initiated, unsolicited (frame tag 0).
struct Notice {
  union {
    devicesChanged @0 :UInt64; # new generation
    sessionEnding @1 :Text;    # reason (admin kill, tenant deleted, server shutdown)
  }
}

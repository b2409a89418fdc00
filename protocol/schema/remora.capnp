# Remora wire schema: the handshake, one union of calls (Request), its replies (Reply) and
# server-initiated notices. See docs/PROTOCOL.md for framing and the bulk-data rules.
#
# Compatibility rules: fields are only ever added (never renumbered or retyped); a peer that
# receives a union member it does not know answers cudaErrorNotSupported. The handshake's
# protocolVersion changes only when the framing itself changes.
@0xc11f3d3e1ee05282;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("remora::wire");

const protocolVersion :UInt32 = 2;  # 2: key exchange, sealed proof, server signature

# ---------------------------------------------------------------------------------------
# Handshake: Hello -> Challenge -> Proof -> Welcome | Refusal (see docs/PROTOCOL.md).
# The token never crosses the wire: the client proves knowledge of it (SCRAM-style), sealed
# under a key from an ephemeral X25519 exchange and bound to the transcript; the server
# proves in turn that it knows the tenant's ServerKey. The same exchange gives the keys of
# an encrypted data path.

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
  keyShare @5 :Data;           # X25519 public key of this connection (32 bytes)
  encrypt @6 :UInt8;           # the client's REMORA_ENCRYPT: 0 off, 1 auto, 2 on
  ciphers @7 :UInt32;          # bit (1 << cipher) for each record cipher it runs
  dataStreams @8 :UInt8;       # tcp: parallel data connections the client would open (0: none)
  window @9 :UInt8;            # the client's index for this server (0 for one server): the session
                               # mints its handles, and the host backend its device addresses, in
                               # this window, so objects of several servers never collide in one
                               # application (docs/PROTOCOL.md, "Windows")
  locate @10 :Bool;            # a pool:// client asks where its tenant's GPUs are: the server
                               # answers a Welcome with poolServers (no session) and closes
}

struct Challenge {
  serverNonce @0 :Data;        # 32 random bytes
  authRequired @1 :Bool;       # false on a server started with --auth none
  serverVersion @2 :Text;
  keyShare @3 :Data;           # X25519 public key of this connection (32 bytes)
  cipher @4 :UInt8;            # the data path's record cipher; 0: not encrypted
}

struct Proof {
  clientProof @0 :Data;        # protocol 1 only (unused)
  sealedProof @1 :Data;        # AEAD(proof key, ClientKey XOR HMAC(StoredKey, AuthMessage))
}

struct Welcome {
  sessionId @0 :UInt64;
  tenant @1 :Text;
  backend @2 :Text;            # "cuda" or "host-emulated"
  emulated @3 :Bool;
  serverName @4 :Text;
  driverVersion @5 :Int32;     # cuDriverGetVersion of the server (CUDA_VERSION style)
  serverSignature @6 :Data;    # HMAC(ServerKey, AuthMessage | this Welcome); none without auth
  dataStreams @7 :UInt8;       # tcp: data connections the client opens next (0: none)
  poolServers @8 :List(Text);  # locate: the servers holding the tenant's GPUs, in device order
  poolGpus @9 :List(UInt32);   # locate: how many of them each has
  kernelDriver @10 :Text;      # the kernel-mode driver's version ("580.159.04"; empty when emulated)
}

# The first message of a tcp data connection (docs/PROTOCOL.md, "Data connections"): it
# joins session `sessionId` as its stream `index`. `mac` is HMAC-SHA-256 under the data key
# both ends derived from the session's key exchange. Answered by dataAccepted or a Refusal.
struct DataHello {
  sessionId @0 :UInt64;
  index @1 :UInt8;
  mac @2 :Data;                # 32 bytes
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
    dataHello @5 :DataHello;
    dataAccepted @6 :Void;
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
  size @1 :UInt64;             # bytes; the payload travels as the frame's bulk data...
  stream @2 :StreamRef;
  async @3 :Bool;              # cudaMemcpyAsync: no reply; errors surface at the next sync
  hostRegion @4 :UInt64;       # ...unless nonzero: the source lies in this shared region
  hostOffset @5 :UInt64;
  clientAddr @6 :UInt64;       # the application's source address (a capture binds it)
}

struct MemcpyDtoH {
  src @0 :UInt64;
  size @1 :UInt64;             # the reply's bulk data is the bytes...
  stream @2 :StreamRef;
  hostRegion @3 :UInt64;       # ...unless nonzero: the worker writes into this shared region
  hostOffset @4 :UInt64;
  async @5 :Bool;              # with hostRegion: no reply; errors surface at the next sync
  clientAddr @6 :UInt64;       # the application's destination address (a capture binds it)
  viaBounce @7 :Bool;          # hostRegion is the client's bounce buffer, not the destination
}

# Pinned host memory shared with the worker (shm): the region's memfd travels on the
# transport's descriptor channel just before this request; the worker maps it and registers
# it with the driver, so copies DMA straight from and to the application's buffer.
struct RegisterHostRegion {
  id @0 :UInt64;               # chosen by the client, unique in the session
  size @1 :UInt64;
  addr @2 :UInt64;             # the client's address of it: the worker maps it there too if it
                               # can, so the device reaches it at the application's own address.
                               # The reply's `pointer` is the device's address of the region.
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

struct Dim3 {
  x @0 :UInt32;
  y @1 :UInt32;
  z @2 :UInt32;
}

# A fat binary, identified by the BLAKE2b-256 of its image. The first load of a session sends
# no image; the worker answers needImage unless the tenant's own cache has it.
struct ModuleLoad {
  hash @0 :Data;               # BLAKE2b-256 of the image (32 bytes), checked by the server
  size @1 :UInt64;
  hasImage @2 :Bool;           # the frame's bulk is the image
  fresh @3 :Bool;              # a module of its own even if this session loaded the image
                               # before (the driver API: each cuModuleLoadData is one)
}

# cuLinkCreate/AddData/Complete in one request: the inputs (PTX, cubins, fat binaries,
# objects, libraries) and the numeric JIT options; the reply's `linked` is the image. The
# whole request fits in one message (kMaxBodyWords).
struct Link {
  inputs @0 :List(Input);
  options @1 :List(Option);
  struct Input {
    type @0 :UInt32;           # CUjitInputType
    name @1 :Text;
    data @2 :Data;
    options @3 :List(Option);  # cuLinkAddData's own options
  }
  struct Option {
    option @0 :UInt32;         # CUjit_option; only options whose value is a number
    value @1 :UInt64;
  }
}

struct GetFunction {
  module @0 :UInt64;
  name @1 :Text;               # mangled device name
}

struct GetGlobal {
  module @0 :UInt64;
  name @1 :Text;
  size @2 :UInt64;             # registered size (the host-emulated backend allocates it)
}

struct LaunchAttribute {
  id @0 :UInt32;               # cudaLaunchAttributeID
  value @1 :Data;              # the cudaLaunchAttributeValue bytes
}

struct LaunchKernel {
  function @0 :UInt64;
  grid @1 :Dim3;
  block @2 :Dim3;
  sharedMem @3 :UInt32;
  stream @4 :StreamRef;
  params @5 :Data;             # packed at the offsets the worker reported
  cooperative @6 :Bool;
  attributes @7 :List(LaunchAttribute);
}

struct FuncAttribute {
  function @0 :UInt64;
  attribute @1 :Int32;         # cudaFuncAttribute / CUfunction_attribute
  value @2 :Int32;
}

struct Occupancy {
  function @0 :UInt64;
  kind @1 :Kind;
  blockSize @2 :Int32;
  dynamicSmem @3 :UInt64;
  flags @4 :UInt32;
  numBlocks @5 :Int32;
  launch @6 :LaunchKernel;     # for maxActiveClusters
  enum Kind {
    maxActiveBlocks @0;
    availableDynamicSmem @1;
    maxActiveClusters @2;
    maxPotentialClusterSize @3;
  }
}

# A strided copy of `height` x `depth` rows of `width` bytes (1D: height = depth = 1). Host
# sides are packed (rows back to back) on the wire: H2D carries them as bulk, D2H returns
# them as the reply's bulk.
struct Copy3D {
  dst @0 :UInt64;
  dstPitch @1 :UInt64;
  dstHeight @2 :UInt64;        # rows per slice on the destination
  src @3 :UInt64;
  srcPitch @4 :UInt64;
  srcHeight @5 :UInt64;
  width @6 :UInt64;
  height @7 :UInt64;
  depth @8 :UInt64;
  kind @9 :Kind;
  stream @10 :StreamRef;
  async @11 :Bool;
  # A CUDA array side (issue 14): the session handle of the array (0: the side is `dst`/`src`
  # above) and the copy's origin in it - x in bytes, y in rows, z in slices.
  dstArray @12 :UInt64;
  dstX @13 :UInt64;
  dstY @14 :UInt64;
  dstZ @15 :UInt64;
  srcArray @16 :UInt64;
  srcX @17 :UInt64;
  srcY @18 :UInt64;
  srcZ @19 :UInt64;
  enum Kind {
    hostToDevice @0;
    deviceToHost @1;
    deviceToDevice @2;
  }
}

struct Memset3D {
  dst @0 :UInt64;
  pitch @1 :UInt64;
  rowsPerSlice @2 :UInt64;
  value @3 :UInt8;
  width @4 :UInt64;
  height @5 :UInt64;
  depth @6 :UInt64;
  stream @7 :StreamRef;
  async @8 :Bool;
}

struct MallocPitch {
  width @0 :UInt64;
  height @1 :UInt64;
}

struct MallocAsync {
  size @0 :UInt64;
  stream @1 :StreamRef;
  pool @2 :UInt64;             # 0: the device's current pool
}

struct FreeAsync {
  ptr @0 :UInt64;
  stream @1 :StreamRef;
}

struct PoolAttribute {
  pool @0 :UInt64;
  attribute @1 :Int32;         # cudaMemPoolAttr
  value @2 :UInt64;
}

struct PoolCreate {
  device @0 :Int32;
  maxSize @1 :UInt64;
  handleTypes @2 :UInt32;
}

struct MemcpyPeer {
  dst @0 :UInt64;
  dstDevice @1 :Int32;
  src @2 :UInt64;
  srcDevice @3 :Int32;
  size @4 :UInt64;
  stream @5 :StreamRef;
  async @6 :Bool;
}

struct PeerAccess {
  peer @0 :Int32;
  op @1 :Op;
  enum Op {
    query @0;
    enable @1;
    disable @2;
  }
}

struct DeviceLimit {
  limit @0 :Int32;             # cudaLimit
  value @1 :UInt64;
  set @2 :Bool;
}

# Planned migration (docs/ARCHITECTURE.md, "Planned migration"): what a session holds that
# moves with it to another server. Ordinals are the session's device ordinals on the
# server that answers or receives it.
struct Migration {
  allocations @0 :List(Allocation);
  streams @1 :List(Object);
  events @2 :List(Object);
  modules @3 :List(Module);
  pools @4 :List(Pool);
  struct Pool {                # a device's own pool the application asked for (never one it
    handle @0 :UInt64;         # created): its handle, device and settable attributes
    ordinal @1 :Int32;
    attributes @2 :List(PoolAttribute);
  }
  struct PoolAttribute {       # CUmemPool_attribute: the release threshold, the reuse policies
    id @0 :Int32;
    value @1 :UInt64;
  }
  struct Allocation {
    ptr @0 :UInt64;
    size @1 :UInt64;
    ordinal @2 :Int32;
    streamOrdered @3 :Bool;    # of cudaMallocAsync from the device's own pool: freed by
                               # cudaFreeAsync (or cudaFree) there too
  }
  struct Object {              # a stream or an event: its handle, device and creation flags
    handle @0 :UInt64;
    ordinal @1 :Int32;
    flags @2 :UInt32;
    priority @3 :Int32;
  }
  struct Module {
    handle @0 :UInt64;
    ordinal @1 :Int32;
    hash @2 :Data;             # BLAKE2b-256 of the image (32 bytes)
    size @3 :UInt64;           # image bytes
    functions @4 :List(Function);
  }
  struct Function {
    handle @0 :UInt64;
    name @1 :Text;
  }
}

struct HostFunc {
  stream @0 :StreamRef;
  id @1 :UInt64;               # the shim's callback id, echoed in Notice.hostCallback
}

# Bytes of the application's host memory at `addr` (graph host nodes, below).
struct HostBytes {
  addr @0 :UInt64;
  data @1 :Data;
}

# A host node was reached in an executable graph that moves host memory the worker cannot
# reach through device staging (docs/ARCHITECTURE.md, "Stream capture and graphs"): the
# client writes `writes` - what the graph's copies before the node put into the application's
# memory - runs host function `id`, and answers graphHostNodeDone.
struct GraphHostNode {
  id @0 :UInt64;               # the client's callback id
  exec @1 :UInt64;             # the executable graph's handle
  writes @2 :List(HostBytes);  # each inside a device-to-host binding of `exec`
}

# The client ran a graph host node's function: `reads` are the application's bytes that the
# graph's host-to-device copies read (each binding of `exec` whole); the worker refreshes
# their staging before the graph goes on. Handled like callbackDone: even while a transfer
# holds the request queue.
struct GraphHostNodeDone {
  id @0 :UInt64;
  exec @1 :UInt64;
  reads @2 :List(HostBytes);
}

# A call generated from an API description (protocol/api/*.api): the library, the entry's
# stable number in it, and the arguments in the flat encoding of
# protocol/include/remora/protocol/api_args.h. Whether it is answered is the entry's call
# class (sync and wait: a reply carrying apiResult; ordered: posted, errors deferred).
struct ApiCall {
  library @0 :UInt16;          # the description's `wire` number (cuda = 1, ...)
  function @1 :UInt32;         # the entry's @N
  args @2 :Data;
  stagedArgs @3 :UInt64;       # not 0: the arguments were sent ahead in pieces under this id
                               # (remoraStageArgsPiece; args is then empty)
}

# Members marked "retired" are calls that became generated entries (apiCall); they stay in
# the schema so numbers are never reused, and a worker answers them cudaErrorNotSupported.
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
    streamCreate @10 :StreamCreate;  # retired: now an apiCall
    streamDestroy @11 :StreamRef;  # retired: now an apiCall
    streamSynchronize @12 :StreamRef;  # retired: now an apiCall
    streamQuery @13 :StreamRef;  # retired: now an apiCall
    streamWaitEvent @14 :StreamWaitEvent;  # retired: now an apiCall
    eventCreate @15 :UInt32;  # retired: now an apiCall
    eventDestroy @16 :UInt64;  # retired: now an apiCall
    eventRecord @17 :EventRecord;  # retired: now an apiCall
    eventSynchronize @18 :UInt64;  # retired: now an apiCall
    eventQuery @19 :UInt64;  # retired: now an apiCall
    eventElapsedTime @20 :EventPair;  # retired: now an apiCall
    deviceSynchronize @21 :Void;
    deviceReset @22 :Void;
    goodbye @23 :Void;         # orderly end of session (process exit)
    ping @24 :Void;            # answers with the current device generation
    moduleLoad @25 :ModuleLoad;
    getFunction @26 :GetFunction;
    getGlobal @27 :GetGlobal;
    launchKernel @28 :LaunchKernel;
    funcGetAttributes @29 :UInt64;  # retired: now an apiCall
    funcSetAttribute @30 :FuncAttribute;  # retired: now an apiCall
    funcSetCacheConfig @31 :FuncAttribute;  # retired: now an apiCall
    occupancy @32 :Occupancy;  # retired: now an apiCall
    copy3D @33 :Copy3D;
    memset3D @34 :Memset3D;
    mallocPitch @35 :MallocPitch;  # retired: now an apiCall
    mallocAsync @36 :MallocAsync;
    freeAsync @37 :FreeAsync;
    defaultMemPool @38 :Void;  # retired: now an apiCall
    getMemPool @39 :Void;  # retired: now an apiCall
    setMemPool @40 :UInt64;  # retired: now an apiCall
    poolCreate @41 :PoolCreate;  # retired: now an apiCall
    poolDestroy @42 :UInt64;  # retired: now an apiCall
    poolSetAttribute @43 :PoolAttribute;  # retired: now an apiCall
    poolGetAttribute @44 :PoolAttribute;  # retired: now an apiCall
    poolTrimTo @45 :PoolAttribute;  # retired: now an apiCall
    memcpyPeer @46 :MemcpyPeer;  # retired: now an apiCall
    peerAccess @47 :PeerAccess;  # retired: now an apiCall
    deviceLimit @48 :DeviceLimit;  # retired: now an apiCall
    streamPriorityRange @49 :Void;  # retired: now an apiCall
    hostFunc @50 :HostFunc;
    callbackDone @51 :UInt64;            # id: the client ran the callback
    registerHostRegion @52 :RegisterHostRegion;
    unregisterHostRegion @53 :UInt64;    # id; answered once no DMA uses it any more
    apiCall @54 :ApiCall;
    moduleUnload @55 :UInt64;  # retired: now an apiCall
    link @56 :Link;            # the driver API's JIT linker, run on the worker
    migrateExport @58 :Void;   # planned migration, on the source: what the session holds
                               # (Reply.migration), or why it cannot move yet
    migrateImport @59 :Migration;  # on the target: the allocations (at the same addresses),
                                   # streams and events (with the same handles); modules apart
    migrateModule @60 :Migration.Module;  # on the target: load the image (the frame's bulk)
                                          # under the same module and function handles
    migrateFailed @61 :Text;   # on the source: why the move the administrator asked for did
                               # not happen (the session goes on here); posted, no reply
    graphHostNodeDone @62 :GraphHostNodeDone;  # posted, no reply (Notice.graphHostNode)
  }
  captureMode @57 :UInt8;      # the calling thread's cudaStreamCaptureMode (0: global)
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

struct ParamInfo {
  offset @0 :UInt32;
  size @1 :UInt32;
}

struct FunctionInfo {
  handle @0 :UInt64;
  params @1 :List(ParamInfo);
  attributes @2 :List(Int32); # indexed by CUfunction_attribute
}

struct GlobalInfo {
  ptr @0 :UInt64;
  size @1 :UInt64;
  managed @2 :Bool;  # managed memory: the address is also the host's (a __managed__ variable)
}

struct PitchedPtr {
  ptr @0 :UInt64;
  pitch @1 :UInt64;
}

struct ModuleLoaded {
  handle @0 :UInt64;
  needImage @1 :Bool;
}

struct Linked {
  image @0 :Data;              # the linked cubin
  infoLog @1 :Text;
  errorLog @2 :Text;           # also set when the link failed
  walltimeMs @3 :Float32;
}

struct IntPair {
  first @0 :Int64;
  second @1 :Int64;
}

struct MemInfo {
  free @0 :UInt64;
  total @1 :UInt64;
}

# A generated call's results the worker holds until the client has read them (HeldResults).
struct HeldResult {
  id @0 :UInt64;
  size @1 :UInt64;             # bytes, read back in pieces of at most 448 KiB
}

struct Reply {
  error @0 :UInt32;            # status of this call, in errorDomain (cudaError_t by default)
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
    module @11 :ModuleLoaded;
    function @12 :FunctionInfo;
    global @13 :GlobalInfo;
    value @14 :Int64;
    pitched @15 :PitchedPtr;
    pair @16 :IntPair;
    attributes @17 :List(Int32);
    apiResult @18 :Data;       # an apiCall's results (flat encoding)
    linked @21 :Linked;
    migration @23 :Migration;
    graphPointer @24 :UInt64;  # mallocAsync in a stream capture: memory of the capture's graph
    apiResultHeld @25 :HeldResult;  # an apiCall's results too large for one frame: held by the
                               # worker, read back with remoraHeldResultPiece (cuda.api)
  }
  errorDomain @19 :UInt16;     # remora::Domain of `error` (0: cudart)
  asyncErrorDomain @20 :UInt16;
  capturesActive @22 :UInt32;  # stream captures in progress in the session (capture queries
                               # are answered by the client while there are none)
}

# Server-initiated, unsolicited (frame tag 0).
struct Notice {
  union {
    devicesChanged @0 :UInt64; # new generation
    sessionEnding @1 :Text;    # reason (admin kill, tenant deleted, server shutdown)
    hostCallback @2 :UInt64;   # run callback id, then send callbackDone(id)
    hostCallbackCancelled @3 :UInt64;  # callback id will never run: its hostFunc was refused
    repeatCallback @4 :UInt64; # a graph reached host function id: run it, then callbackDone(id);
                               # the id stays valid for the next launch
    callbackCaptured @5 :UInt64;  # host function id was captured into a graph: it runs at
                                  # each launch (repeatCallback), not now
    runCallback @6 :UInt64;    # run callback id once (a user object's destructor), no answer
    migrate @7 :MigrateTo;     # the administrator moves this session to another server
    graphHostNode @8 :GraphHostNode;  # like repeatCallback, with the graph's host memory
  }
}

struct MigrateTo {
  url @0 :Text;                # the server to move to
  token @1 :Text;              # the tenant's token there (empty: the application's own)
}

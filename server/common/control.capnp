# Supervisor <-> worker control messages, on the socketpair each worker gets as fd 4.
@0x9050e78dc0a515dc;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("remora::control");

struct SessionKeys {
  cipher @0 :UInt8;            # remora::Cipher
  clientToServer @1 :Data;     # 32 bytes each
  serverToClient @2 :Data;
}

struct ControlMessage {
  union {
    setGpus @0 :List(Int32);   # the tenant's GPUs on this server, now (attach/detach)
    endSession @1 :Text;       # reason: admin kill, tenant deleted, server shutdown
    sessionKeys @2 :SessionKeys;  # first message of an encrypted session (--encrypted)
    dataConnection @3 :UInt8;  # tcp data stream INDEX, authenticated; its socket rides along (SCM_RIGHTS)
  }
}

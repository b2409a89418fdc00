# Supervisor <-> worker control messages, on the socketpair each worker gets as fd 4.
@0x9050e78dc0a515dc;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("remora::control");

struct ControlMessage {
  union {
    setGpus @0 :List(Int32);   # the tenant's GPUs on this server, now (attach/detach)
    endSession @1 :Text;       # reason: admin kill, tenant deleted, server shutdown
  }
}

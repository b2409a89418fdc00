# Sources of the RDMA transport, appended to both protocol flavours. Paths are relative to
# protocol/. The verbs and rdma_cm libraries are loaded at run time (dlopen), so nothing
# here links against them.
set(REMORA_RDMA_SOURCES src/rdma/rdma_stub.cc)

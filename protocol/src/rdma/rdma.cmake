# Sources of the RDMA transport, appended to both protocol flavours. Paths are relative to
# protocol/. The verbs and rdma_cm libraries are loaded at run time (dlopen), so nothing
# here links against them; only their headers (libibverbs-dev, librdmacm-dev) are needed to
# build. Without the headers the transport is replaced by a stub that refuses rdma://.
include(CheckIncludeFileCXX)
check_include_file_cxx(infiniband/verbs.h REMORA_HAVE_VERBS_H)
check_include_file_cxx(rdma/rdma_cma.h REMORA_HAVE_RDMA_CMA_H)
if(REMORA_HAVE_VERBS_H AND REMORA_HAVE_RDMA_CMA_H)
  set(REMORA_RDMA_SOURCES
    src/rdma/verbs_api.cc
    src/rdma/verbs_objects.cc
    src/rdma/wire.cc
    src/rdma/channel.cc
    src/rdma/requester.cc
    src/rdma/executor.cc
    src/rdma/rdma_transport.cc)
  set(REMORA_HAVE_RDMA ON CACHE INTERNAL "the RDMA transport is built")
else()
  message(WARNING "libibverbs/librdmacm headers not found: rdma:// is disabled in this build")
  set(REMORA_RDMA_SOURCES src/rdma/rdma_stub.cc)
  set(REMORA_HAVE_RDMA OFF CACHE INTERNAL "the RDMA transport is built")
endif()

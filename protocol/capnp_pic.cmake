# remora_capnp_pic: Cap'n Proto lite runtime (kj + capnp serialization), position
# independent and hidden, for linking into libremora.so.
if(NOT EXISTS ${REMORA_CAPNP_SOURCE_DIR}/src/capnp/layout.c++)
  message(FATAL_ERROR "Cap'n Proto source not found at ${REMORA_CAPNP_SOURCE_DIR}: run tools/install-deps.sh")
endif()
set(_kj ${REMORA_CAPNP_SOURCE_DIR}/src/kj)
set(_capnp ${REMORA_CAPNP_SOURCE_DIR}/src/capnp)
add_library(remora_capnp_pic STATIC
  ${_kj}/array.c++ ${_kj}/list.c++ ${_kj}/common.c++ ${_kj}/debug.c++ ${_kj}/exception.c++
  ${_kj}/io.c++ ${_kj}/memory.c++ ${_kj}/mutex.c++ ${_kj}/string.c++ ${_kj}/source-location.c++
  ${_kj}/hash.c++ ${_kj}/table.c++ ${_kj}/thread.c++ ${_kj}/arena.c++ ${_kj}/units.c++
  ${_kj}/encoding.c++
  ${_capnp}/c++.capnp.c++ ${_capnp}/blob.c++ ${_capnp}/arena.c++ ${_capnp}/layout.c++
  ${_capnp}/list.c++ ${_capnp}/any.c++ ${_capnp}/message.c++ ${_capnp}/schema.capnp.c++
  ${_capnp}/stream.capnp.c++ ${_capnp}/serialize.c++)
target_include_directories(remora_capnp_pic SYSTEM PUBLIC ${REMORA_CAPNP_SOURCE_DIR}/src)
target_compile_definitions(remora_capnp_pic PUBLIC CAPNP_LITE=1)
# Third-party code: build it as upstream does, without our warning flags.
target_compile_options(remora_capnp_pic PRIVATE -w -fvisibility=hidden -fvisibility-inlines-hidden)
set_target_properties(remora_capnp_pic PROPERTIES CXX_STANDARD 17)
target_link_libraries(remora_capnp_pic PUBLIC Threads::Threads)

# remora_capnp_source: the full Cap'n Proto runtime (kj, kj-async, capnp with schemas and
# dynamic API, capnp-rpc) compiled from the source tools/install-deps.sh fetched, with this
# build's flags. Used instead of Debian's static archives where those would be wrong: under
# ThreadSanitizer, kj's cross-thread promises synchronise inside libkj-async, and an
# uninstrumented copy hides that synchronisation, so TSan reports races that do not exist.
if(NOT EXISTS ${REMORA_CAPNP_SOURCE_DIR}/src/capnp/rpc.c++)
  message(FATAL_ERROR "Cap'n Proto source not found at ${REMORA_CAPNP_SOURCE_DIR}: run tools/install-deps.sh")
endif()
set(_kj ${REMORA_CAPNP_SOURCE_DIR}/src/kj)
set(_capnp ${REMORA_CAPNP_SOURCE_DIR}/src/capnp)
add_library(remora_capnp_source STATIC
  ${_kj}/array.c++ ${_kj}/list.c++ ${_kj}/common.c++ ${_kj}/debug.c++ ${_kj}/exception.c++
  ${_kj}/io.c++ ${_kj}/memory.c++ ${_kj}/mutex.c++ ${_kj}/string.c++ ${_kj}/source-location.c++
  ${_kj}/hash.c++ ${_kj}/table.c++ ${_kj}/thread.c++ ${_kj}/main.c++ ${_kj}/arena.c++ ${_kj}/units.c++
  ${_kj}/encoding.c++ ${_kj}/refcount.c++ ${_kj}/string-tree.c++ ${_kj}/time.c++ ${_kj}/filesystem.c++
  ${_kj}/filesystem-disk-unix.c++ ${_kj}/parse/char.c++
  ${_kj}/async.c++ ${_kj}/async-unix.c++ ${_kj}/async-io.c++ ${_kj}/async-io-unix.c++ ${_kj}/timer.c++
  ${_capnp}/c++.capnp.c++ ${_capnp}/blob.c++ ${_capnp}/arena.c++ ${_capnp}/layout.c++ ${_capnp}/list.c++
  ${_capnp}/any.c++ ${_capnp}/message.c++ ${_capnp}/schema.capnp.c++ ${_capnp}/stream.capnp.c++
  ${_capnp}/serialize.c++ ${_capnp}/serialize-packed.c++
  ${_capnp}/schema.c++ ${_capnp}/schema-loader.c++ ${_capnp}/dynamic.c++ ${_capnp}/stringify.c++
  ${_capnp}/serialize-async.c++ ${_capnp}/capability.c++ ${_capnp}/membrane.c++ ${_capnp}/dynamic-capability.c++
  ${_capnp}/rpc.c++ ${_capnp}/rpc.capnp.c++ ${_capnp}/rpc-twoparty.c++ ${_capnp}/rpc-twoparty.capnp.c++
  ${_capnp}/persistent.capnp.c++ ${_capnp}/ez-rpc.c++)
# The same version as the installed headers (install-deps.sh fetches it so); ours come first.
target_include_directories(remora_capnp_source SYSTEM BEFORE PUBLIC ${REMORA_CAPNP_SOURCE_DIR}/src)
# Third-party code: build it as upstream does, without our warning flags.
target_compile_options(remora_capnp_source PRIVATE -w)
set_target_properties(remora_capnp_source PROPERTIES CXX_STANDARD 17)
target_link_libraries(remora_capnp_source PUBLIC Threads::Threads)

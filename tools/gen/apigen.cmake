# remora_apigen(<lib> <emit>... ): runs tools/gen/apigen on protocol/api/<lib>.api at build
# time; the outputs land in ${REMORA_API_GEN_DIR} (never committed). Sets
# REMORA_APIGEN_<lib>_<emit> to the list of files that emit produces.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(REMORA_API_DIR ${CMAKE_SOURCE_DIR}/protocol/api)
set(REMORA_API_GEN_DIR ${REMORA_GEN_DIR}/api)
file(GLOB REMORA_API_FILES ${REMORA_API_DIR}/*.api)
file(GLOB REMORA_APIGEN_SOURCES ${CMAKE_SOURCE_DIR}/tools/gen/apigen/*.py)
# The generator reads the library object kinds from the handle table (roles.py, LIB_KINDS).
list(APPEND REMORA_APIGEN_SOURCES ${CMAKE_SOURCE_DIR}/memmgr/include/remora/memmgr/handle_table.h)
# remora_api_header(<lib> <key> <var>): the value of `key` in the library header of
# protocol/api/<lib>.api (empty if absent), read when CMake configures.
function(remora_api_header lib key var)
  file(STRINGS ${REMORA_API_DIR}/${lib}.api lines REGEX "^    ${key} ")
  set(value "")
  if(lines)
    list(GET lines 0 value)
    string(REGEX REPLACE "^    ${key} +" "" value "${value}")
  endif()
  set(${var} "${value}" PARENT_SCOPE)
endfunction()

# The libraries served whole (descriptions whose header says `role library`; model.py,
# LIBRARY_ROLES): a client library each with the real SONAME (shim/), the worker's table and
# dispatch (server/), round-trip tests (tests/unit). Listed from protocol/api, never by hand.
set(REMORA_MATH_LIBRARIES "")
foreach(f IN LISTS REMORA_API_FILES)
  get_filename_component(lib ${f} NAME_WE)
  remora_api_header(${lib} role role)
  if(role STREQUAL "library")
    list(APPEND REMORA_MATH_LIBRARIES ${lib})
  elseif(NOT role STREQUAL "core")
    message(FATAL_ERROR "${f}: its library header needs `role core` or `role library` (got '${role}')")
  endif()
endforeach()
# A description's client stubs and worker dispatch are generated as one translation unit per
# REMORA_APIGEN_SHARD_ENTRIES travelling (@N) entries, counted here when CMake configures, so
# that a parallel build compiles a large library's side by side (cuBLAS's 464 were two single
# units of about 45 s each). The generator splits into however many it is told: a count that
# is out of date after an edit of the description is still correct, and the next configure
# (tools/test.sh configures every run) counts again.
set(REMORA_APIGEN_SHARD_ENTRIES 150)

function(remora_apigen_shards lib var)
  file(STRINGS ${REMORA_API_DIR}/${lib}.api numbered REGEX "^@[0-9]")
  list(LENGTH numbered n)
  math(EXPR shards "(${n} + ${REMORA_APIGEN_SHARD_ENTRIES} - 1) / ${REMORA_APIGEN_SHARD_ENTRIES}")
  if(shards LESS 1)
    set(shards 1)
  endif()
  set(${var} ${shards} PARENT_SCOPE)
endfunction()

# STEM.cc, then STEM_2.cc ... STEM_<shards>.cc (the generator's names, __main__.py write_shards).
function(remora_apigen_shard_files stem shards var)
  set(files ${stem}.cc)
  if(shards GREATER 1)
    foreach(i RANGE 2 ${shards})
      list(APPEND files ${stem}_${i}.cc)
    endforeach()
  endif()
  set(${var} ${files} PARENT_SCOPE)
endfunction()

function(remora_apigen lib)
  set(outputs "")
  set(emits "")
  remora_apigen_shards(${lib} shards)
  # What the generator reads: <lib>.api alone, but for shim-exports (a `via` entry names an
  # entry of another description), which reads them all.
  set(api_inputs ${REMORA_API_DIR}/${lib}.api)
  if("shim-exports" IN_LIST ARGN)
    set(api_inputs ${REMORA_API_FILES})
  endif()
  foreach(emit IN LISTS ARGN)
    if(emit STREQUAL "shim-exports")
      set(files ${lib}.map ${lib}_table.h ${lib}_forward.cc ${lib}_core.cc)
      if(lib STREQUAL "cuda")
        list(APPEND files ${lib}_procs.inc ${lib}_status_names.inc)
      endif()
    elseif(emit STREQUAL "client")
      remora_apigen_shard_files(${lib}_client ${shards} files)
      list(PREPEND files ${lib}_client.h)
    elseif(emit STREQUAL "worker")
      remora_apigen_shard_files(${lib}_dispatch ${shards} files)
      list(PREPEND files ${lib}_api.h ${lib}_api.cc)
    elseif(emit STREQUAL "roundtrip-test")
      set(files ${lib}_roundtrip_test.cc)
    elseif(emit STREQUAL "wire")
      set(files ${lib}_wire.h)
    elseif(emit STREQUAL "fuzz-calls")
      set(files ${lib}_fuzz_calls.cc)
    elseif(emit STREQUAL "exports-list")
      set(files ${lib}.exports)
    elseif(emit MATCHES "^module-(.+)$")
      set(files ${lib}_${CMAKE_MATCH_1}.map ${lib}_${CMAKE_MATCH_1}_forward.cc ${lib}_${CMAKE_MATCH_1}.exports)
    else()
      message(FATAL_ERROR "remora_apigen: unknown emit ${emit}")
    endif()
    list(TRANSFORM files PREPEND ${REMORA_API_GEN_DIR}/)
    set(REMORA_APIGEN_${lib}_${emit} ${files} PARENT_SCOPE)
    list(APPEND outputs ${files})
    list(APPEND emits --emit ${emit})
  endforeach()
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/gen/apigen --api-dir ${REMORA_API_DIR} --lib ${lib}
            ${emits} --shards ${shards} --out ${REMORA_API_GEN_DIR} -I ${CUDAToolkit_INCLUDE_DIRS}
    DEPENDS ${api_inputs} ${REMORA_APIGEN_SOURCES}
    COMMENT "apigen ${lib}: ${ARGN}")
  # Sanitizer and fuzzing builds compile the generated code with REMORA_GENERATED_COMPILE_OPTIONS
  # (-O0, tools/sanitizers.cmake). Source properties belong to this directory, the one whose
  # targets compile these files.
  # Generated tests (round trips, fuzz call tables) are compiled at -O0 in every build: their
  # speed does not matter, and the largest (cublas_roundtrip_test.cc) takes 100 s at -O2.
  set(sources ${outputs})
  list(FILTER sources INCLUDE REGEX "\\.cc$")
  # Either way they do not use their target's precompiled headers (tools/pch.cmake), which
  # were compiled with the target's own optimisation level.
  if(REMORA_GENERATED_COMPILE_OPTIONS)
    set_source_files_properties(${sources} PROPERTIES COMPILE_OPTIONS "${REMORA_GENERATED_COMPILE_OPTIONS}"
                                SKIP_PRECOMPILE_HEADERS ON)
  elseif("roundtrip-test" IN_LIST ARGN OR "fuzz-calls" IN_LIST ARGN)
    set_source_files_properties(${sources} PROPERTIES COMPILE_OPTIONS -O0 SKIP_PRECOMPILE_HEADERS ON)
  endif()
  string(JOIN "_" tag ${ARGN})
  string(REPLACE "-" "_" tag "${tag}")
  add_custom_target(remora_apigen_${lib}_${tag} DEPENDS ${outputs})
endfunction()

# Sanitizer and fuzzing builds (docs/ROBUSTNESS.md). Included by the top-level CMakeLists.txt
# after the warning flags; changes nothing unless REMORA_SANITIZE or REMORA_FUZZ is set.
#
#   REMORA_SANITIZE=address,undefined  every C/C++ target with ASan+UBSan. The runtime is the
#       shared one (-shared-libsan), so that libremora.so, preloaded into programs that were
#       not built with ASan, can find it: such programs get it first in LD_PRELOAD
#       (REMORA_SANITIZER_PRELOAD below; tests/support/process_harness.cc does this).
#   REMORA_SANITIZE=thread             every C/C++ target with TSan. The shim is not built: a
#       TSan runtime cannot be preloaded into an uninstrumented program, and the shim only ever
#       runs inside one. Integration tests use a normal build's shim (REMORA_TEST_APPS_DIR).
#       Cap'n Proto is compiled from source with the same flags (REMORA_CAPNP_FROM_SOURCE,
#       protocol/capnp_source.cmake): kj's cross-thread promises synchronise inside its own
#       code, which TSan must see.
#   REMORA_FUZZ=ON                     coverage instrumentation for libFuzzer on every library
#       (-fsanitize=fuzzer-no-link) and the targets of tools/fuzz; usually together with
#       address,undefined, so that one build serves the sanitizer tests and the fuzzers.
#
# UB is fatal (-fno-sanitize-recover), so a finding fails the test that hit it; the reports of
# processes the tests start (servers, workers) are collected through the *SAN_OPTIONS
# log_path that tools/test.sh sets.
set(REMORA_SANITIZER_PRELOAD "")
set(REMORA_CAPNP_FROM_SOURCE OFF)
set(REMORA_GENERATED_COMPILE_OPTIONS "")
set(REMORA_SANITIZER_HOT_OPTIONS "")
if(REMORA_SANITIZE STREQUAL "" AND NOT REMORA_FUZZ)
  return()
endif()
# Code a test runs millions of times (the compute scheduler under its simulated GPU:
# compute_sched_test steps it about 3 million times) keeps -O1 in a sanitizer tree compiled
# at -O0, as CI's ASan stage is (tools/robustness.sh): unoptimised it took over 120 s under
# ASan against 43 s at -O1. A later -O flag wins, so this overrides the build type's.
set(REMORA_SANITIZER_HOT_OPTIONS -O1)
# The generated API code (tools/gen/apigen: thousands of small marshalling functions) at -O0:
# a file compiles about four times faster than at -O1 under ASan (cublas_dispatch.cc: 22 s
# against 93 s) and stays fully instrumented. On a cold TSan tree the gain was small (its
# generated code now takes 149 of 1,472 compile CPU-s; docs/ROBUSTNESS.md).
set(REMORA_GENERATED_COMPILE_OPTIONS -O0)
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "REMORA_SANITIZE/REMORA_FUZZ need clang (configure with CC=clang CXX=clang++; "
                      "tools/install-deps.sh installs it)")
endif()
if(REMORA_BUILD_CUDA_PROGRAMS)
  message(FATAL_ERROR "sanitizer and fuzzing builds do not build the CUDA programs: configure with "
                      "-DREMORA_BUILD_CUDA_PROGRAMS=OFF and point REMORA_TEST_APPS_DIR at a normal build's bin/")
endif()

set(_san_compile -fno-omit-frame-pointer)
set(_san_link "")
if(REMORA_SANITIZE MATCHES "thread")
  if(REMORA_SANITIZE MATCHES "address")
    message(FATAL_ERROR "REMORA_SANITIZE: thread cannot be combined with address")
  endif()
  list(APPEND _san_compile -fsanitize=${REMORA_SANITIZE})
  list(APPEND _san_link -fsanitize=${REMORA_SANITIZE})
  set(REMORA_CAPNP_FROM_SOURCE ON)
elseif(NOT REMORA_SANITIZE STREQUAL "")
  list(APPEND _san_compile -fsanitize=${REMORA_SANITIZE} -fno-sanitize-recover=all)
  if(REMORA_SANITIZE MATCHES "undefined")
    # Enumerations reach the exported entry points from C applications as any int (C allows
    # it), and each library answers a value outside its enumerators as the library does
    # (integration.nccl_test sends datatype 99 and expects ncclInvalidArgument): loading such
    # a value is not a bug of ours, so UBSan's enum check is off.
    list(APPEND _san_compile -fno-sanitize=enum)
  endif()
  list(APPEND _san_link -fsanitize=${REMORA_SANITIZE} -shared-libsan)
  if(REMORA_SANITIZE MATCHES "address")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libclang_rt.asan-${CMAKE_SYSTEM_PROCESSOR}.so
                    OUTPUT_VARIABLE REMORA_SANITIZER_PRELOAD OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT EXISTS "${REMORA_SANITIZER_PRELOAD}")
      message(FATAL_ERROR "the shared ASan runtime was not found (${REMORA_SANITIZER_PRELOAD}): "
                          "tools/install-deps.sh installs libclang-rt-dev")
    endif()
    get_filename_component(_san_rt_dir ${REMORA_SANITIZER_PRELOAD} DIRECTORY)
    list(APPEND _san_link -Wl,-rpath,${_san_rt_dir})
  endif()
endif()
if(REMORA_FUZZ)
  list(APPEND _san_compile -fsanitize=fuzzer-no-link)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_san_compile}>")
add_link_options("$<$<LINK_LANGUAGE:C,CXX>:${_san_link}>")
message(STATUS "sanitizers: '${REMORA_SANITIZE}', libFuzzer targets: ${REMORA_FUZZ}")

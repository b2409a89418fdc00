# Precompiled headers (REMORA_PCH): the few heavy headers nearly every file of
# a library includes (the executor's, the shim runtime's: Cap'n Proto's generated schema, fmt
# and the standard library behind them) are parsed once per target instead of once per file.
# Parsing them was half of a typical file's compile (shim/src/api_memory.cc under clang:
# 2.4 of 4.3 s).
#
#   remora_precompile(TARGET HEADER...)   HEADER as an #include would name it ("x.h", <x>)
#
# Every source of TARGET sees the headers as if it included them first, so a file that forgets
# an include still compiles here; a build with -DREMORA_PCH=OFF checks that it does not. Sources
# compiled with options of their own (the generated code at -O0 in sanitizer builds,
# tools/gen/apigen.cmake) do not use the precompiled headers: their flags differ.
#
# On by default with clang only (the sanitizer and fuzzing trees): GCC 12 reports false
# -Warray-bounds errors inside libstdc++'s std::string with precompiled headers, its gain is
# smaller (a third of a worker file's compile, against two fifths under clang) and its
# precompiled headers are ~160 MB each. The gcc build without them also checks that every
# file includes what it uses.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  option(REMORA_PCH "Precompile the heavy headers shared by the files of the larger libraries and tests" ON)
else()
  option(REMORA_PCH "Precompile the heavy headers shared by the files of the larger libraries and tests" OFF)
endif()

function(remora_precompile target)
  if(NOT REMORA_PCH)
    return()
  endif()
  set(headers "")
  foreach(h IN LISTS ARGN)
    if(h MATCHES "^<")
      list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:${h}>")
    else()
      list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:\"${h}\">")
    endif()
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
  # Through ccache (CMakeLists.txt), a precompiled header restored from the cache must not
  # carry the times of the headers it was built from: a clone's headers have other times.
  if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache" AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:SHELL:-Xclang -fno-pch-timestamp>")
  endif()
endfunction()

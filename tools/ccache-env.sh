# shellcheck shell=bash
# Sourced by tools/test.sh and tools/robustness.sh: the compiler cache's settings for CI's builds
# (CMakeLists.txt compiles through ccache when it is installed; REMORA_CCACHE=OFF builds without).
# Settings already in the environment are kept; a cache directory or size set in ccache's own
# configuration too (this only exports what it defaults).
#  - CCACHE_BASEDIR: paths inside this clone are hashed relative to the build directory, so a
#    clone at another path (CI's checkouts) hits the same entries; CCACHE_NOHASHDIR: the
#    directory compiled in is not hashed (only the debug information's DW_AT_comp_dir would
#    name the other clone's path).
#  - CCACHE_SLOPPINESS: what ccache needs to cache compiles that use clang's precompiled headers
#    (tools/pch.cmake, built with -fno-pch-timestamp), and a clone's fresh file times.
#  - CCACHE_STATSLOG: this run's hits and misses, which tools/test.sh prints at the end.
#  - The cache itself: CCACHE_DIR if set, else the cache_dir of ccache's configuration, else
#    ccache's default ~/.cache/ccache (kept between clones and runs on one machine; 5 GB
#    holds the three trees of a run several times over: about 0.1 GB each, compressed).
# $1: the clone's root.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$1}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
export CCACHE_STATSLOG=${CCACHE_STATSLOG:-$1/build/ccache-stats.log}

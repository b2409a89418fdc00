#!/usr/bin/env bash
# cuda-samples.sh SAMPLES_DIR [options]: NVIDIA's public cuda-samples as a conformance suite.
#
# Builds every sample of a cuda-samples checkout (github.com/NVIDIA/cuda-samples) that this
# machine's CUDA toolkit can build, for sm_90 only (the checkout is copied and its CMake lists
# patched to one architecture, to keep the build to about a minute on 16 cores), twice: with
# the shared CUDA runtime (-cudart shared: the program calls libcudart.so.13, which Remora
# replaces) and with nvcc's default static runtime (libcudart_static.a inside the program,
# which meets Remora at libcuda.so.1). The static build relinks the shared build's objects.
# Then it runs each sample natively and through `remora-run` over shm and tcp with the client
# touching no local GPU (REMORA_ASSERT_NO_LOCAL_GPU=1), several at a time, each under a
# timeout, judged by the sample's own criteria: exit status 0 and no failure line
# ("Result = FAIL", "Test failed", ...); exit status 2 is the samples' EXIT_WAIVED.
# It prints a table (sample, native, shm-shared, tcp-shared, shm-static, tcp-static), the
# samples not run with the reason (graphics interop, a toolkit part missing, ...) and a
# summary; with $OUT set, the table, the logs and the build log go there too.
#
# Options:
#   --remora DIR     a Remora bundle (tools/gpu/make-bundle.sh) or build directory: DIR/bin/remora-run
#                    (default: the bundle this script lies in, ../bin/remora-run)
#   --work DIR       where the copy, the builds and the logs go (default /tmp/remora-cuda-samples)
#   --jobs N         runs at a time (default 8); --build-jobs N: compiler jobs (default: nproc)
#   --timeout S      per run (default 120)
#   --only "A B"     only these samples (by name); --modes "native shm-shared ...": a subset of modes
#   --build-only     build and list, run nothing; --no-build: run what the work folder holds
#   --native-only    the native runs only (to see what passes without Remora)
#   --backend B      the private servers' backend (default cuda; host only to try this script
#                    without a GPU: the host backend runs no kernel, so samples fail their checks)
# Exit status: 0 when every sample that passed natively passed in every Remora mode, else 1.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
src_in=$(cd "$1" 2>/dev/null && pwd) || { echo "cuda-samples.sh: no such folder: $1" >&2; exit 2; }
shift
here=$(cd "$(dirname "$0")" && pwd)
remora=$(cd "$here/.." && pwd)
work=/tmp/remora-cuda-samples
jobs=8
build_jobs=$(nproc)
timeout_s=120
only=""
all_modes="native shm-shared tcp-shared shm-static tcp-static"
modes=$all_modes
do_build=1
do_run=1
backend=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --remora) remora=$(cd "$2" && pwd) || exit 2; shift ;;
    --work) work=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --build-jobs) build_jobs=$2; shift ;;
    --timeout) timeout_s=$2; shift ;;
    --only) only=" $2 "; shift ;;
    --modes) modes=$2; shift ;;
    --build-only) do_run=0 ;;
    --no-build) do_build=0 ;;
    --native-only) modes=native ;;
    --backend) backend=$2; shift ;;
    -h|--help) usage ;;
    *) echo "cuda-samples.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -f "$src_in/CMakeLists.txt" ] && [ -d "$src_in/Samples" ] ||
  { echo "cuda-samples.sh: $src_in is not a cuda-samples checkout (no CMakeLists.txt and Samples/)" >&2; exit 2; }
remora_run=$remora/bin/remora-run
if [ "$do_run" = 1 ] && [ "$modes" != native ] && [ ! -x "$remora_run" ]; then
  echo "cuda-samples.sh: no remora-run at $remora_run (give --remora BUNDLE_OR_BUILD_DIR)" >&2
  exit 2
fi
out=${OUT:-}
src=$work/src
logs=$work/logs
mkdir -p "$work" "$logs"
[ -n "$out" ] && mkdir -p "$out"
export PATH=$PATH:/usr/local/cuda/bin

# Samples not run, and why (one line each: NAME<TAB>reason), filled by the build and the scan.
notrun=$work/not-run.tsv

# ---------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------
# Removes add_subdirectory(NAME) for the sample folder DIR from its parent and notes why.
drop_sample() {
  local dir=$1 why=$2 parent name
  parent=$(dirname "$dir")
  name=$(basename "$dir")
  sed -i "/add_subdirectory *( *$name *)/d" "$parent/CMakeLists.txt"
  printf '%s\t%s\n' "$name" "$why" >>"$notrun"
}

# Ninja where there is one (keep going: -k 0), else make (-k).
if command -v ninja >/dev/null 2>&1; then generator=Ninja; keep_going=(-k 0); else generator="Unix Makefiles"; keep_going=(-k); fi

configure() {  # configure RUNTIME (Shared|Static) in $src/build; drops samples CMake refuses, retrying
  local rt=$1 try dirs d
  for try in $(seq 1 20); do
    if cmake -S "$src" -B "$src/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_RUNTIME_LIBRARY="$rt" \
         -Wno-dev >"$work/configure.log" 2>&1; then
      return 0
    fi
    # "CMake Error at Samples/X/Y/CMakeLists.txt:N" and "linked by target "T" in directory D".
    dirs=$( { grep -oE 'CMake Error at Samples/[^:]+/CMakeLists.txt' "$work/configure.log" |
                sed -E 's/^CMake Error at //; s#/CMakeLists.txt$##; s#^#'"$src"'/#'
              grep -oE 'in directory /[^ ]+' "$work/configure.log" | sed 's/^in directory //'; } | sort -u)
    [ -n "$dirs" ] || { echo "cuda-samples.sh: CMake failed, see $work/configure.log" >&2; tail -20 "$work/configure.log" >&2; return 1; }
    for d in $dirs; do
      local what
      # "VAR" on its own line above "linked by target ... in directory D", or the
      # imported target named below "CMake Error at D/CMakeLists.txt".
      what=$(awk -v d="in directory $d" '/^[A-Za-z_]+$/ { v = $1 } index($0, d) && v != "" { print v }' "$work/configure.log")
      [ -z "$what" ] && what=$(grep -A6 -F "CMake Error at ${d#"$src"/}/" "$work/configure.log" | grep -oE 'CUDA::[A-Za-z_]+')
      what=$(echo "$what" | sort -u | tr '\n' ' ' | sed 's/ $//')
      drop_sample "$d" "does not configure with this toolkit (${what:-see configure.log} not found)"
    done
  done
  return 1
}

# The executables of the build tree: ELF files outside CMakeFiles.
list_exes() {
  find "$src/build/Samples" -type f -perm -u+x -not -path '*/CMakeFiles/*' -not -path '*/.remora-*' 2>/dev/null |
    while read -r f; do [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && echo "$f"; done | sort
}

stash() {  # stash VARIANT: keep each built executable as <its dir>/.remora-VARIANT/<its name>
  local v=$1 f
  list_exes | while read -r f; do
    mkdir -p "$(dirname "$f")/.remora-$v"
    cp -p "$f" "$(dirname "$f")/.remora-$v/$(basename "$f")"
  done
}

if [ "$do_build" = 1 ]; then
  command -v cmake >/dev/null 2>&1 || { echo "cuda-samples.sh: no cmake on this machine (3.20 or newer is needed)" >&2; exit 2; }
  command -v nvcc >/dev/null 2>&1 || { echo "cuda-samples.sh: no nvcc (CUDA toolkit) on PATH" >&2; exit 2; }
  t0=$(date +%s)
  rm -rf "$src" "$notrun"
  mkdir -p "$src"
  # A copy without the checkout's git data and any earlier build.
  tar -C "$src_in" --exclude=./.git --exclude='./build*' -cf - . | tar -C "$src" -xf -
  # One architecture: every CMake list names its own list of nine.
  find "$src" -name CMakeLists.txt -exec sed -i -E 's/set\(CMAKE_CUDA_ARCHITECTURES [0-9 ]+\)/set(CMAKE_CUDA_ARCHITECTURES 90)/' {} +
  : >"$notrun"
  for rt in Shared Static; do
    v=$(echo "$rt" | tr 'A-Z' 'a-z')
    configure "$rt" || exit 1
    # The samples' own CMake lists skip what lacks a dependency, saying so.
    grep -oE "[^-]* not found - will not build sample '[^']+'" "$work/configure.log" |
      sed -E "s/^ *(.*) not found - will not build sample '([^']+)'/\2\tneeds \1 (not found on this machine)/" >>"$notrun"
    echo "building the $v-runtime samples ($build_jobs jobs)..." >&2
    # -k 0: keep going; what does not build is reported below.
    targets=()
    for n in $only; do
      if [ "$generator" = Ninja ]; then ninja -C "$src/build" -t query "$n" >/dev/null 2>&1 && targets+=(--target "$n")
      else targets+=(--target "$n"); fi
    done
    [ -n "$only" ] && [ ${#targets[@]} -eq 0 ] && { echo "cuda-samples.sh: no target among: $only" >&2; exit 2; }
    nice cmake --build "$src/build" -j "$build_jobs" "${targets[@]}" -- "${keep_going[@]}" >"$work/build-$v.log" 2>&1
    stash "$v"
  done
  # Every sample the CMake lists declare but that was not built gets its reason.
  find "$src/Samples" -name CMakeLists.txt -not -path '*/8_Platform_Specific/*' | sort | while read -r cml; do
    for n in $(grep -oE 'add_executable\( *[A-Za-z0-9_]+' "$cml" | sed -E 's/add_executable\( *//'); do
      case "$only" in "" | *" $n "*) ;; *) continue ;; esac
      [ -n "$(find "$src/build/Samples" -path "*/.remora-shared/$n" -print -quit)" ] && continue
      grep -q "^$n	" "$notrun" && continue
      d=${cml%/CMakeLists.txt}; rel=${d#"$src"/}
      err=$(grep -A3 -E "^FAILED: .*$rel/" "$work/build-shared.log" | grep -m1 -E 'error|undefined' | cut -c1-120)
      pk=$(grep -oE 'find_package\( *[A-Za-z0-9]+' "$cml" | sed -E 's/find_package\( *//' | grep -v CUDAToolkit | sort -u | tr '\n' ' ' | sed 's/ $//')
      case "$n" in
        *D3D*) why="Direct3D: Windows only" ;;
        *) if [ -n "$err" ]; then why="does not build with this toolkit: $err"
           elif [ -n "$pk" ]; then why="needs $pk (not all found on this machine)"
           else why="not built (see build-shared.log)"; fi ;;
      esac
      printf '%s\t%s\n' "$n" "$why" >>"$notrun"
    done
  done
  echo "built in $(( $(date +%s) - t0 ))s" >&2
  [ -n "$out" ] && cp "$work/configure.log" "$work"/build-*.log "$out/" 2>/dev/null
fi
[ -d "$src/build" ] || { echo "cuda-samples.sh: nothing built in $src/build" >&2; exit 1; }

# ---------------------------------------------------------------------------------------
# What to run
# ---------------------------------------------------------------------------------------
# How NVIDIA runs its samples unattended (the checkout's test_args.json, read by its
# run_tests.py): arguments per sample (one run, or several: each must pass), samples it skips
# (interactive graphics) and those needing several GPUs.
declare -A sample_runs=() skip_reason=()
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ -f "$src/test_args.json" ]; then
  while IFS=$'\t' read -r n kind val; do
    case "$kind" in
      skip) skip_reason[$n]="skipped by NVIDIA's own test_args.json (interactive graphics, no unattended mode)" ;;
      min_gpus) [ "$val" -gt "$gpus" ] && skip_reason[$n]="needs $val GPUs (test_args.json); this machine has $gpus" ;;
      runs) sample_runs[$n]=$val ;;
    esac
  done < <(python3 - "$src/test_args.json" <<'PY'
import json, sys
for name, c in json.load(open(sys.argv[1])).items():
    if c.get("skip"): print(f"{name}\tskip\t")
    if "min_gpus" in c: print(f"{name}\tmin_gpus\t{c['min_gpus']}")
    runs = [c["args"]] if "args" in c else [r.get("args", []) for r in c.get("runs", []) if not r.get("skip")]
    if runs: print(f"{name}\truns\t" + "|".join(" ".join(a) for a in runs))
PY
)
fi
skip_reason[simpleMPI]="needs MPI (several processes under mpirun)"

samples=()   # "name<TAB>dir" (dir: the sample's build folder, where it runs)
: >"$work/skip.tsv"
while read -r f; do
  d=$(dirname "$f")
  n=$(basename "$f")
  [ -f "$d/.remora-shared/$n" ] || [ -f "$d/.remora-static/$n" ] || continue
  case "$only" in "" | *" $n "*) ;; *) continue ;; esac
  r=${skip_reason[$n]:-}
  if [ -n "$r" ]; then printf '%s\t%s\n' "$n" "$r" >>"$work/skip.tsv"; continue; fi
  samples+=("$n"$'\t'"$d")
done < <(list_exes)
cat "$notrun" "$work/skip.tsv" 2>/dev/null | sort -u >"$work/not-run-all.tsv"
echo "${#samples[@]} samples to run; $(wc -l <"$work/not-run-all.tsv") not run (reasons below)" >&2
if [ "$do_run" = 0 ]; then
  printf '%s\n' "${samples[@]}" | cut -f1
  echo "--- not run:"; cat "$work/not-run-all.tsv"
  exit 0
fi

# ---------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------
res=$work/results
rm -rf "$res"
mkdir -p "$res"

# run_one NAME DIR MODE VARIANT: the sample's runs (NVIDIA's arguments, one after the other,
# each under the timeout, in its build folder as NVIDIA's run_tests.py does), the verdict
# written to $res/NAME.MODE-VARIANT as "STATUS SECONDS NOTE". MODE: native, shm or tcp.
run_one() {
  local n=$1 d=$2 mode=$3 v=$4 exe log rc t0 t1 st=PASS note="" secs args
  exe=$d/.remora-$v/$n
  log=$logs/$n.$mode-$v.log
  if [ ! -x "$exe" ]; then echo "NOBUILD 0 not built" >"$res/$n.$mode-$v"; return; fi
  : >"$log"
  t0=$(date +%s%N)
  local IFS='|' runs=${sample_runs[$n]:-" "}  # " ": one run without arguments
  for args in $runs; do
    IFS=' '
    echo "=== $n $args ($mode, $v runtime)" >>"$log"
    local part=$log.part
    # shellcheck disable=SC2086 # the arguments are words
    case "$mode" in
      native) (cd "$d" && exec timeout -k 5 "$timeout_s" "$exe" $args) </dev/null >"$part" 2>&1 ;;
      *) (cd "$d" && REMORA_ASSERT_NO_LOCAL_GPU=1 exec timeout -k 5 "$timeout_s" \
            "$remora_run" --transport "$mode" --backend "$backend" -- "$exe" $args) </dev/null >"$part" 2>&1 ;;
    esac
    rc=$?
    cat "$part" >>"$log"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      st=TIMEOUT; note="no exit within ${timeout_s}s"
    elif grep -qE "$fail_re" "$part"; then
      st=FAIL; note=$(grep -m1 -E "$fail_re" "$part")
    elif [ $rc -eq 0 ]; then
      rm -f "$part"; continue
    elif [ $rc -eq 2 ]; then
      st=WAIVED; note=$(grep -m1 -iE 'waiv|requires|needs|not supported|at least' "$part" || tail -n 1 "$part")
    else
      st=FAIL; note="exit $rc: $(grep -m1 -iE 'error|fail' "$part" || tail -n 1 "$part")"
    fi
    rm -f "$part"
    [ -n "${args// /}" ] && note="[$args] $note"
    break
  done
  t1=$(date +%s%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  echo "$st $secs $(echo "$note" | tr -s '\t\n' '  ' | cut -c1-160)" >"$res/$n.$mode-$v"
}
# What a sample prints when it fails, whatever its exit status.
fail_re='Result = FAIL|Test failed|Test FAILED|^FAILED|^FAIL$'

# A bounded pool of runs in the background.
running=0
spawn() {
  while [ "$running" -ge "$jobs" ]; do wait -n; running=$((running - 1)); done
  run_one "$@" &
  running=$((running + 1))
}
drain() { wait; running=0; }

t_run=$(date +%s)
# Native first (both runtimes), then through Remora every sample that passed or was waived
# natively with that runtime (a sample failing natively says nothing about Remora).
for s in "${samples[@]}"; do
  IFS=$'\t' read -r n d <<<"$s"
  spawn "$n" "$d" native shared
  spawn "$n" "$d" native static
done
drain
for m in $modes; do
  [ "$m" = native ] && continue
  for s in "${samples[@]}"; do
    IFS=$'\t' read -r n d <<<"$s"
    mode=${m%-*}; v=${m#*-}
    case "$(cut -d' ' -f1 "$res/$n.native-$v" 2>/dev/null)" in
      PASS|WAIVED) spawn "$n" "$d" "$mode" "$v" ;;
      *) echo "- 0 not passing natively" >"$res/$n.$mode-$v" ;;
    esac
  done
done
drain
t_run=$(( $(date +%s) - t_run ))

# ---------------------------------------------------------------------------------------
# Table and summary
# ---------------------------------------------------------------------------------------
cell() { cut -d' ' -f1 "$res/$1" 2>/dev/null || echo "?"; }
report() {
  local n s nat pass_nat=0 agree=0 lost=() waived=() native_fail=() st
  printf '%-34s %-9s %-10s %-10s %-10s %-10s\n' sample native shm-shared tcp-shared shm-static tcp-static
  printf '%-34s %-9s %-10s %-10s %-10s %-10s\n' ------ ------ ---------- ---------- ---------- ----------
  for s in "${samples[@]}"; do
    n=${s%%$'\t'*}
    local ns nt
    ns=$(cell "$n.native-shared"); nt=$(cell "$n.native-static")
    if [ "$ns" = "$nt" ]; then nat=$ns; else nat="$ns/$nt"; fi
    printf '%-34s %-9s' "$n" "$nat"
    local all=1 any=0
    for m in shm-shared tcp-shared shm-static tcp-static; do
      case " $modes " in *" $m "*) st=$(cell "$n.${m%-*}-${m#*-}") ;; *) st="" ;; esac
      printf ' %-10s' "$st"
      [ -z "$st" ] && continue
      local nv; nv=$(cell "$n.native-${m#*-}")
      if [ "$nv" = PASS ]; then any=1; [ "$st" = PASS ] || { all=0; lost+=("$n $m: $st $(cut -d' ' -f3- "$res/$n.${m%-*}-${m#*-}")  [$logs/$n.${m%-*}-${m#*-}.log]"); }; fi
    done
    echo
    if [ "$ns" = PASS ] || [ "$nt" = PASS ]; then
      pass_nat=$((pass_nat + 1)); [ $all = 1 ] && [ $any = 1 ] && agree=$((agree + 1))
    elif [ "$ns" = WAIVED ] || [ "$nt" = WAIVED ]; then
      waived+=("$n: $(cut -d' ' -f3- "$res/$n.native-shared")")
    else
      native_fail+=("$n: $ns/$nt $(cut -d' ' -f3- "$res/$n.native-shared")")
    fi
  done
  echo
  echo "not run ($(wc -l <"$work/not-run-all.tsv")):"
  sed 's/^/  /; s/\t/: /' "$work/not-run-all.tsv"
  if [ ${#waived[@]} -gt 0 ]; then echo "waived natively (the sample's own reason, exit 2):"; printf '  %s\n' "${waived[@]}"; fi
  if [ ${#native_fail[@]} -gt 0 ]; then echo "failing natively (native shared/static):"; printf '  %s\n' "${native_fail[@]}"; fi
  if [ ${#lost[@]} -gt 0 ]; then echo "passing natively, not through Remora:"; printf '  %s\n' "${lost[@]}"; fi
  echo
  echo "summary: ${#samples[@]} samples run ($(wc -l <"$work/not-run-all.tsv") not run), $pass_nat pass natively," \
       "$agree of them in every Remora mode run (${modes}); ${#waived[@]} waived natively; runs took ${t_run}s"
  [ ${#lost[@]} -eq 0 ]
}
report | tee "$work/table.txt"
rc=${PIPESTATUS[0]}
if [ -n "$out" ]; then
  cp "$work/table.txt" "$out/cuda-samples.txt"
  tar -czf "$out/cuda-samples-logs.tgz" -C "$work" logs results 2>/dev/null
fi
exit "$rc"

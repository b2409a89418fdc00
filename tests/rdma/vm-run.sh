#!/usr/bin/env bash
# vm-run.sh - run one command inside a throw-away QEMU guest that has Soft-RoCE (rdma_rxe).
#
#   tests/rdma/vm-run.sh [OPTIONS] -- CMD [ARGS...]
#
# The guest boots Debian's own kernel (the newest /boot/vmlinuz-<ver> whose /lib/modules/<ver>
# has rdma_rxe; never `uname -r`, which is the host's kernel) under TCG software emulation
# (KVM does not work on the nested build/CI machines), with a tiny busybox initramfs. Its root
# file system is the host's / over virtio-9p, read-only, so host-built binaries run unchanged;
# the repository (and every --share DIR) is mounted read-write at the same path, and /tmp,
# /run, /var/tmp and /root are fresh tmpfs. Before CMD runs, the guest loads rdma_rxe and
# rdma_ucm and creates rxe0 on a dummy netdev `rxenet0` with 10.77.0.1/24 (rdma_cm needs an
# IPv4 address on a real netdev; an rxe on lo supports verbs only). CMD runs as root in the
# host's current directory (when shared; otherwise the first share) with a clean environment:
# PATH, HOME=/root, TMPDIR=/tmp, the --env settings and
#   REMORA_VM=1  REMORA_VM_RDMA_ADDR=10.77.0.1  REMORA_VM_RDMA_DEV=rxe0
# Its stdout and stderr are streamed to ours; vm-run.sh exits with its status.
#
# Options:
#   --timeout S      wall-clock limit for the whole run, boot included (default 600)
#   --share DIR      also share DIR read-write at the same path (repeatable)
#   --env NAME=VALUE set a variable for CMD (repeatable)
#   --mem MIB        guest memory (default 1024)      --smp N   guest vCPUs (default 2; with 1,
#                    a busy-polling peer only runs every 4 ms)
#   --console        copy the guest console (kernel log) to stderr when the run ends
#   --quiet          no timing summary line on stderr
# Environment: REMORA_VM_KERNEL=<version> picks the guest kernel; REMORA_VM_CACHE is where the
# initramfs and the decompressed kernel are cached (default ${XDG_CACHE_HOME:-~/.cache}/remora-vm);
# REMORA_VM_KCMD replaces "quiet loglevel=4" on the kernel command line (debugging the boot).
#
# Exit status: CMD's; 124 when the time limit passed; 125 when the harness itself failed
# (qemu or a suitable kernel missing, guest did not start), with the reason on stderr.
# Needs: qemu-system-x86 linux-image-amd64 busybox-static kmod cpio iproute2 rdma-core
# (tools/install-deps.sh installs them).
set -euo pipefail

SELF=$(readlink -f "$0")
PROG=vm-run
# Modules the initramfs loads (their dependencies are added automatically): what reaches the
# 9p root, and the Soft-RoCE stack (loading it from the initramfs saves reading it over 9p).
INITRD_MODULES="virtio_pci 9pnet_virtio 9p rdma_rxe rdma_ucm dummy"
RDMA_ADDR=10.77.0.1

die() { echo "$PROG: $*" >&2; exit 125; }

# ---------------------------------------------------------------------------------------
# Guest side: runs as PID 1 after switch_root (see the initramfs /init below).
if [ "${1:-}" = "__guest" ]; then
  set +e
  RUN=$2
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  finish() {  # $1 = exit status of CMD (or of the setup)
    cut -d' ' -f1 /proc/uptime >"$RUN/t_end"
    echo "$1" >"$RUN/rc.tmp" && mv "$RUN/rc.tmp" "$RUN/rc"
    sync
    echo o >/proc/sysrq-trigger
    sleep 30
  }
  cut -d' ' -f1 /proc/uptime >"$RUN/t_boot"
  setup() {
    hostname remora-vm || true
    ip link set lo up &&
    modprobe rdma_rxe && modprobe rdma_ucm && modprobe dummy numdummies=0 &&
    ip link add rxenet0 type dummy &&
    ip addr add $RDMA_ADDR/24 dev rxenet0 &&
    ip link set rxenet0 up &&
    rdma link add rxe0 type rxe netdev rxenet0
  }
  if ! setup >"$RUN/setup.log" 2>&1; then
    { echo "vm-run: RDMA setup in the guest failed:"; cat "$RUN/setup.log"; } >>"$RUN/err"
    finish 125
  fi
  ulimit -l unlimited
  mapfile -d '' CMD <"$RUN/cmd"
  cut -d' ' -f1 /proc/uptime >"$RUN/t_ready"
  (
    cd "$(cat "$RUN/cwd")" || exit 125
    exec env -i PATH="$PATH" HOME=/root TMPDIR=/tmp TERM=dumb LANG=C.UTF-8 \
      REMORA_VM=1 REMORA_VM_RDMA_ADDR=$RDMA_ADDR REMORA_VM_RDMA_DEV=rxe0 \
      bash -c 'set -a; . "$1"; set +a; shift; exec "$@"' vm-env "$RUN/env" "${CMD[@]}"
  ) >>"$RUN/out" 2>>"$RUN/err" </dev/null
  finish $?
fi

# ---------------------------------------------------------------------------------------
# Host side.
usage() { sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

TIMEOUT=600 MEM=1024 SMP=2 SHOW_CONSOLE=0 QUIET=0
SHARES=() ENVS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --share) SHARES+=("$(readlink -f "${2:?}")"); shift 2 ;;
    --env) [[ "${2:-}" == *=* ]] || die "--env needs NAME=VALUE"; ENVS+=("$2"); shift 2 ;;
    --mem) MEM=${2:?}; shift 2 ;;
    --smp) SMP=${2:?}; shift 2 ;;
    --console) SHOW_CONSOLE=1; shift ;;
    --quiet) QUIET=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) echo "$PROG: unknown option '$1'" >&2; usage ;;
  esac
done
[ $# -ge 1 ] || usage
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "--timeout wants seconds"

# The repository this script lives in is always shared.
REPO=$(cd "$(dirname "$SELF")/../.." && pwd -P)
SHARES=("$REPO" "${SHARES[@]}")

command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86, or run tools/install-deps.sh)"
for t in cpio gzip modinfo busybox timeout; do
  command -v $t >/dev/null || [ -x /bin/$t ] || die "$t not found (run tools/install-deps.sh)"
done
BUSYBOX=$(command -v busybox || echo /bin/busybox)
if ldd "$BUSYBOX" >/dev/null 2>&1; then die "$BUSYBOX is not statically linked (apt-get install busybox-static)"; fi

pick_kernel() {
  local k
  if [ -n "${REMORA_VM_KERNEL:-}" ]; then
    k=$REMORA_VM_KERNEL
    [ -f "/boot/vmlinuz-$k" ] || die "REMORA_VM_KERNEL=$k: /boot/vmlinuz-$k does not exist"
    modinfo -k "$k" -n rdma_rxe >/dev/null 2>&1 || die "kernel $k has no rdma_rxe module"
    echo "$k"; return
  fi
  for k in $(ls /lib/modules 2>/dev/null | sort -rV); do
    [ -r "/boot/vmlinuz-$k" ] && modinfo -k "$k" -n rdma_rxe >/dev/null 2>&1 && { echo "$k"; return; }
  done
  die "no installed kernel with the rdma_rxe module (need /boot/vmlinuz-<ver> and /lib/modules/<ver>: apt-get install linux-image-amd64)"
}
KVER=$(pick_kernel)
[ -r "/boot/vmlinuz-$KVER" ] || die "/boot/vmlinuz-$KVER is not readable"

# Module files for the initramfs, dependencies first.
declare -A SEEN=()
MODFILES=()
add_module() {
  local m=$1 dep f
  [ -n "${SEEN[$m]:-}" ] && return
  SEEN[$m]=1
  f=$(modinfo -k "$KVER" -n "$m" 2>/dev/null) || die "module $m not found for kernel $KVER"
  for dep in $(modinfo -k "$KVER" -F depends "$m" | tr ',' ' '); do add_module "$dep"; done
  case "$f" in
    *.ko) MODFILES+=("$f") ;;
    "(builtin)"|"") ;;
    *) die "module $m is $f; only uncompressed .ko modules are supported" ;;
  esac
}
for m in $INITRD_MODULES; do add_module "$m"; done

# The initramfs /init: load the modules, mount the host's / read-only over 9p, tmpfs on the
# writable places, the shares and the run directory read-write, then switch_root into this
# script's guest side.
INIT_SCRIPT=$(cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
arg() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" /proc/cmdline; }
RUN=$(arg rvm.run); SHARES=$(arg rvm.shares); SELF=$(arg rvm.self)
for m in $(cat /modules); do insmod "/mods/$m" || echo "vm-run init: insmod $m failed"; done
O=trans=virtio,version=9p2000.L,msize=512000
fail() { echo "vm-run init: $*"; echo o >/proc/sysrq-trigger; sleep 30; }
mount -t 9p -o ro,$O,cache=loose hostroot /newroot || fail "cannot mount the host root over 9p"
for d in tmp run var/tmp root; do mount -t tmpfs -o mode=1777 tmpfs /newroot/$d; done
for d in proc sys dev; do mount --move /$d /newroot/$d; done
i=0
for s in $(echo "$SHARES" | tr ':' ' '); do
  mkdir -p "/newroot$s" 2>/dev/null
  mount -t 9p -o $O,cache=mmap share$i "/newroot$s" || fail "cannot mount share $s"
  i=$((i + 1))
done
mkdir -p "/newroot$RUN" && mount -t 9p -o $O,cache=none run "/newroot$RUN" || fail "cannot mount the run directory"
exec switch_root /newroot /bin/bash "$SELF" __guest "$RUN"
EOF
)

CACHE=${REMORA_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remora-vm}
KEY=$( { echo "$KVER"; printf '%s\n' "${MODFILES[@]}"; echo "$INIT_SCRIPT"; sha1sum "$BUSYBOX"; } | sha1sum | cut -c1-12)
INITRD=$CACHE/initrd-$KVER-$KEY.gz
if [ ! -s "$INITRD" ]; then
  mkdir -p "$CACHE" || die "cannot create $CACHE"
  R=$(mktemp -d)
  mkdir -p "$R"/bin "$R"/mods "$R"/proc "$R"/sys "$R"/dev "$R"/newroot
  cp "$BUSYBOX" "$R"/bin/busybox
  for f in "${MODFILES[@]}"; do cp "$f" "$R"/mods/; basename "$f"; done >"$R"/modules
  printf '%s\n' "$INIT_SCRIPT" >"$R"/init
  chmod +x "$R"/init
  (cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) >"$INITRD.tmp.$$"
  mv "$INITRD.tmp.$$" "$INITRD"
  rm -rf "$R"
fi

# Booting the compressed bzImage costs ~8 s under TCG, most of it in the kernel's own XZ
# decompressor. QEMU boots an uncompressed ELF vmlinux directly through its PVH entry
# point, so decompress it once (natively) and cache it; fall back to the bzImage if the
# kernel is not XZ-compressed or has no PVH note.
KERNEL=/boot/vmlinuz-$KVER
VMLINUX=$CACHE/vmlinux-$KVER-$(stat -c %s-%Y "$KERNEL")
if [ ! -s "$VMLINUX" ] && command -v python3 >/dev/null; then
  python3 - "$KERNEL" "$VMLINUX.tmp.$$" <<'PY' 2>/dev/null && mv "$VMLINUX.tmp.$$" "$VMLINUX" || rm -f "$VMLINUX.tmp.$$"
import lzma, struct, sys
data = open(sys.argv[1], "rb").read()
at = data.find(b"\xfd7zXZ\x00")
if at < 0: sys.exit(1)
elf = lzma.LZMADecompressor().decompress(data[at:])
if elf[:4] != b"\x7fELF" or elf[4] != 2: sys.exit(1)
# Look for the XEN_ELFNOTE_PHYS32_ENTRY (18) note that QEMU's PVH loader needs.
shoff, = struct.unpack_from("<Q", elf, 0x28)
shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
found = False
for i in range(shnum):
    sh = shoff + i * shentsize
    stype, = struct.unpack_from("<I", elf, sh + 4)
    if stype != 7: continue  # SHT_NOTE
    off, size = struct.unpack_from("<QQ", elf, sh + 0x18)
    p = off
    while p + 12 <= off + size:
        namesz, descsz, ntype = struct.unpack_from("<III", elf, p)
        name = elf[p + 12:p + 12 + namesz]
        if name.startswith(b"Xen") and ntype == 18: found = True
        p += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
if not found: sys.exit(1)
open(sys.argv[2], "wb").write(elf)
PY
fi
[ -s "$VMLINUX" ] && KERNEL=$VMLINUX

RUN=$(mktemp -d "${TMPDIR:-/tmp}/remora-vm.XXXXXX")
QPID=
cleanup() {
  [ -n "$QPID" ] && kill "$QPID" 2>/dev/null || true
  rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for s in "${SHARES[@]}"; do
  [ -d "$s" ] || die "share $s is not a directory"
  [[ "$s" =~ ^/[A-Za-z0-9._/+-]*$ ]] || die "share path '$s' has characters the kernel command line cannot carry"
done
[[ "$RUN" =~ ^/[A-Za-z0-9._/+-]*$ ]] || die "run directory '$RUN' has unusual characters (set TMPDIR)"
# Mount parents before children.
mapfile -t SHARES < <(printf '%s\n' "${SHARES[@]}" | awk '!seen[$0]++' | awk '{ print length, $0 }' | sort -n | cut -d' ' -f2-)

CWD=$(pwd -P)
inside=0
for s in "${SHARES[@]}"; do case "$CWD/" in "$s"/*) inside=1 ;; esac; done
[ $inside = 1 ] || CWD=${SHARES[0]}
echo "$CWD" >"$RUN/cwd"
: >"$RUN/env"
for e in "${ENVS[@]}"; do printf '%s=%q\n' "${e%%=*}" "${e#*=}" >>"$RUN/env"; done
: >"$RUN/out"; : >"$RUN/err"
printf '%s\0' "$@" >"$RUN/cmd"

# shellcheck disable=SC2054  # commas belong to qemu's option syntax
FSDEV=(-fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap
       -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
       -fsdev local,id=run,path="$RUN",security_model=none
       -device virtio-9p-pci,fsdev=run,mount_tag=run)
i=0
for s in "${SHARES[@]}"; do
  FSDEV+=(-fsdev "local,id=share$i,path=$s,security_model=none,multidevs=remap"
          -device "virtio-9p-pci,fsdev=share$i,mount_tag=share$i")
  i=$((i + 1))
done
SHARELIST=$(IFS=:; echo "${SHARES[*]}")

T0=$(date +%s.%N)
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -accel tcg -M pc -cpu max -smp "$SMP" -m "$MEM" \
  -nodefaults -display none -no-reboot -monitor none -nic none \
  -serial file:"$RUN/console.log" \
  -kernel "$KERNEL" -initrd "$INITRD" \
  -append "console=ttyS0 ${REMORA_VM_KCMD:-quiet loglevel=4} printk.time=1 panic=-1 mitigations=off nokaslr i8042.noaux i8042.nokbd i8042.nopnp rvm.run=$RUN rvm.shares=$SHARELIST rvm.self=$SELF" \
  "${FSDEV[@]}" </dev/null >"$RUN/qemu.log" 2>&1 &
QPID=$!
tail -n +1 -s 0.2 -f --pid=$QPID "$RUN/out" &
T1=$!
tail -n +1 -s 0.2 -f --pid=$QPID "$RUN/err" >&2 &
T2=$!
set +e
wait $QPID
QRC=$?
QPID=
wait $T1 $T2
set -e
T1=$(date +%s.%N)

show_console() {
  echo "$PROG: ---- guest console (last ${1} lines) ----" >&2
  tail -n "$1" "$RUN/console.log" >&2 || true
  [ -s "$RUN/qemu.log" ] && { echo "$PROG: ---- qemu ----" >&2; cat "$RUN/qemu.log" >&2; }
  echo "$PROG: ----" >&2
}
[ $SHOW_CONSOLE = 1 ] && show_console 200
if [ ! -s "$RUN/rc" ]; then
  if [ $QRC = 124 ] || [ $QRC = 137 ]; then
    echo "$PROG: timed out after $TIMEOUT s (kernel $KVER); command: $*" >&2
    [ $SHOW_CONSOLE = 1 ] || show_console 30
    exit 124
  fi
  echo "$PROG: the guest gave no exit status (qemu exit $QRC, kernel $KVER)" >&2
  [ $SHOW_CONSOLE = 1 ] || show_console 40
  exit 125
fi
RC=$(cat "$RUN/rc")
if [ $QUIET = 0 ]; then
  awk -v t0="$T0" -v t1="$T1" -v boot="$(cat "$RUN/t_boot" 2>/dev/null || echo 0)" \
      -v ready="$(cat "$RUN/t_ready" 2>/dev/null || echo 0)" -v end="$(cat "$RUN/t_end" 2>/dev/null || echo 0)" \
      -v k="$KVER" -v rc="$RC" 'BEGIN {
    printf "vm-run: kernel %s, guest userspace at %.1f s, RDMA ready at %.1f s, command %.1f s, wall %.1f s, exit %s\n",
           k, boot, ready, end - ready, t1 - t0, rc }' >&2
fi
exit "$RC"

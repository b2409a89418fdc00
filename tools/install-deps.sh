#!/usr/bin/env bash
# Installs everything Remora needs on a fresh Debian 12 machine (run as root, or with sudo
# available). Idempotent. Also fetches the Cap'n Proto source that matches the installed
# headers, because the shim links a position-independent, hidden copy of its runtime
# (Debian ships libcapnp.a/libkj.a without -fPIC, which cannot go into a shared object).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

PKGS=(
  build-essential cmake ninja-build pkg-config git
  # The compiler cache the build uses when installed (CMakeLists.txt, tools/ccache-env.sh).
  ccache
  capnproto libcapnp-dev
  libibverbs-dev librdmacm-dev rdma-core ibverbs-providers ibverbs-utils
  libfuse3-dev fuse3
  libgtest-dev libgmock-dev libbenchmark-dev
  libsqlite3-dev sqlite3
  libsodium-dev libcli11-dev libxxhash-dev libspdlog-dev libfmt-dev
  python3
  # RDMA tests boot Debian's own kernel (which has rdma_rxe) under QEMU.
  qemu-system-x86 linux-image-amd64 busybox-static kmod cpio iproute2
  perftest rdmacm-utils
  # Operations tests (tests/ops): a single-node Slurm cluster and the SPANK plugin's headers,
  # Prometheus and promtool, and building/verifying the Debian packages and systemd unit.
  slurmctld slurmd slurm-client munge libslurm-dev
  prometheus curl
  dpkg-dev adduser systemd
  # setcap/getcap: remora-worker-exec's file capabilities (security_test, the package's postinst).
  libcap2-bin
  # Robustness stages (tools/robustness.sh): clang builds with ASan+UBSan and TSan, and the
  # libFuzzer targets; libclang-rt-dev has libFuzzer and the sanitizer runtimes.
  clang libclang-rt-dev
  # integration.exit_calls runs an application under memcheck.
  valgrind
  # A pool of servers (remora-server --pool): its state in etcd, reached through etcd's JSON
  # gateway with libcurl (loaded at run time) and nlohmann's JSON; the pool tests run a
  # three-member etcd cluster (etcd-server) and use etcdctl (etcd-client).
  etcd-server etcd-client libcurl4-openssl-dev nlohmann-json3-dev
  # The Kubernetes DRA driver (tools/k8s, Python): the official Kubernetes client, grpcio and
  # the protobuf and gRPC code generators for the kubelet's API.
  python3-kubernetes python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Cap'n Proto runtime source, same version as the installed headers.
capver=$(dpkg-query -W -f='${Version}' libcapnp-dev | sed 's/-[^-]*$//')
capsrc="$here/.deps/capnproto-c++-$capver"
if [ ! -f "$capsrc/src/capnp/layout.c++" ]; then
  echo "install-deps: fetching capnproto $capver source (for the shim's PIC runtime)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$tmp/src.sources"
  mkdir -p "$tmp/lists/partial"
  opts=(-o Dir::Etc::SourceList="$tmp/src.sources" -o Dir::Etc::SourceParts=/dev/null
        -o Dir::State::Lists="$tmp/lists")
  apt-get "${opts[@]}" update -qq
  (cd "$tmp" && apt-get "${opts[@]}" source --download-only "capnproto=$(dpkg-query -W -f='${Version}' libcapnp-dev)" >/dev/null)
  mkdir -p "$here/.deps"
  tar -xzf "$tmp"/capnproto_"$capver".orig.tar.gz -C "$here/.deps"
fi

# The unprivileged user remora-server (run as root) starts its session workers as
# (docs/SECURITY.md): no home, no shell, no password.
if ! getent passwd remora-worker >/dev/null; then
  echo "install-deps: creating the system user remora-worker (session workers run as it)"
  $SUDO useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    --user-group remora-worker
fi

# The CUDA toolkit is not a Debian package here; it must already be installed.
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_HOME/bin/nvcc" ] || [ ! -f "$CUDA_HOME/include/cuda_runtime_api.h" ]; then
  echo "install-deps: ERROR: the CUDA Toolkit 13.0 was not found at $CUDA_HOME" >&2
  echo "  (need $CUDA_HOME/bin/nvcc and $CUDA_HOME/include). Install it from NVIDIA's" >&2
  echo "  repository or set CUDA_HOME; Remora builds its shim and test programs with it." >&2
  exit 1
fi
# NCCL's header and library (Remora's libnccl.so.2 is built against nccl.h; the host backend's
# tests need no NVIDIA NCCL at run time): the toolkit's, or NVIDIA's nvidia-nccl-cu13 wheel's
# files copied beside it.
if [ ! -f "$CUDA_HOME/include/nccl.h" ]; then
  echo "install-deps: ERROR: $CUDA_HOME/include/nccl.h (NCCL 2.28) was not found: install NVIDIA's libnccl-dev" >&2
  echo "  (or the nvidia-nccl-cu13 wheel's include/ and lib/ into $CUDA_HOME)" >&2
  exit 1
fi
nvv=$("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
case "$nvv" in 13.*) ;; *) echo "install-deps: WARNING: CUDA $nvv found; Remora targets CUDA 13.0" >&2 ;; esac
echo "install-deps: ok (CUDA $nvv at $CUDA_HOME, capnproto $capver)"

#!/usr/bin/env bash
# Builds Remora's Debian packages from a CMake install, with dpkg-deb:
#   remora-server  remora-server, remora-worker, remoractl, remorafs, the systemd unit
#   remora-client  libremora.so (+ its libcudart.so.13 name) and remora-run
#   remora-slurm   the SPANK plugin and remora-slurm (when Slurm's headers were found)
#
#   tools/packaging/build-debs.sh [--build-dir DIR] [--out DIR] [--no-build]
#
# Without --build-dir it uses build/ (configuring it like tools/test.sh if needed) and builds
# what the packages hold; --no-build packages the tree as it is. The build must have the
# install prefix /usr (the default), whose paths are compiled into remora-run and the plugin.
# Runtime dependencies come from dpkg-shlibdeps. Output: DIR/*.deb (default build/debs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build="$src/build" out="" do_build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build-debs: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/debs}
for c in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
  command -v "$c" >/dev/null || { echo "build-debs: $c is missing (Debian package dpkg-dev)" >&2; exit 1; }
done

if [ ! -f "$build/CMakeCache.txt" ]; then
  [ "$do_build" = 1 ] || { echo "build-debs: $build is not a CMake build directory" >&2; exit 1; }
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
if [ "$prefix" != /usr ]; then
  echo "build-debs: $build installs into '$prefix'; packages need /usr (cmake -DCMAKE_INSTALL_PREFIX=/usr $build)" >&2
  exit 1
fi
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
version="${version:-0.0.0}-1"
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
libdir=/usr/$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
have_slurm=0
grep -q '^REMORA_SLURM_INCLUDE_DIR:PATH=/' "$build/CMakeCache.txt" && have_slurm=1

if [ "$do_build" = 1 ]; then
  targets=(remora-server remora-worker remoractl remora remora-run remora-slurm)
  grep -q '^FUSE3_FOUND:INTERNAL=1' "$build/CMakeCache.txt" && targets+=(remorafs)
  [ "$have_slurm" = 1 ] && targets+=(spank_remora)
  cmake --build "$build" -j2 --target "${targets[@]}"
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out"

# package NAME COMPONENT: stage, fill DEBIAN/, build the .deb.
package() {
  local name=$1 component=$2 root="$stage/$1"
  mkdir -p "$root/DEBIAN"
  DESTDIR="$root" cmake --install "$build" --component "$component" --strip >/dev/null
  case "$name" in
    remora-server)
      install -D -m 644 "$here/remora-server.service" "$root/lib/systemd/system/remora-server.service"
      install -D -m 644 "$here/remora-server.default" "$root/etc/default/remora-server"
      install -D -m 644 "$src/docs/OPERATIONS.md" "$root/usr/share/doc/remora-server/OPERATIONS.md"
      ;;
    remora-slurm)
      install -D -m 644 "$src/tools/slurm/slurm.conf.example" "$root/usr/share/doc/remora-slurm/slurm.conf.example"
      install -D -m 644 "$src/docs/SLURM.md" "$root/usr/share/doc/remora-slurm/SLURM.md"
      ;;
  esac
  for f in "$here/debian/$name"/*; do
    install -m "$([ -x "$f" ] && echo 755 || echo 644)" "$f" "$root/DEBIAN/"
  done
  # Shared-library dependencies of every ELF file, as Debian's own packages state them.
  local elves=()
  while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] && elves+=("$f")
  done < <(find "$root" -path "$root/DEBIAN" -prune -o -type f -print0)
  local shlibs=""
  if [ ${#elves[@]} -gt 0 ]; then
    mkdir -p "$stage/shlibs/debian"
    printf 'Source: remora\n\nPackage: %s\nArchitecture: any\n' "$name" >"$stage/shlibs/debian/control"
    shlibs=$(cd "$stage/shlibs" && dpkg-shlibdeps -O --ignore-missing-info "${elves[@]}" 2>/dev/null |
             sed -n 's/^shlibs:Depends=//p')
  fi
  local size
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  sed -i -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" -e "s|@LIBDIR@|$libdir|g" \
      -e "s|@SLURM@|slurm-client (>= 22.05), slurm-client (<< 22.06)|" -e "s|, @SHLIBS@|${shlibs:+, $shlibs}|" \
      -e "s|^Depends: @SHLIBS@$|Depends: ${shlibs:-libc6}|" "$root/DEBIAN/control"
  find "$root" -path "$root/DEBIAN" -prune -o -type d -exec chmod 755 {} +
  dpkg-deb --root-owner-group -Zxz --build "$root" "$out/${name}_${version}_${arch}.deb" >/dev/null
  echo "build-debs: $out/${name}_${version}_${arch}.deb"
}

package remora-server server
package remora-client client
if [ "$have_slurm" = 1 ]; then
  package remora-slurm slurm
else
  echo "build-debs: no remora-slurm package (Slurm's headers were not found: Debian package libslurm-dev)"
fi

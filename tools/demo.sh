#!/usr/bin/env bash
# The first README command: installs what Remora needs, builds the server, the shim and the
# demo program, starts a private local server and runs the demo through the shim - on this
# machine's GPU if it has one, on the host-emulated backend otherwise (and says so).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target remora-server remora-worker remora remora-run remora-demo
echo
echo "$ build/bin/remora-run -- build/bin/remora-demo"
exec build/bin/remora-run -- build/bin/remora-demo

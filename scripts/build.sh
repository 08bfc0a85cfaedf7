#!/usr/bin/env bash
# Configures and builds moec into build/ (Release, Ninja). Idempotent.
# Arguments, if any, are the targets to build (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${MOEC_JOBS:-$(nproc)}"
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build build -j "$jobs" "${targets[@]}"

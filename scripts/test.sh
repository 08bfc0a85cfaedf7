#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite
# (Catch2 unit tests and lit + FileCheck tests, through CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure
# ASan+UBSan unit tests and fuzz targets (25 s each), the TSan concurrency
# test: clang-22 builds of the runtime and reference in build-san/ and
# build-tsan/.
./scripts/sanitizers.sh

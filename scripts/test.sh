#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite
# (Catch2 unit tests and lit + FileCheck tests, through CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure

#!/usr/bin/env bash
# The test suite.
#   ./scripts/test.sh         everything (what .ci/run runs): installs what
#                             is missing, builds everything, runs every CTest
#                             entry (Catch2 unit tests, lit + FileCheck, the
#                             emulated selftest of every shipped table, the
#                             Python package, the repository checks), then
#                             the ASan/UBSan and TSan builds and fuzzing.
#   ./scripts/test.sh --fast  for iteration: rebuilds what changed and runs
#                             the entries labelled `fast` (unit tests, lit
#                             without the emulator-heavy files, Python, the
#                             repository checks); no install step, no
#                             sanitizers. Run the full suite before a commit
#                             lands.
# CTest runs its entries in parallel (ctest -j, one per core); every entry
# has a label and a timeout (test/repo/check_ctest_properties.py).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${MOEC_JOBS:-$(nproc)}"
case "${1:-}" in
  --fast)
    if [ ! -f build/build.ninja ]; then
      echo "test.sh --fast: no build/ yet; run ./scripts/test.sh once" >&2
      exit 2
    fi
    ./scripts/build.sh
    exec ctest --test-dir build --output-on-failure --no-tests=error \
      -j "$jobs" -L fast
    ;;
  "") ;;
  *)
    echo "usage: scripts/test.sh [--fast]" >&2
    exit 2
    ;;
esac
./scripts/install-deps.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure --no-tests=error -j "$jobs"
# ASan+UBSan unit tests and fuzz targets (25 s each), the TSan concurrency
# test: clang-22 builds of the runtime and reference in build-san/ and
# build-tsan/.
./scripts/sanitizers.sh

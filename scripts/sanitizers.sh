#!/usr/bin/env bash
# Sanitizer and fuzzing runs of the plain C++17 parts (runtime, reference),
# built with clang-22 from fuzz/CMakeLists.txt, apart from build/:
#   build-san/   ASan+UBSan: the runtime's unit tests, then each libFuzzer
#                target (bundle reader, grid rules, .npy reader, table
#                parser) for MOEC_FUZZ_SECONDS (default 25) from seeds made
#                of real inputs;
#   build-tsan/  TSan: the runtime's concurrency test at full size, 16
#                million selections by 4 threads on one bundle (about 4 s;
#                MOEC_CONCURRENCY_SELECTIONS sets another total).
# Called by scripts/test.sh after the main suite (it uses build/bin/moec to
# compile the seed bundle, and the main build's generated knob table for the
# table parser's target). Longer runs (docs/fuzzing.md), e.g. 10 minutes each:
#   MOEC_FUZZ_SECONDS=600 ./scripts/sanitizers.sh
# A crash leaves build-san/crash-<target>-<hash>: replay it with
#   build-san/moec-fuzz-<target> build-san/crash-<target>-<hash>
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${MOEC_FUZZ_SECONDS:-25}"
lock=(flock /tmp/moec-build.lock)
command -v flock >/dev/null || lock=()

configure() { # dir sanitizers
  cmake -S fuzz -B "$1" -G Ninja -DCMAKE_C_COMPILER=clang-22 \
    -DCMAKE_CXX_COMPILER=clang++-22 -DMOEC_SANITIZE="$2" \
    -DMOEC_FUZZ_SECONDS="$seconds" >/dev/null
}

# The dialect's knob table, generated from ODS in the main build.
"${lock[@]}" cmake --build build --target MoeKnobsIncGen >/dev/null
configure build-san "address,undefined"
"${lock[@]}" cmake --build build-san -j2 --target moec-runtime-tests \
  moec_fake_hip moec_fake_hip_incomplete moec-fuzz-bundle moec-fuzz-grid \
  moec-fuzz-npy moec-fuzz-table

# Seed corpora from real inputs: a compiled bundle and its manifest, the
# grid rules of the shipped tables, small .npy files of each dtype, the
# shipped tuning tables.
seeds=build-san/seeds
rm -rf "$seeds" && mkdir -p "$seeds/bundle" "$seeds/grid" "$seeds/npy" "$seeds/table"
cp tuning_tables/*.table "$seeds/table/"
if [ -x build/bin/moec ]; then
  build/bin/moec compile tuning_tables/dsv4_pro_tp8_fhmoe.table \
    -o "$seeds/bundle/seed.moeb" -q
  build/bin/moec extract "$seeds/bundle/seed.moeb" -o build-san/seed-extract >/dev/null
  cp build-san/seed-extract/manifest.json "$seeds/bundle/manifest.json"
  python3 - "$seeds/bundle/manifest.json" "$seeds/grid" <<'PY'
import json, sys
rules = set()
for k in json.load(open(sys.argv[1]))["kernels"]:
    rules.update(k["launch"].get("grid", {}).values())
rules.update(["ceil(num_tokens / 4)", "max(min(m, n), -H) * 2", "floor(E / 3) - I"])
for i, rule in enumerate(sorted(rules)):
    open(f"{sys.argv[2]}/rule{i}", "w").write(rule)
PY
fi
python3 - "$seeds/npy" <<'PY'
import struct, sys
def npy(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % d for d in shape) if len(shape) != 1 else "%d," % shape[0])
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * pad + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) +
                           header.encode() + data)
npy(sys.argv[1] + "/u8.npy", "|u1", (2, 3), bytes(range(6)))
npy(sys.argv[1] + "/i32.npy", "<i4", (3,), struct.pack("<3i", 1, -1, 7))
npy(sys.argv[1] + "/f32.npy", "<f4", (2, 2), struct.pack("<4f", 0.5, 1, -2, 3))
npy(sys.argv[1] + "/u16.npy", "<u2", (1, 4), struct.pack("<4H", 1, 2, 3, 65535))
npy(sys.argv[1] + "/f64.npy", "<f8", (0,), b"")
PY

ctest --test-dir build-san --output-on-failure --no-tests=error -R '^san-'
# Each fuzz target's executions and coverage (libFuzzer's cov: and ft:).
ctest --test-dir build-san -V --no-tests=error -R '^fuzz-' 2>&1 |
  grep -E 'INITED|DONE|stat::number_of_executed_units|Test +#|tests passed|Failed|ERROR|SUMMARY|crash-'

configure build-tsan "thread"
"${lock[@]}" cmake --build build-tsan -j2 --target moec-runtime-tests \
  moec_fake_hip moec_fake_hip_incomplete
MOEC_CONCURRENCY_SELECTIONS="${MOEC_CONCURRENCY_SELECTIONS:-16000000}" \
  ctest --test-dir build-tsan --output-on-failure --no-tests=error

#!/usr/bin/env bash
# CTest selftest-real-emulated: `moec selftest --real` runs a bundle's own
# code objects at the bundle's own shape (here flash_tp4's draft network,
# H 5120, I 640, 128 experts, top-3, on the emulated device), and on a GPU
# (the emulated library loaded as an ordinary HIP library) that is the
# default, while the emulated device defaults to the small-shape rebuild
# and says so.
#   selftest_real.sh MOEC EMULATED_HIP TABLES_DIR WORKDIR
set -euo pipefail
moec=$1 emulated=$2 tables=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
export MOEC_EMULATED_HIP_LIBRARY="$emulated"
bundle=$work/flash_tp4.moeb
"$moec" compile -q "$tables/flash_tp4.table" -o "$bundle"
expect() { # text file
  grep -qF -- "$1" "$2" || { echo "expected in $2: $1"; cat "$2"; exit 1; }
}
"$moec" selftest "$bundle" --device emulated --real --network flash-tp4-draft \
  --max-m 8 > "$work/real.out"
cat "$work/real.out"
expect "as compiled (its own code objects at its own shapes)" "$work/real.out"
# Every configuration of the table runs (here at M 1 and 768), each element
# within the oracle's own bound.
expect "PASS flash-tp4-draft ep1 ws1024 m=1 " "$work/real.out"
expect " 0 failed" "$work/real.out"
if grep -q "^FAIL" "$work/real.out"; then exit 1; fi
# A GPU without --small runs the code objects as compiled.
MOEC_HIP_LIBRARY=$emulated MOEC_EMULATED_DEVICES=1 "$moec" selftest "$bundle" \
  --device 0 --network flash-tp4-draft --max-m 1 > "$work/gpu.out"
expect "as compiled (its own code objects at its own shapes)" "$work/gpu.out"
# The emulated device without --real rebuilds at a small shape and says so.
"$moec" selftest "$bundle" --device emulated --network flash-tp4-draft \
  --max-m 1 > "$work/small.out"
expect "kernels rebuilt from its manifest with the same knobs" "$work/small.out"

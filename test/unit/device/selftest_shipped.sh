#!/usr/bin/env bash
# CTest selftest-emulated: every shipped table, compiled, then `moec selftest
# --device emulated` (the table at a small shape, through the layer API and
# the emulated HIP device, against the oracle), M up to 64, and repeated
# forwards with changing M.
#   selftest_shipped.sh MOEC EMULATED_HIP TABLES_DIR WORKDIR
set -euo pipefail
moec=$1 emulated=$2 tables=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
export MOEC_EMULATED_HIP_LIBRARY="$emulated"
for table in "$tables"/*.table; do
  name=$(basename "$table" .table)
  "$moec" compile -q "$table" -o "$work/$name.moeb"
  "$moec" selftest "$work/$name.moeb" --device emulated --small --max-m 64 \
    --repeat 6
done

#!/usr/bin/env bash
# CTest selftest-emulated-ep8: the expert-parallel tables over a whole node
# (tuning_tables/*_ep8.table: Flash and DeepSeek V4 Pro at EP8), compiled,
# then `moec selftest --device emulated --small`: eight ranks in one process
# through the layer API and the emulated HIP device, against the oracle,
# with random, hot-rank, unequal and empty-rank routing around every
# configuration boundary, and repeated forwards bit for bit, for the
# unfused networks and the fused ones (flash-fused, dsv4-pro-fused: a
# device per rank, one symmetric buffer each). Kept apart from
# selftest-emulated, which the eight ranks would triple (318 s here on the
# 2-core machine with the fused networks, 2026-12-02; 110 s before).
#   selftest_ep8.sh MOEC EMULATED_HIP TABLES_DIR WORKDIR
set -euo pipefail
moec=$1 emulated=$2 tables=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
export MOEC_EMULATED_HIP_LIBRARY="$emulated"
ran=0
for table in "$tables"/*_ep8.table; do
  name=$(basename "$table" .table)
  "$moec" compile -q "$table" -o "$work/$name.moeb"
  "$moec" selftest "$work/$name.moeb" --device emulated --small --max-m 64 \
    --repeat 6 | tee "$work/$name.out"
  grep -q "ranks on devices 0,1,2,3,4,5,6,7$" "$work/$name.out" ||
    { echo "$name: no table ran on eight ranks"; exit 1; }
  ran=$((ran + 1))
done
[ "$ran" = 2 ] || { echo "expected 2 EP8 tables, ran $ran"; exit 1; }

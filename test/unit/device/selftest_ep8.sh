#!/usr/bin/env bash
# CTest selftest-emulated-ep8-*: one network of an expert-parallel table over
# a whole node (tuning_tables/*_ep8.table: Flash and DeepSeek V4 Pro at EP8),
# `moec selftest --device emulated --small --network N`: eight ranks in one
# process through the layer API and the emulated HIP device, against the
# oracle, with random, hot-rank, unequal and empty-rank routing around every
# configuration boundary, and repeated forwards bit for bit. The fused
# networks (flash-fused, dsv4-pro-fused) put a device per rank with one
# symmetric buffer each. One entry per network, so that no single entry
# carries a whole table: the four together took 489 s of a 2-core CTest
# run in one entry (2026-12-02) and outgrew its timeout on a slower runner.
#   selftest_ep8.sh MOEC EMULATED_HIP BUNDLE NETWORK WORKDIR
# BUNDLE is compiled by the runtime-ep8-bundles fixture (test/unit/runtime).
set -euo pipefail
moec=$1 emulated=$2 bundle=$3 network=$4 work=$5
export MOEC_EMULATED_HIP_LIBRARY="$emulated"
[ -f "$bundle" ] || { echo "$bundle: missing (runtime-ep8-bundles)"; exit 1; }
mkdir -p "$work"
out=$work/$network.out
"$moec" selftest "$bundle" --device emulated --small --max-m 64 \
  --network "$network" --repeat 6 | tee "$out"
grep -q "^$network ep8 .*: ranks on devices 0,1,2,3,4,5,6,7$" "$out" ||
  { echo "$network: no table ran on eight ranks"; exit 1; }
if grep ": ranks on devices" "$out" | grep -v "^$network ep8 "; then
  echo "$network: a table of another network ran"
  exit 1
fi

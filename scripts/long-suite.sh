#!/usr/bin/env bash
# The on-demand long suite: every shipped network at its real shape on the
# CPU emulator, against the oracle (docs/emulator.md). Takes tens of
# minutes and several GB of memory; CI runs the small-shape subset instead.
# Usage: scripts/long-suite.sh [--quick]   (--quick: decode keys only)
#        scripts/long-suite.sh --every-config [M]
#   (--every-config: every distinct configuration of every shipped table at
#   its real shape, M tokens per rank (default 6), in the first selection
#   whose rows name it, through `moec run --config`)
# With AITER_CSVS="a.csv b.csv" (AITER tuned fused-MoE tables) every
# configuration of each also runs at its own dimensions
# (scripts/aiter-emulate.py); the FHMoE sample in test/lit always does.
# LONG_SUITE_TABLES="flash_ep4 ..." limits the shipped tables it compiles;
# LONG_SUITE_NETWORKS="flash-fused ..." limits --every-config to those networks.
# MOEC=path/to/moec uses that binary (e.g. the relocatable moec-static on a
# machine without LLVM) and skips the install and build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${MOEC:-}" ]]; then
  ./scripts/install-deps.sh
  ./scripts/build.sh moec
fi
moec=${MOEC:-./build/bin/moec}
out=build/long-suite
mkdir -p "$out"
tables=${LONG_SUITE_TABLES:-flash_ep4 flash_ep2 flash_tp4 dsv4_pro_tp8_fhmoe}
for table in $tables; do
  "$moec" compile -q "tuning_tables/$table.table" -o "$out/$table.moeb"
done
run() {
  echo "== moec run $*"
  /usr/bin/time -f "wall %e s, peak %M KiB" "$moec" run "$@" --emulate
}
if [[ "${1:-}" == "--every-config" ]]; then
  m=${2:-6}
  count=0
  for table in $tables; do
    # network ep workspace config, for each configuration's first row.
    while read -r network ep workspace config; do
      if [[ -n "${LONG_SUITE_NETWORKS:-}" && " $LONG_SUITE_NETWORKS " != *" $network "* ]]; then
        continue
      fi
      run "$out/$table.moeb" --network "$network" --ep "$ep" \
        --workspace "$workspace" --m "$m" --config "$config"
      count=$((count + 1))
    done < <(awk '
      /^select / { for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
      /^row / { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "config") c = kv[2] }
                if (!(c in seen)) { seen[c] = 1; print f["network"], f["ep"], f["workspace"], c } }
    ' "tuning_tables/$table.table")
  done
  echo "long suite: all $count configurations passed at their real shape, M = $m per rank"
  exit 0
fi
run "$out/flash_ep4.moeb" --network flash --ep 4 --workspace 1024 --m 6
run "$out/flash_ep4.moeb" --network flash-fused --ep 4 --workspace 1024 --m 6
run "$out/flash_ep2.moeb" --network flash-fused --ep 2 --workspace 512 --m 6
run "$out/flash_tp4.moeb" --network flash-tp4 --ep 1 --workspace 1024 --m 8
run "$out/dsv4_pro_tp8_fhmoe.moeb" --ep 1 --workspace 1024 --m 8
if [[ "${1:-}" != "--quick" ]]; then
  run "$out/flash_ep4.moeb" --network flash --ep 4 --workspace 1024 --m 96
  run "$out/flash_ep4.moeb" --network flash-fused --ep 4 --workspace 8192 --m 256
  # The prefill shape: 2048 tokens per rank in the compact 8192 class
  # (26.5 M MFMAs; 7 min on 16 cores, about an hour on 2; 6.5 GB).
  run "$out/flash_ep4.moeb" --network flash --ep 4 --workspace 8192 --m 2048
fi
for csv in tuning_tables/aiter/tuned_fhmoe.csv ${AITER_CSVS:-}; do
  bundle="$out/aiter-$(basename "$csv" .csv).moeb"
  "$moec" compile -q "$csv" --skip-unsupported -o "$bundle"
  echo "== scripts/aiter-emulate.py $bundle --m 2"
  python3 scripts/aiter-emulate.py "$bundle" --m 2 --moec "$moec"
done
echo "long suite: every run above passed"

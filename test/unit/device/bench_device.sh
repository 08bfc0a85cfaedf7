#!/usr/bin/env bash
# CTest bench-device: `moec bench` on the HIP test double
# (libmoec_timing_double_hip.so: a synthetic clock, no GPU), with two
# devices so fused EP2 runs a rank on each; and on moec's emulated device,
# which must refuse to time.
#   bench_device.sh MOEC TIMING_DOUBLE EMULATED_HIP BUNDLE FIGURES WORKDIR
set -euo pipefail
moec=$1 double=$2 emulated=$3 bundle=$4 figures=$5 work=$6
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
bench() { # output name, then moec bench's options
  local out=$1
  shift
  MOEC_HIP_LIBRARY=$double MOEC_TIMING_DOUBLE_DEVICES=2 \
    "$moec" bench "$bundle" --device 0,1 --published "$figures" --samples 4 \
    "$@" > "$work/$out.stdout" 2> "$work/$out.stderr" ||
    fail "moec bench ($out): $(cat "$work/$out.stderr")"
}

# Every key of the Flash EP2 ws512 table, timed and labelled synthetic.
bench full --network flash --ep 2 --workspace 512 --csv "$work/full.csv" \
  --json "$work/full.json"
grep -q '^SYNTHETIC: ' "$work/full.stdout" || fail "no synthetic label"
grep -q 'mean-of-pass-medians-flush512M-2pass-reversed-shuffled-8samples' \
  "$work/full.stdout" || fail "method: $(head -1 "$work/full.stdout")"
grep -q '^moec bench: pass 2/2: flash ep2 ws512' "$work/full.stderr" ||
  fail "no progress line: $(cat "$work/full.stderr")"
keys=$(grep -c '^row ' <(sed -n '/^select network=flash .*workspace=512/,/^$/p' \
  "$(dirname "$figures")/../flash_ep2.table"))
rows=$(($(wc -l < "$work/full.csv") - 1))
[ "$rows" = "$keys" ] || fail "expected $keys CSV rows, got $rows"
[ "$(grep -c '^flash  *2  *512 ' "$work/full.stdout")" = "$keys" ] ||
  fail "text rows: $(cat "$work/full.stdout")"
# The published figure of (flash, 2, 512, 6) beside the measured time.
want=$(awk -F, '$1 == "flash-ep2-m6-ws512" { print $16 }' "$figures")
[ -n "$want" ] || fail "figures.csv has no flash-ep2-m6-ws512"
awk -F, -v want="$want" '$1 == "flash" && $4 == 6 {
    if ($6 + 0 != want + 0 || $8 != "flash-ep2-m6-ws512") exit 1
    if (($5 / $6) - $7 > 0.001 || $7 - ($5 / $6) > 0.001) exit 1
    found = 1 }
  NR > 1 && $5 + 0 <= 0 { exit 1 }
  END { exit !found }' "$work/full.csv" ||
  fail "m=6 row: $(grep '^flash,2,512,6,' "$work/full.csv")"
grep -Eq "^flash +2 +512 +6 +[0-9.]+ +$want +[0-9.]+ +flash-ep2-m6-ws512$" \
  "$work/full.stdout" || fail "text m=6: $(grep '^flash  *2  *512  *6 ' "$work/full.stdout")"
grep -q '"synthetic": true' "$work/full.json" || fail "JSON synthetic"
[ "$(grep -c '{"network": "flash", "ep": 2, "workspace": 512' "$work/full.json")" = "$keys" ] ||
  fail "JSON rows"
[ ! -e "$work/full.csv.tmp" ] || fail "temporary file left"

# Resume: keys of a previous CSV (and JSON) are kept, not measured again.
bench part --network flash --ep 2 --workspace 512 --m 6 --csv "$work/part.csv"
bench resumed --network flash --ep 2 --workspace 512 --resume "$work/part.csv" \
  --csv "$work/resumed.csv"
[ "$(grep '^flash,2,512,6,' "$work/part.csv")" = \
  "$(grep '^flash,2,512,6,' "$work/resumed.csv")" ] || fail "resumed row differs"
[ "$(($(wc -l < "$work/resumed.csv") - 1))" = "$keys" ] || fail "resumed rows"
bench fromjson --network flash --ep 2 --workspace 512 --resume "$work/full.json" \
  --csv "$work/fromjson.csv"
cmp -s <(cut -d, -f1-8 "$work/full.csv") <(cut -d, -f1-8 "$work/fromjson.csv") ||
  fail "resume from JSON changed the rows"

# Fused EP2: one rank per device.
bench fused --network flash-fused --csv "$work/fused.csv"
[ "$(($(wc -l < "$work/fused.csv") - 1))" -gt 0 ] || fail "no fused rows"

# --compare: the bundle against itself shows no gain, and so does the
# A-against-A control.
bench compare --network flash --ep 2 --workspace 512 --m 6 --compare "$bundle"
grep -Eq '^flash +2 +512 +6 +[0-9.]+ +[0-9.]+ +-?[0-9.]+% +[0-9]+/31 +no gain$' \
  "$work/compare.stdout" || fail "compare: $(cat "$work/compare.stdout")"
grep -q '^control A against A: no gain at any key$' "$work/compare.stdout" ||
  fail "compare control: $(cat "$work/compare.stdout")"
grep -q -- '-16replays' "$work/compare.stdout" || fail "compare method"

# The emulated device refuses, as moec tune --device does.
if MOEC_HIP_LIBRARY=$emulated "$moec" bench "$bundle" > "$work/emu.stdout" \
  2> "$work/emu.stderr"; then
  fail "the emulated device timed"
fi
grep -q "timings are not available on moec's emulated device" "$work/emu.stderr" ||
  fail "emulated: $(cat "$work/emu.stderr")"
echo "PASS: bench on the test double ($keys keys), resume, fused, compare, emulated refusal"

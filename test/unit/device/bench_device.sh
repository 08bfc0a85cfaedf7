#!/usr/bin/env bash
# CTest bench-device: `moec bench` on the HIP test double
# (libmoec_timing_double_hip.so: a synthetic clock, no GPU), with two
# devices so fused EP2 runs a rank on each; and on moec's emulated device,
# which must refuse to time. Per-stage times beside the layer's, and for a
# bundle compiled from an AITER CSV its us1/us2/us beside them.
#   bench_device.sh MOEC TIMING_DOUBLE EMULATED_HIP BUNDLE FIGURES AITER_CSV WORKDIR
set -euo pipefail
moec=$1 double=$2 emulated=$3 bundle=$4 figures=$5 aiter_csv=$6 work=$7
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
grep -Eq "^flash +2 +512 +6 +[0-9.]+( +[0-9.]+){5} +$want +[0-9.]+ +flash-ep2-m6-ws512$" \
  "$work/full.stdout" || fail "text m=6: $(grep '^flash  *2  *512  *6 ' "$work/full.stdout")"
# Each stage alone, timed as the layer: on the double's clock (a kernel's
# cost does not depend on what ran before it, but for the cold factor the
# flush gives both) the stages add up to the layer.
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  { sum = 0
    for (s = 1; s <= 5; s++) {
      split("quant_us sort_us w13_us w2_us combine_us", name, " ")
      t = $c[name[s]]
      if (t == "" || t + 0 <= 0) { print "m=" $4 ": no " name[s]; exit 1 }
      sum += t }
    d = sum - $c["layer_us"]; if (d < 0) d = -d
    if (d > 0.01 * $c["layer_us"]) { print "m=" $4 ": stages " sum " layer " $c["layer_us"]; exit 1 } }' \
  "$work/full.csv" || fail "stage times: $(head -3 "$work/full.csv")"
grep -Eq '^network +ep +ws +m +layer_us +quant_us +sort_us +w13_us +w2_us +combine_us +published_us ' \
  "$work/full.stdout" || fail "text header: $(sed -n 3p "$work/full.stdout")"
grep -q '"synthetic": true' "$work/full.json" || fail "JSON synthetic"
grep -q '"w13_us": [0-9]' "$work/full.json" || fail "JSON stage times"
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
cmp -s <(cut -d, -f1-8,12-16 "$work/full.csv") <(cut -d, -f1-8,12-16 "$work/fromjson.csv") ||
  fail "resume from JSON changed the rows"

# Fused EP2: one rank per device; its stages wait on each other's ranks
# and are not timed apart.
bench fused --network flash-fused --csv "$work/fused.csv"
[ "$(($(wc -l < "$work/fused.csv") - 1))" -gt 0 ] || fail "no fused rows"
awk -F, 'NR > 1 && ($12 != "" || $14 != "") { exit 1 }' "$work/fused.csv" ||
  fail "fused stage times: $(sed -n 2p "$work/fused.csv")"

# A bundle compiled from an AITER CSV: the CSV's us1, us2 and us of the row
# compiled at each key beside W13, W2 and the layer, read here from the CSV
# by its header.
"$moec" compile "$aiter_csv" --small --skip-unsupported -q -o "$work/aiter.moeb" \
  2> "$work/aiter-compile.stderr" || fail "compile $aiter_csv: $(cat "$work/aiter-compile.stderr")"
MOEC_HIP_LIBRARY=$double "$moec" bench "$work/aiter.moeb" --samples 4 \
  --published "$figures" --aiter-csv "$aiter_csv" --csv "$work/aiter.csv" \
  > "$work/aiter.stdout" 2> "$work/aiter.stderr" || fail "bench aiter: $(cat "$work/aiter.stderr")"
name=$(basename "$aiter_csv")
awk -F, -v name="$name" '
  FNR == 1 { for (i = 1; i <= NF; i++) col[FILENAME, $i] = i; next }
  FILENAME != ARGV[2] { us1[FNR] = $col[FILENAME, "us1"]; us2[FNR] = $col[FILENAME, "us2"]
                        us[FNR] = $col[FILENAME, "us"]; next }
  { split($col[FILENAME, "figure"], at, ":"); line = at[2]
    if (at[1] != name || !(line in us1)) { print "figure " $col[FILENAME, "figure"]; exit 1 }
    if ($col[FILENAME, "published_us1"] + 0 != us1[line] + 0 ||
        $col[FILENAME, "published_us2"] + 0 != us2[line] + 0 ||
        $col[FILENAME, "published_us"] + 0 != us[line] + 0) { print "line " line; exit 1 }
    r = $col[FILENAME, "w13_us"] / us1[line] - $col[FILENAME, "ratio_w13"]
    if (r > 0.001 || r < -0.001) { print "ratio_w13 at line " line; exit 1 }
    rows++ }
  END { if (rows < 1) { print "no rows"; exit 1 } }' "$aiter_csv" "$work/aiter.csv" ||
  fail "AITER figures: $(cat "$work/aiter.csv")"
grep -Eq ' us1 +w13/us1 +us2 +w2/us2 +figure$' "$work/aiter.stdout" ||
  fail "AITER text header: $(sed -n 3p "$work/aiter.stdout")"
# Without the CSV (its name and hash found nowhere), a note, no figures.
MOEC_HIP_LIBRARY=$double "$moec" bench "$work/aiter.moeb" --samples 4 \
  --published "$figures" > "$work/aiter-none.stdout" 2> "$work/aiter-none.stderr" ||
  fail "bench aiter without the CSV: $(cat "$work/aiter-none.stderr")"
grep -q "^note: no AITER figures: $name with hash [0-9a-f]* not found" \
  "$work/aiter-none.stdout" || fail "no note: $(cat "$work/aiter-none.stdout")"

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
echo "PASS: bench on the test double ($keys keys, stages), resume, fused, AITER figures, compare, emulated refusal"

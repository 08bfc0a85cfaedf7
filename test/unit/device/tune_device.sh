#!/usr/bin/env bash
# CTest tune-device: `moec tune --device 0` through the device timer, on the
# HIP test double (libmoec_timing_double_hip.so: a synthetic clock, no GPU)
# and on moec's emulated device (which must refuse to time).
#   tune_device.sh MOEC TIMING_DOUBLE EMULATED_HIP WORKDIR
set -euo pipefail
moec=$1 double=$2 emulated=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
# An unfused EP2 template at a small shape, four keys; the grid only.
printf 'moec-table 1\nproblem p family=megamoe hidden=512 intermediate=256 experts=8 top_k=2 ep=2\nkernel quant stage=quant problem=p waves=4\nkernel sort stage=sort problem=p m_tile=16 waves=4\nkernel w13 stage=w13 problem=p m=16 n=64 k=256 waves=4 orientation=b_major swiglu_limit=10\nkernel w2 stage=w2 problem=p m=16 n=128 k=256 waves=4 orientation=b_major\nkernel combine stage=combine problem=p waves=4\nconfig c kernels=quant,sort,w13,w2,combine\nselect network=n family=megamoe ep=2 workspace=1024 transport=none\nrow m=1 config=c\nrow m=6 config=c\nrow m=64 config=c\nrow m=1024 config=c\n' > "$work/s.table"
tune() { # output, then moec tune's options
  local out=$1
  shift
  "$moec" tune "$work/s.table" -o "$work/$out.table" --cache-dir "$work/cache" \
    --refinement-rounds 0 --analytic-counts --device 0 "$@" \
    > "$work/$out.stdout" 2> "$work/$out.stderr" ||
    fail "moec tune ($out): $(cat "$work/$out.stderr")"
}

# The test double: every row measured, with its device, method and today's
# UTC date; each key's row is the fastest of the candidates timed there.
MOEC_HIP_LIBRARY=$double tune double --measurements "$work/m.csv"
grep -q "4 rows measured" "$work/double.stdout" ||
  fail "expected 4 rows measured: $(cat "$work/double.stdout")"
today=$(date -u +%F)
rows=$(grep -c '^row ' "$work/double.table")
[ "$rows" = 4 ] || fail "expected 4 rows, got $rows"
measured=$(grep -c "^row m=[0-9]* config=[^ ]* provenance=measured device=moec-timing-test-double-gpu0 method=hip-graph-median-flush512M-4pass-reversed-40samples date=$today measured_us=[0-9.]* " "$work/double.table" || true)
[ "$measured" = 4 ] || fail "expected 4 measured rows: $(grep '^row ' "$work/double.table")"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  { m = $c["m"]; t = $c["measured_us"] + 0
    if (t <= 0) bad = "a candidate without a time at m=" m
    if (!(m in best) || t < best[m]) best[m] = t
    if ($c["chosen"] == "yes") { chosen[m] = t; n[m]++ } }
  END { for (m in best) if (n[m] != 1 || chosen[m] != best[m]) bad = "m=" m ": chosen " chosen[m] ", fastest " best[m]
        if (length(best) != 4) bad = length(best) " keys"
        if (bad != "") { print bad; exit 1 } }' "$work/m.csv" ||
  fail "measurements: $(cat "$work/m.csv")"

# The emulated device: the reason, and every row model-ranked.
MOEC_HIP_LIBRARY=$emulated tune emulated
grep -qF "moec: --device 0: timings are not available on moec's emulated device; ranking with the cost model" \
  "$work/emulated.stderr" || fail "emulated: $(cat "$work/emulated.stderr")"
! grep -q 'provenance=measured' "$work/emulated.table" ||
  fail "a measured row from the emulated device"
[ "$(grep -c '^row .*provenance=model-ranked' "$work/emulated.table")" = 4 ] ||
  fail "expected 4 model-ranked rows"
# A fused EP2 selection (two devices of the double): its configurations
# must share one handshake group (waves, grid, dispatch CUs), so the device
# chooses a group, the one measured fastest summed over every key, among
# the model's 2-, 4- and 8-wave groups and its selection-wide variants
# (grid 256 or 512, dispatch CUs 16); the table it writes compiles.
printf 'moec-table 1\nproblem p family=megamoe hidden=512 intermediate=256 experts=8 top_k=2 ep=2\nkernel quant stage=quant problem=p waves=4\nkernel s1 stage=w13 problem=p m=16 n=64 k=256 waves=4 orientation=b_major swiglu_limit=10 transport=fixed_slot capacity=32 max_tokens=16 workgroups=64 dispatch_cus=4\nkernel s2 stage=w2 problem=p m=16 n=128 k=256 waves=4 orientation=b_major transport=fixed_slot capacity=32 max_tokens=16 workgroups=64\nkernel combine stage=combine problem=p waves=4 peer_rows=true\nconfig c kernels=quant,s1,s2,combine\nselect network=f family=megamoe ep=2 workspace=16 transport=fixed_slot\nrow m=1 config=c\n' > "$work/f.table"
MOEC_TIMING_DOUBLE_DEVICES=2 MOEC_HIP_LIBRARY=$double "$moec" tune "$work/f.table" \
  -o "$work/fused.table" --cache-dir "$work/cache" --refinement-rounds 0 \
  --analytic-counts --device 0 --measurements "$work/fm.csv" \
  > "$work/fused.stdout" 2> "$work/fused.stderr" ||
  fail "moec tune (fused): $(cat "$work/fused.stderr")"
grep -q "16 rows measured" "$work/fused.stdout" ||
  fail "expected 16 rows measured: $(cat "$work/fused.stdout")"
grep -Eq "f ep2 ws16: 16 keys, [0-9]+ candidates \([0-9]+ refinements, [1-9][0-9]* selection-wide\)" \
  "$work/fused.stdout" || fail "no selection-wide variants: $(cat "$work/fused.stdout")"
"$moec" compile -q "$work/fused.table" -o "$work/fused.moeb" ||
  fail "the fused table does not compile"
# A candidate's group from its name: its waves and selection-wide tags.
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  { name = $c["candidate"]; m = $c["m"]; t = $c["measured_us"] + 0
    g = ""; rest = name
    while (match(rest, /_(w[0-9]+|fused[a-z]+[0-9]+)(_|$)/)) {
      g = g substr(rest, RSTART, RLENGTH - (substr(rest, RSTART + RLENGTH - 1, 1) == "_"))
      rest = substr(rest, RSTART + RLENGTH - 1) }
    keys[m] = 1
    if (!((g, m) in best) || t < best[g, m]) best[g, m] = t
    groups[g] = 1
    if ($c["chosen"] == "yes") chosen[m] = g }
  END { for (g in groups) { total = 0; full = 1
          for (m in keys) { if (!((g, m) in best)) { full = 0; break } total += best[g, m] }
          if (full) { n++; sum[g] = total } }
        for (m in keys) { if (!(m in chosen)) { print "no choice at m=" m; exit 1 }
                          if (chosen[m] != chosen[1]) { print "two groups chosen"; exit 1 } }
        if (n < 3) { print n " groups timed at every key"; exit 1 }
        for (g in sum) if (sum[g] < sum[chosen[1]]) { print "group " g " " sum[g] " beats the chosen " chosen[1] " " sum[chosen[1]]; exit 1 } }' \
  "$work/fm.csv" || fail "fused measurements: $(cat "$work/fm.csv")"

echo "tune-device: passed"

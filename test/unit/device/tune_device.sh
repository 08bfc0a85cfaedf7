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
echo "tune-device: passed"

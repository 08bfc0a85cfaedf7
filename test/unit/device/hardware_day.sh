#!/usr/bin/env bash
# CTest hardware-day-emulated: scripts/hardware-day.sh end to end on the
# emulated device (numerics) and the HIP timing test double (timing) for
# one table, then the folder an owner would send back: every file, the
# SYNTHETIC label, the self-test verdicts, measured rows.
#   hardware_day.sh SCRIPT MOEC TIMING_DOUBLE EMULATED_HIP WORKDIR
set -euo pipefail
script=$1 moec=$2 double=$3 emulated=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
table=flash_tp4
out="$work/out"
begin=$(date +%s)
MOEC="$moec" MOEC_TIMING_DOUBLE_HIP="$double" MOEC_EMULATED_HIP="$emulated" \
  HARDWARE_DAY_TABLES=$table HARDWARE_DAY_TUNE_ARGS="--cache-dir $work/cache --analytic-counts --refinement-rounds 0 --timed-per-key 1" \
  "$script" --out "$out" emulated > "$work/stdout" 2> "$work/stderr" ||
  fail "hardware-day.sh: $(tail -3 "$work/stderr")"
seconds=$(($(date +%s) - begin))

for file in README.txt steps.log $table/shipped.moeb $table/measured.moeb \
  $table/measured.table $table/measurements.csv $table/candidates.csv \
  $table/report.html $table/tune.txt \
  $table/compile-shipped.txt $table/compile-measured.txt; do
  [ -s "$out/$file" ] || fail "missing or empty: $file"
done
for kind in shipped measured; do
  for file in selftest-$kind.txt bench-$kind.txt bench-$kind.csv bench-$kind.json; do
    [ -s "$out/$table/$file" ] || fail "missing or empty: $table/$file"
  done
  # The self-test's verdict line, and no failed case.
  grep -Eq '^[0-9]+ passed, 0 failed' "$out/$table/selftest-$kind.txt" &&
    grep -q '^PASS ' "$out/$table/selftest-$kind.txt" ||
    fail "no passing case in selftest-$kind.txt"
  ! grep -q '^FAIL ' "$out/$table/selftest-$kind.txt" ||
    fail "a failed case: $(grep -m1 '^FAIL ' "$out/$table/selftest-$kind.txt")"
  # Every timing says it is synthetic.
  grep -q '^SYNTHETIC: ' "$out/$table/bench-$kind.txt" || fail "bench-$kind.txt: no SYNTHETIC label"
  grep -q '"synthetic": true' "$out/$table/bench-$kind.json" || fail "bench-$kind.json: not synthetic"
  awk -F, 'NR > 1 && $11 != 1 { exit 1 }' "$out/$table/bench-$kind.csv" ||
    fail "bench-$kind.csv: a row not marked synthetic"
  # Every key of the table timed, with its stages.
  keys=$(grep -c '^row ' "$( [ $kind = shipped ] && echo "$(dirname "$script")/../tuning_tables/$table.table" || echo "$out/$table/measured.table")")
  [ "$(($(wc -l < "$out/$table/bench-$kind.csv") - 1))" = "$keys" ] ||
    fail "bench-$kind.csv: expected $keys rows"
  awk -F, 'NR > 1 && ($14 == "" || $15 == "") { exit 1 }' "$out/$table/bench-$kind.csv" ||
    fail "bench-$kind.csv: a row without W13/W2 times"
done
grep -q '^SYNTHETIC' "$out/README.txt" || fail "README.txt: no SYNTHETIC label"
grep -q '^moec hardware day: every step passed' "$out/README.txt" ||
  fail "README.txt verdict: $(head -1 "$out/README.txt")"
grep -q "^moec: *$(git -C "$(dirname "$script")/.." rev-parse HEAD)" "$out/README.txt" ||
  fail "README.txt: no moec git hash"
# Every row of the measured table was measured on the double.
rows=$(grep -c '^row ' "$out/$table/measured.table")
[ "$rows" -gt 0 ] || fail "measured.table has no rows"
[ "$(grep -c '^row .* provenance=measured device=moec-timing-test-double-gpu0 ' "$out/$table/measured.table")" = "$rows" ] ||
  fail "measured.table: $(grep -m1 '^row ' "$out/$table/measured.table")"
# One ok line per step: 2 x (compile, selftest, bench), tune, report.
[ "$(grep -c '^ok	' "$out/steps.log")" = 8 ] || fail "steps.log: $(cat "$out/steps.log")"
! grep -q FAILED "$out/steps.log" || fail "steps.log: $(cat "$out/steps.log")"

# A failing step (the self-test given an option it lacks) stops the
# script with exit 1 and a line naming the step, and keeps what was
# written so far.
set +e
MOEC="$moec" MOEC_TIMING_DOUBLE_HIP="$double" MOEC_EMULATED_HIP="$emulated" \
  HARDWARE_DAY_TABLES=$table HARDWARE_DAY_SELFTEST_ARGS=--no-such-option \
  "$script" --out "$work/bad" emulated > /dev/null 2> "$work/bad.stderr"
status=$?
MOEC="$moec" "$script" --out "$work/usage" 0,x > /dev/null 2>&1
usage=$?
set -e
[ "$status" = 1 ] || fail "failing step: exit $status, expected 1"
grep -q "^hardware-day: step 'selftest $table (shipped)' failed (exit [0-9]*); see $table/selftest-shipped.txt" \
  "$work/bad.stderr" || fail "failing step message: $(cat "$work/bad.stderr")"
[ -s "$work/bad/$table/shipped.moeb" ] || fail "the compiled bundle was not kept"
grep -q "^FAILED	selftest $table (shipped)" "$work/bad/steps.log" || fail "bad steps.log"
grep -q "^moec hardware day: stopped at step 'selftest $table (shipped)'" "$work/bad/README.txt" ||
  fail "bad README.txt: $(head -1 "$work/bad/README.txt")"
[ "$usage" = 2 ] || fail "bad DEVICES: exit $usage, expected 2"
echo "PASS: hardware-day.sh on the emulated device ($table) in ${seconds} s"

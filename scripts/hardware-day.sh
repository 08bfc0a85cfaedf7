#!/usr/bin/env bash
# Hardware day (docs/hardware-day.md): everything an MI355X owner runs to
# learn whether moec is right and fast on their chip, and to turn their
# measurements into tables, in one output folder to send back.
#
#   scripts/hardware-day.sh [--out DIR] DEVICES
#
# DEVICES: GPU ordinals (0,1,2,3,4,5,6,7: fused EP ranks one per device),
# or `emulated`: numerics on moec's emulated HIP device (at --small) and
# timing on moec's HIP timing test double, every timing labelled SYNTHETIC.
#
# For every shipped table (tuning_tables/*.table with a spec in
# tuning_tables/specs/), in order:
#   compile       moec compile TABLE -o shipped.moeb
#   selftest      moec selftest shipped.moeb (the real shapes on a GPU)
#   bench         moec bench shipped.moeb --json/--csv
#   tune          moec tune SPEC --device D -o measured.table (measured rows)
#   recompile     moec compile measured.table -o measured.moeb
#   selftest/bench again on measured.moeb
#   report        moec report measured.moeb --bench bench-measured.json
# then README.txt (what each file is, versions, devices).
#
# Environment:
#   HARDWARE_DAY_TABLES    the tables to run, by name (default: every one)
#   HARDWARE_DAY_TUNE_ARGS extra `moec tune` options (e.g. --refinement-rounds 0)
#   HARDWARE_DAY_SELFTEST_ARGS extra `moec selftest` options (e.g. --max-m 64)
#   HARDWARE_DAY_BENCH_ARGS extra `moec bench` options (e.g. --samples 4)
#   MOEC                   the moec binary (default build/bin/moec)
#   MOEC_TIMING_DOUBLE_HIP the test double (emulated; default
#                          build/lib/libmoec_timing_double_hip.so)
#   MOEC_EMULATED_HIP      the emulated device (emulated; default
#                          build/lib/libmoec_emulated_hip.so)
#
# Exit status: 0 every step passed; 1 a step failed (one line on stderr
# names it and its log; what was written so far stays in the folder); 2 bad
# usage or a missing input; 3 nothing failed, but a self-test skipped tables
# it was asked to run (too few devices for a fused table's EP ranks): those
# steps are INCOMPLETE in steps.log and README.txt says which.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage() {
  echo "usage: scripts/hardware-day.sh [--out DIR] DEVICES (0,1,...,7 or emulated)" >&2
  exit 2
}
out="hardware-day-$(date -u +%Y%m%d-%H%M%S)"
devices=""
while [ $# -gt 0 ]; do
  case $1 in
  --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) usage ;;
  *) [ -z "$devices" ] || usage; devices=$1; shift ;;
  esac
done
[ -n "$devices" ] || usage
if [ "$devices" != emulated ] && ! [[ $devices =~ ^[0-9]+(,[0-9]+)*$ ]]; then
  echo "hardware-day: DEVICES must be GPU ordinals N[,N...] or 'emulated', got '$devices'" >&2
  exit 2
fi
moec=${MOEC:-$repo/build/bin/moec}
[ -x "$moec" ] || { echo "hardware-day: no moec at $moec (scripts/build.sh moec, or MOEC=...)" >&2; exit 2; }

tables=${HARDWARE_DAY_TABLES:-}
if [ -z "$tables" ]; then
  for spec in "$repo"/tuning_tables/specs/*.spec; do
    name=$(basename "$spec" .spec)
    [ -f "$repo/tuning_tables/$name.table" ] && tables="$tables $name"
  done
fi
for name in $tables; do
  [ -f "$repo/tuning_tables/$name.table" ] && [ -f "$repo/tuning_tables/specs/$name.spec" ] ||
    { echo "hardware-day: no shipped table and spec named '$name'" >&2; exit 2; }
done

first=${devices%%,*}
count=$(($(tr -cd , <<< "$devices" | wc -c) + 1))
compile_args=() selftest_device=() bench_env=() bench_device=()
if [ "$devices" = emulated ]; then
  double=${MOEC_TIMING_DOUBLE_HIP:-$repo/build/lib/libmoec_timing_double_hip.so}
  emulated=${MOEC_EMULATED_HIP:-$repo/build/lib/libmoec_emulated_hip.so}
  for lib in "$double" "$emulated"; do
    [ -f "$lib" ] || { echo "hardware-day: $lib not found (scripts/build.sh moec-timing-double-hip moec_emulated_hip)" >&2; exit 2; }
  done
  # Eight devices of the double, so fused EP8 ranks have one each.
  first=0 count=8
  compile_args=(--small)
  selftest_device=(--device emulated)
  bench_env=(env MOEC_HIP_LIBRARY="$double" MOEC_TIMING_DOUBLE_DEVICES=$count)
  bench_device=(--device 0,1,2,3,4,5,6,7)
  selftest_env=(env MOEC_HIP_LIBRARY="$emulated")
else
  selftest_device=(--devices "$devices")
  bench_env=(env)
  bench_device=(--device "$devices")
  selftest_env=(env)
fi

mkdir -p "$out" || { echo "hardware-day: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
log="$out/steps.log"
: > "$log"
started=$(date -u +%s)

# step NAME FILE COMMAND...: runs it with stdout in FILE and stderr in
# FILE's name with .stderr, one line in steps.log; on failure the one-line
# message and exit 1. A self-test's exit 4 (it passed what it ran but
# skipped tables) is INCOMPLETE: recorded in `incomplete`, not a pass.
incomplete=()
step() {
  local name=$1 file=$2
  shift 2
  local begin=$(date -u +%s)
  echo "hardware-day: $name" >&2
  "$@" > "$file" 2> "${file%.*}.stderr"
  local status=$?
  local seconds=$(($(date -u +%s) - begin))
  local verdict=FAILED
  [ $status = 0 ] && verdict=ok
  if [ $status = 4 ] && [[ $name == selftest* ]]; then
    verdict=INCOMPLETE status=0
    incomplete+=("$name")
    echo "hardware-day: step '$name' skipped tables: $(tail -1 "$file")" >&2
  fi
  printf '%s\t%s\t%ss\t%s\n' "$verdict" "$name" "$seconds" "${file#$out/}" >> "$log"
  if [ $status != 0 ]; then
    echo "hardware-day: step '$name' failed (exit $status); see ${file#$out/} and its .stderr in $out" >&2
    write_readme "stopped at step '$name' (exit $status)"
    exit 1
  fi
}

write_readme() {
  local verdict=$1 readme="$out/README.txt"
  {
    echo "moec hardware day: $verdict"
    echo
    echo "devices:         $devices"
    echo "moec:            $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "moec binary:     $moec"
    if [ "$devices" = emulated ]; then
      echo "HIP runtime:     none: moec's emulated device (numerics) and its HIP timing test double (timing)"
      echo "device names:    moec-timing-test-double (SYNTHETIC: every time here is the test double's clock, not a GPU's)"
    else
      local hip
      hip=$(hipconfig --version 2>/dev/null || true)
      [ -n "$hip" ] || hip=$(readlink -f "$(ldconfig -p 2>/dev/null | awk '/libamdhip64.so/ {print $NF; exit}')" 2>/dev/null || true)
      echo "HIP runtime:     ${hip:-unknown}"
      echo "device names:    $( (rocm-smi --showproductname 2>/dev/null | grep -i 'card series' | sed 's/.*: *//' | sort | uniq -c | tr -s ' ' | paste -sd';') || true)"
      echo "bench device:    $(sed -n '1s/^device //p' "$out"/*/bench-shipped.txt 2>/dev/null | head -1)"
    fi
    echo "date (UTC):      $(date -u +%FT%TZ), $(($(date -u +%s) - started)) s"
    echo "tables:          $tables"
    echo
    echo "steps.log: one line per step: ok/FAILED/INCOMPLETE, the step, its seconds, its output;"
    echo "  each step's stderr (progress, messages) is in the file of the same name with .stderr."
    echo "Per table, in TABLE/:"
    echo "  compile-shipped.txt       moec compile of tuning_tables/TABLE.table"
    echo "  shipped.moeb              that bundle"
    echo "  selftest-shipped.txt      moec selftest of it: every case against the oracle, PASS/FAIL"
    echo "  bench-shipped.{txt,csv,json}  moec bench of it: layer and per-stage times per key, published figures beside"
    echo "  tune.txt                  moec tune SPEC --device: the candidates timed on the device"
    echo "  measured.table            the table tune wrote: rows provenance=measured with device, method, date"
    echo "  measurements.csv          every candidate timed, per key, with its time"
    echo "  candidates.csv            every candidate considered (resources, rejections, predictions)"
    echo "  compile-measured.txt, measured.moeb, selftest-measured.txt, bench-measured.{txt,csv,json}"
    echo "                            the same for the measured table"
    echo "  report.html               moec report of measured.moeb with bench-measured.json"
    if [ "$devices" = emulated ]; then
      echo
      echo "SYNTHETIC: numerics ran on moec's emulated device at --small shapes; every"
      echo "time (bench, tune's measured rows) comes from the HIP timing test double's"
      echo "clock, not from a GPU. Nothing here is a measurement of gfx950."
    fi
    echo
    echo "Send back the whole folder (docs/hardware-day.md, 'What to send back')."
  } > "$readme"
}

report_has_bench=0
"$moec" report --help 2>/dev/null | grep -q -- '--bench' && report_has_bench=1

for name in $tables; do
  dir="$out/$name"
  mkdir -p "$dir"
  table="$repo/tuning_tables/$name.table"
  spec="$repo/tuning_tables/specs/$name.spec"
  for kind in shipped measured; do
    if [ $kind = measured ]; then
      # shellcheck disable=SC2086
      step "tune $name" "$dir/tune.txt" "${bench_env[@]}" "$moec" tune "$spec" \
        -o "$dir/measured.table" --device "$first" \
        --measurements "$dir/measurements.csv" --csv "$dir/candidates.csv" \
        ${HARDWARE_DAY_TUNE_ARGS:-}
      table="$dir/measured.table"
    fi
    step "compile $name ($kind)" "$dir/compile-$kind.txt" \
      "$moec" compile "$table" -o "$dir/$kind.moeb" "${compile_args[@]}"
    # shellcheck disable=SC2086
    step "selftest $name ($kind)" "$dir/selftest-$kind.txt" "${selftest_env[@]}" \
      "$moec" selftest "$dir/$kind.moeb" "${selftest_device[@]}" \
      ${HARDWARE_DAY_SELFTEST_ARGS:-}
    # shellcheck disable=SC2086
    step "bench $name ($kind)" "$dir/bench-$kind.txt" "${bench_env[@]}" \
      "$moec" bench "$dir/$kind.moeb" "${bench_device[@]}" \
      --published "$repo/tuning_tables/published/figures.csv" \
      --csv "$dir/bench-$kind.csv" --json "$dir/bench-$kind.json" \
      ${HARDWARE_DAY_BENCH_ARGS:-}
  done
  report_args=()
  [ $report_has_bench = 1 ] && report_args=(--bench "$dir/bench-measured.json")
  step "report $name" "$dir/report.txt" "$moec" report "$dir/measured.moeb" \
    -o "$dir/report.html" "${report_args[@]}"
done
if [ ${#incomplete[@]} -gt 0 ]; then
  what=$(printf '%s, ' "${incomplete[@]}")
  write_readme "INCOMPLETE: nothing failed, but ${#incomplete[@]} self-test step(s) skipped tables: ${what%, }"
  echo "hardware-day: INCOMPLETE: ${what%, } skipped tables (see steps.log); send back $out" >&2
  exit 3
fi
write_readme "every step passed"
echo "hardware-day: every step passed in $(($(date -u +%s) - started)) s; send back $out" >&2

#!/usr/bin/env bash
# CTest bench-ep8: `moec bench` of the shipped EP8 table (flash_ep8,
# compiled --small) on the HIP timing test double with eight devices, as
# scripts/hardware-day.sh runs it: every key of the six tables timed, the
# fused networks with one rank per device; which devices the ranks get
# (--device N: N and the devices after it; a list: rank r on its r-th
# entry) and the refusal, naming the rank, when there are too few.
#   bench_ep8.sh MOEC TIMING_DOUBLE TABLE WORKDIR
set -euo pipefail
moec=$1 double=$2 table=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$moec" compile --small -q "$table" -o "$work/ep8.moeb" 2> "$work/compile.stderr" ||
  fail "compile: $(cat "$work/compile.stderr")"
bench() { # output name, device count, then moec bench's options
  local out=$1 count=$2
  shift 2
  MOEC_HIP_LIBRARY=$double MOEC_TIMING_DOUBLE_DEVICES=$count \
    "$moec" bench "$work/ep8.moeb" --samples 2 --warmups 1 --flush-mib 0 \
    "$@" > "$work/$out.stdout" 2> "$work/$out.stderr" ||
    fail "moec bench ($out): $(cat "$work/$out.stderr")"
}

# The keys of each table of the compiled bundle, from `moec select
# --ranges` (one line per row), and its six tables from the table file.
tables=$(awk '/^select/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
                          print f["network"] } ' "$table" | sort -u)
[ "$(echo $tables)" = "flash flash-fused" ] || fail "networks of $table: $tables"

# Eight devices, listed: every key of every table timed, nothing skipped.
bench all 8 --device 0,1,2,3,4,5,6,7 --csv "$work/all.csv"
! grep -q '^skipped' "$work/all.stdout" || fail "skipped: $(grep '^skipped' "$work/all.stdout")"
grep -q '^SYNTHETIC: ' "$work/all.stdout" || fail "no synthetic label"
expected=0 classes=""
for network in flash flash-fused; do
  for ws in $(awk -F, -v n=$network 'NR > 1 && $1 == n { print $3 }' "$work/all.csv" | sort -un); do
    keys=$("$moec" select "$work/ep8.moeb" --network $network --ep 8 --workspace $ws --ranges | grep -c '^m ')
    rows=$(awk -F, -v n=$network -v w=$ws 'NR > 1 && $1 == n && $2 == 8 && $3 == w && $5 > 0' "$work/all.csv" | wc -l)
    [ "$rows" = "$keys" ] || fail "$network ws$ws: $rows timed rows, $keys keys"
    expected=$((expected + keys))
    classes="$classes $network/$ws"
  done
done
# Three workspace classes per network (at --small the fused ones scale to
# workspace / 64 tokens per rank, docs/cli.md).
[ "$(echo $classes)" = "flash/1024 flash/8192 flash/16384 flash-fused/16 flash-fused/128 flash-fused/256" ] ||
  fail "classes timed: $classes"
[ "$(($(wc -l < "$work/all.csv") - 1))" = "$expected" ] || fail "CSV rows: $(wc -l < "$work/all.csv")"
# Fused stages wait on the other ranks: not timed apart.
awk -F, 'NR > 1 && $1 == "flash-fused" && ($12 != "" || $14 != "") { exit 1 }' "$work/all.csv" ||
  fail "fused stage times"

# --device 0 on eight devices: ranks on 0..7, the fused tables timed too.
bench one 8 --device 0 --network flash-fused --workspace 16 --csv "$work/one.csv"
! grep -q '^skipped' "$work/one.stdout" || fail "--device 0: $(grep '^skipped' "$work/one.stdout")"
[ "$(($(wc -l < "$work/one.csv") - 1))" -gt 0 ] || fail "--device 0: no rows"
# --device 3: ranks on 3..10, but the double has eight.
bench three 8 --device 3 --network flash-fused --workspace 16
grep -q '^skipped: flash-fused ep8 ws16: fused ranks need a device each: 8 devices (3 to 10), the HIP library reports 8$' \
  "$work/three.stdout" || fail "--device 3: $(cat "$work/three.stdout")"
# A list of seven: rank 7 has no device.
bench seven 8 --device 0,1,2,3,4,5,6 --network flash-fused --workspace 16
grep -q '^skipped: flash-fused ep8 ws16: fused ranks need a device each: rank 7 has none of the 8 devices (--device lists 7)$' \
  "$work/seven.stdout" || fail "seven devices: $(cat "$work/seven.stdout")"
# A list naming a device the double lacks: rank 7 on device 8.
bench shifted 8 --device 1,2,3,4,5,6,7,8 --network flash-fused --workspace 16
grep -q 'rank 7 has none of the 8 devices (--device lists 8)$' "$work/shifted.stdout" ||
  fail "device 8: $(cat "$work/shifted.stdout")"
# Unfused tables run on the first device given.
bench five 8 --device 5 --network flash --workspace 1024 --m 6
grep -q '^device moec-timing-test-double-gpu5, ' "$work/five.stdout" ||
  fail "--device 5: $(head -1 "$work/five.stdout")"
echo "bench-ep8: $expected keys of $(echo $classes | wc -w) tables timed on 8 devices; device placement checked"

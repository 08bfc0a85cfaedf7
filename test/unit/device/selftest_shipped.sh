#!/usr/bin/env bash
# CTest selftest-emulated: every shipped table, compiled, then `moec selftest
# --device emulated` (the table at a small shape, through the layer API and
# the emulated HIP device, against the oracle), M up to 64, and repeated
# forwards with changing M.
#   selftest_shipped.sh MOEC EMULATED_HIP TABLES_DIR WORKDIR
set -euo pipefail
moec=$1 emulated=$2 tables=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
export MOEC_EMULATED_HIP_LIBRARY="$emulated"
for table in "$tables"/*.table; do
  name=$(basename "$table" .table)
  # The EP8 tables run in selftest-emulated-ep8-* (selftest_ep8.sh).
  [[ $name == *_ep8 ]] && continue
  "$moec" compile -q "$table" -o "$work/$name.moeb"
  "$moec" selftest "$work/$name.moeb" --device emulated --small --max-m 64 \
    --repeat 6
done

# Rank placement on a GPU (--device N, --devices LIST), through the emulated
# library loaded as an ordinary HIP library (MOEC_HIP_LIBRARY) with
# MOEC_EMULATED_DEVICES devices: flash_ep2 has unfused (network flash) and
# fused (flash-fused) EP2 tables. --save writes every case;
# selftest_saved_check.py recomputes each case's rel L2 from the saved files.
bundle=$work/flash_ep2.moeb
here=$(dirname "$0")
expect() { # text file
  grep -qF -- "$1" "$2" || { echo "expected in $2: $1"; cat "$2"; exit 1; }
}
gpu() { # devices args...
  local count=$1
  shift
  MOEC_HIP_LIBRARY=$emulated MOEC_EMULATED_DEVICES=$count "$moec" selftest \
    "$bundle" --small "$@"
}
# every_table FILE PATTERN: each table's placement line matches PATTERN.
every_table() {
  grep -q "^flash-fused ep2 .*: ranks on devices" "$1" ||
    { echo "no fused table ran in $1"; cat "$1"; exit 1; }
  if grep ": ranks on devices" "$1" | grep -v -- "$2"; then
    echo "placement other than '$2' in $1"
    exit 1
  fi
}
gpu 3 --network flash-fused --devices 2,0 --max-m 8 --save "$work/saved" \
  > "$work/devices.out"
cat "$work/devices.out"
every_table "$work/devices.out" ": ranks on devices 2,0$"
expect " 0 failed, 0 skipped" "$work/devices.out"
python3 "$here/selftest_saved_check.py" "$work/saved" "$work/devices.out"

gpu 3 --network flash-fused --device 1 --max-m 1 > "$work/device1.out"
every_table "$work/device1.out" ": ranks on devices 1,2$"
expect " 0 failed, 0 skipped" "$work/device1.out"
# Too few devices: every fused table is skipped with the reason, and the
# unfused ranks (every network) share the first device.
status=0
gpu 2 --device 1 --max-m 1 > "$work/skip.out" || status=$?
cat "$work/skip.out"
# Skipping is not passing: exit 4 and the last line says so.
[ $status = 4 ] || { echo "a run that skipped tables exited $status, not 4"; exit 1; }
tail -1 "$work/skip.out" | grep -Eq '^[0-9]+ passed, 0 failed, [1-9][0-9]* skipped: INCOMPLETE, [1-9][0-9]* table\(s\) not run \(exit 4\)$' ||
  { echo "last line: $(tail -1 "$work/skip.out")"; exit 1; }
expect "SKIP flash-fused ep2 ws16: fused ranks need a device each: 2 devices (devices 1 to 2), the HIP library reports 2" "$work/skip.out"
if grep -E "^(PASS|FAIL) flash-fused|^flash-fused.*ranks on" "$work/skip.out"; then
  echo "a fused table ran on too few devices"
  exit 1
fi
expect "flash ep2 ws512: ranks on devices 1,1" "$work/skip.out"
expect " 0 failed, " "$work/skip.out"

# Bad input is exit 2 and writes nothing: --save into an existing or
# unreachable directory, a repeated or malformed --devices list.
refused() { # message args...
  local message=$1 status=0
  shift
  gpu 3 "$@" > "$work/refused.out" 2>&1 || status=$?
  [ "$status" = 2 ] || { echo "exit $status, expected 2: $*"; cat "$work/refused.out"; exit 1; }
  expect "$message" "$work/refused.out"
}
before=$(stat -c %Y "$work/saved/manifest.json")
refused "--save $work/saved: exists" --max-m 1 --save "$work/saved"
[ "$(stat -c %Y "$work/saved/manifest.json")" = "$before" ]
refused "is not a directory" --max-m 1 --save "$work/missing/saved"
refused "--devices 0,0: a list of distinct device ordinals" --devices 0,0
refused "--devices 0,x: a list of distinct device ordinals" --devices 0,x
refused "--network nope: $bundle has no table of that network" --network nope
if ls -d "$work"/*.partial-* 2>/dev/null; then
  echo "a partial --save directory was left behind"
  exit 1
fi

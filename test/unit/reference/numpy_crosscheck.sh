#!/usr/bin/env bash
# CTest reference-numpy-crosscheck: `moec reference` writes a layer and its
# inputs, numpy_crosscheck.py recomputes it with NumPy alone and compares
# (relative L2 1e-6: the two differ only in summation order before the one
# FP32 rounding). The cases of docs/reference.md, "NumPy cross-check", at
# the small shape, each on fresh seeded data.
# usage: numpy_crosscheck.sh MOEC PYTHON WORKDIR
set -euo pipefail
moec=$1 python=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
n=0
check() {  # NAME "REFERENCE ARGS" "CROSSCHECK ARGS"
  local dir="$work/$1"
  # shellcheck disable=SC2086
  "$moec" reference --shape small --write-inputs -o "$dir" $2 > "$dir.log"
  # shellcheck disable=SC2086
  "$python" "$here/numpy_crosscheck.py" "$dir" $3 | sed "s/^/$1: /"
  n=$((n + 1))
}
check tp-exact "--family tp --m 24 --mode exact --invalid-fraction 0.1 --seed 11" \
      "--family tp --mode exact"
check tp-faithful-clamp3 "--family tp --m 16 --interleave 1 --swiglu-limit 3 --seed 12" \
      "--family tp --interleave 1 --swiglu-limit 3"
check megamoe-ep4-compact "--family megamoe --ep 4 --transport compact --m 5,0,3,7 --invalid-fraction 0.15 --seed 13" \
      "--family megamoe --ep 4"
check megamoe-ep2-hot "--family megamoe --ep 2 --m 12 --mode exact --hot-rank 1 --seed 14" \
      "--family megamoe --ep 2 --mode exact"
check fhmoe-exact "--family fhmoe --m 9 --mode exact --seed 15" \
      "--family fhmoe --mode exact"
check fhmoe-faithful "--family fhmoe --m 9 --seed 16" "--family fhmoe"
echo "numpy cross-check: $n layers agree with the oracle"

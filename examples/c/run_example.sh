#!/usr/bin/env bash
# CTest example-c-layer: moec_layer_example on the emulated HIP device,
# checked by the oracle.
#   run_example.sh MOEC EXAMPLE EMULATED_HIP TABLE WORKDIR
set -euo pipefail
moec=$1 example=$2 emulated=$3 table=$4 work=$5
rm -rf "$work" && mkdir -p "$work/out"
# The table at a small shape: H = I = 512, 4 experts, top-4, plain SiLU
# (flash-tp4's backbone knobs). Its kernels read W13 gate/up interleaved by
# 16; the inputs are written in the checkpoint layout (gate rows then up
# rows, --interleave 0) and the example prepares them for the kernels.
"$moec" compile --small -q "$table" -o "$work/tp4.moeb"
"$moec" reference --family tp --hidden 512 --intermediate 512 --experts 4 \
  --topk 4 --m 33 --interleave 0 --swiglu-limit 0 --invalid-fraction 0.1 \
  --seed 7 --write-inputs -o "$work/in" > /dev/null
MOEC_HIP_LIBRARY="$emulated" "$example" "$work/tp4.moeb" flash-tp4 \
  "$work/in" "$work/out"
# The default check: relative L2 <= 2^-7 and every element within the
# oracle's own bound (docs/numerics.md, "The final output").
"$moec" reference --family tp --interleave 0 --swiglu-limit 0 \
  --inputs "$work/in" --compare "$work/out" \
  -o "$work/oracle"

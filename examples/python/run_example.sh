#!/usr/bin/env bash
# CTest example-python-layer: examples/python/run_layer.py on the emulated
# HIP device, checked by the oracle.
#   run_example.sh PYTHON MOEC TABLE WORKDIR   (PYTHONPATH: build/python)
set -euo pipefail
python=$1 moec=$2 table=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/oracle-in" "$work/oracle-out"
# The table at a small shape: H = I = 512, 4 experts, top-4, gate/up
# interleaved by 16 in the kernels, plain SiLU (flash-tp4's knobs).
"$moec" compile --small -q "$table" -o "$work/tp4.moeb"
"$python" "$here/run_layer.py" --bundle "$work/tp4.moeb" --network flash-tp4 \
  --device emulated --small --seed 7 --m 33 --save "$work/save"
# The saved files under the names moec reference --inputs reads.
ln -s "$work/save/rank0_tokens_bf16.npy" "$work/oracle-in/hidden_states.npy"
ln -s "$work/save/rank0_topk_ids.npy" "$work/oracle-in/topk_ids.npy"
ln -s "$work/save/rank0_topk_weights.npy" "$work/oracle-in/topk_weights.npy"
for w in w13 w2; do
  ln -s "$work/save/${w}_weight.npy" "$work/oracle-in/$w.npy"
  ln -s "$work/save/${w}_scale.npy" "$work/oracle-in/${w}_scale.npy"
done
ln -s "$work/save/rank0_out_bf16.npy" "$work/oracle-out/output.npy"
# The saved W13 is in checkpoint layout (gate rows then up rows):
# --interleave 0. The default check: relative L2 <= 2^-7 and every element
# within the oracle's own bound (docs/numerics.md, "The final output").
"$moec" reference --family tp --interleave 0 --swiglu-limit 0 \
  --inputs "$work/oracle-in" --compare "$work/oracle-out" \
  -o "$work/oracle"

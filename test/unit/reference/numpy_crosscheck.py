#!/usr/bin/env python3
"""Recompute a `moec reference` layer with NumPy and compare.

A third formulation of the oracle, independent of the C++ code, and a check
that the .npy files the oracle writes are what NumPy reads. Run it on a
directory written with `moec reference ... --write-inputs -o DIR`:

    python3 numpy_crosscheck.py DIR --family tp --interleave 16
    python3 numpy_crosscheck.py DIR --family megamoe --ep 4 --mode faithful
    python3 numpy_crosscheck.py DIR --family fhmoe --mode exact

Exit status 0 when every output agrees within the tolerance (relative L2,
default 1e-6: the oracle rounds a double sum once to FP32, this script sums
in float64 in another order; a non-finite output element fails), 1
otherwise. CTest reference-numpy-crosscheck runs it (numpy_crosscheck.sh).
"""
import argparse
import os
import sys

import numpy as np

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def fp8_values():
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 7).astype(np.float64)
    value = np.where(exponent == 0, mantissa / 8 * 2.0 ** -6,
                     (1 + mantissa / 8) * 2.0 ** (exponent - 7.0))
    value = sign * value
    value[(codes & 0x7F) == 0x7F] = np.nan
    return value


FP8 = fp8_values()


def scale_values(codes):
    values = np.exp2(codes.astype(np.float64) - 127)
    values[codes == 0xFF] = np.nan
    return values


def mxfp4(packed, scales):
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    return E2M1[codes] * np.repeat(scale_values(scales), 32, axis=-1)


def fp8(codes, scales):
    return FP8[codes] * np.repeat(scale_values(scales), 32, axis=-1)


def bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def fake_quant_fp8(x):
    """DeepSeek V4 1x32: scale 2^ceil(log2(max(amax, 1e-4) / 448)), RNE E4M3."""
    if x.size == 0:
        return x
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    amax = np.maximum(np.abs(blocks).max(axis=-1, keepdims=True), np.float32(1e-4))
    scale = np.exp2(np.ceil(np.log2(amax / 448)))
    v = blocks / scale
    exponent = np.maximum(np.floor(np.log2(np.maximum(np.abs(v), 1e-300))), -6)
    quantum = np.exp2(exponent - 3)
    q = np.clip(np.round(v / quantum) * quantum, -448, 448)
    return (q * scale).reshape(x.shape)


def load(directory, name):
    return np.load(os.path.join(directory, name))


def layer(x, ids, weights, w13, w2, interleave, limit, quantize):
    experts, two_i, _ = w13.shape
    inter = two_i // 2
    if quantize:
        x = fake_quant_fp8(x)
    if interleave and interleave < inter:
        j = np.arange(inter)
        gate_rows = (j // interleave) * 2 * interleave + j % interleave
        up_rows = gate_rows + interleave
    else:
        gate_rows = np.arange(inter)
        up_rows = gate_rows + inter
    out = np.zeros((x.shape[0], w2.shape[1]))
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = ids[t, k]
            if e < 0 or e >= experts:
                continue
            h = w13[e] @ x[t]
            gate, up = h[gate_rows], h[up_rows]
            if limit > 0:
                gate = np.minimum(gate, limit)
                up = np.clip(up, -limit, limit)
            act = gate / (1 + np.exp(-gate)) * up
            if quantize:
                act = fake_quant_fp8(act)
            out[t] += np.float64(weights[t, k]) * (w2[e] @ act)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--family", choices=["megamoe", "tp", "fhmoe"], required=True)
    parser.add_argument("--ep", type=int, default=2)
    parser.add_argument("--interleave", type=int, default=16)
    parser.add_argument("--swiglu-limit", type=float, default=None)
    parser.add_argument("--mode", choices=["faithful", "exact"], default="faithful")
    parser.add_argument("--no-shared", action="store_true")
    parser.add_argument("--tolerance", type=float, default=1e-6)
    args = parser.parse_args()
    d = args.directory
    w13 = mxfp4(load(d, "w13.npy"), load(d, "w13_scale.npy"))
    w2 = mxfp4(load(d, "w2.npy"), load(d, "w2_scale.npy"))
    mega = args.family == "megamoe"
    interleave = 0 if mega else args.interleave
    limit = args.swiglu_limit if args.swiglu_limit is not None else (10.0 if mega else 0.0)
    prefixes = [f"rank{r}." for r in range(args.ep)] if mega else [""]
    if args.family == "fhmoe" and not args.no_shared:
        shared13 = fp8(load(d, "shared_w13.npy"), load(d, "shared_w13_scale.npy"))
        shared2 = fp8(load(d, "shared_w2.npy"), load(d, "shared_w2_scale.npy"))
        w13 = np.concatenate([w13, shared13[None]])
        w2 = np.concatenate([w2, shared2[None]])
    # A NaN never compares greater, so max() would drop it: count failing
    # outputs instead, and fail every non-finite one.
    failures = 0
    for prefix in prefixes:
        x = bf16(load(d, prefix + "hidden_states.npy"))
        ids = load(d, prefix + "topk_ids.npy")
        weights = load(d, prefix + "topk_weights.npy")
        if args.family == "fhmoe" and not args.no_shared:
            routed = w13.shape[0] - 1
            ids = np.where((ids >= 0) & (ids < routed), ids, -1)
            ids = np.concatenate([ids, np.full((ids.shape[0], 1), routed)], axis=1)
            weights = np.concatenate([weights, np.ones((weights.shape[0], 1), np.float32)], axis=1)
        expected = layer(x, ids, weights, w13, w2, interleave, limit, args.mode == "faithful")
        got = load(d, prefix + "output.npy").astype(np.float64)
        assert got.shape == expected.shape, (got.shape, expected.shape)
        norm = np.linalg.norm(expected)
        relative = np.linalg.norm(got - expected) / norm if norm > 0 else np.linalg.norm(got)
        if not np.all(np.isfinite(got)) or not relative <= args.tolerance:
            failures += 1
        print(f"{prefix or args.family + ' '}output: relative L2 {relative:.3g}, "
              f"max |diff| {np.abs(got - expected).max() if got.size else 0:.3g}")
    print("PASS" if failures == 0 else "FAIL")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""run_layer.py: one MoE layer end to end through the moec Python package.

    run_layer.py --bundle B [--network N] [--device emulated|ORDINAL|HIP_LIBRARY]
                 [--small] [--seed S] [--m M] [--save DIR]

Opens the bundle, creates the device and the layer of NETWORK (default:
the bundle's first network), generates seeded inputs and MXFP4 weights in
checkpoint layout (gate rows then up rows, global expert numbering; FHMoE:
the FP8 shared expert too), prepares the weights for the kernels
(moec.prepare_expert_weights when the runtime has it, else the gate/up
reordering in Python), runs one forward with moec.fused_moe (unfused
expert-parallel tables: one layer per rank on the one device, the ranks'
partial outputs summed) and, with --save, writes the .npy files
`moec run --save` names: w13_weight, w13_scale, w2_weight, w2_scale
(shared_* for FHMoE), rank{r}_tokens_bf16, rank{r}_topk_ids,
rank{r}_topk_weights and rank{r}_out_bf16.

--small: the bundle was compiled with `moec compile --small` (H = I = 512
for the shipped tables); the example refuses a bundle with H above 2048
then. Without it the bundle's own shapes are used (a GPU run; the
generated weights are then as large as the model's layer).

The standard library and the moec package only (no NumPy needed).
"""

import argparse
import math
import os
import random
import struct
import sys

import moec
from moec.npy import HostArray, save


def bf16_bits(values):
    """floats -> BF16 bits (round to nearest even), as a bytearray of uint16."""
    out = bytearray(2 * len(values))
    for i, bits in enumerate(struct.unpack("<%dI" % len(values), struct.pack("<%df" % len(values), *values))):
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        struct.pack_into("<H", out, 2 * i, bits)
    return out


def bf16_values(data):
    n = len(data) // 2
    return [struct.unpack("<f", struct.pack("<I", b << 16))[0]
            for b in struct.unpack("<%dH" % n, bytes(data))]


def random_scales(rng, count, low, high):
    return bytearray(rng.randint(low, high) for _ in range(count))


def random_fp8(rng, count):
    """FP8 E4M3FN codes without the two NaN codes."""
    data = bytearray(rng.randbytes(count))
    for i, b in enumerate(data):
        if b & 0x7F == 0x7F:
            data[i] = b & 0xFE
    return data


def generate(rng, facts, m):
    H, I, E, K = facts.hidden, facts.intermediate, facts.experts, facts.top_k
    hidden = bf16_bits([rng.gauss(0.0, 1.0) for _ in range(m * H)])
    ids, weights = [], []
    for t in range(m):
        chosen = rng.sample(range(E), K)
        for k in range(K):
            # ~10 % invalid routes (-1 adds exactly zero); every seventh token none.
            invalid = rng.random() < 0.1 or t % 7 == 3
            ids.append(-1 if invalid else chosen[k])
            weights.append(rng.uniform(0.05, 1.0))
    arrays = {
        "tokens_bf16": HostArray(hidden, (m, H), "uint16"),
        "topk_ids": HostArray(struct.pack("<%di" % len(ids), *ids), (m, K), "int32"),
        "topk_weights": HostArray(struct.pack("<%df" % len(weights), *weights), (m, K), "float32"),
        # MXFP4: E2M1 pairs (every byte a valid pair), E8M0 scales near 2^-6.
        "w13_weight": HostArray(rng.randbytes(E * 2 * I * H // 2), (E, 2 * I, H // 2), "uint8"),
        "w13_scale": HostArray(random_scales(rng, E * 2 * I * H // 32, 119, 123),
                               (E, 2 * I, H // 32), "uint8"),
        "w2_weight": HostArray(rng.randbytes(E * H * I // 2), (E, H, I // 2), "uint8"),
        "w2_scale": HostArray(random_scales(rng, E * H * I // 32, 119, 123),
                              (E, H, I // 32), "uint8"),
    }
    if facts.shared_expert:
        arrays.update({
            "shared_w13_weight": HostArray(random_fp8(rng, 2 * I * H), (2 * I, H), "uint8"),
            "shared_w13_scale": HostArray(random_scales(rng, 2 * I * H // 32, 115, 119),
                                          (2 * I, H // 32), "uint8"),
            "shared_w2_weight": HostArray(random_fp8(rng, H * I), (H, I), "uint8"),
            "shared_w2_scale": HostArray(random_scales(rng, H * I // 32, 115, 119),
                                         (H, I // 32), "uint8"),
        })
    return arrays


def slice_experts(array, first, count):
    per_expert = array.nbytes // array.shape[0]
    return HostArray(array.data[first * per_expert:(first + count) * per_expert],
                     (count,) + array.shape[1:], array.dtype)


def prepare(layer, arrays, first):
    """Checkpoint layout -> the layer's kernel layout, for this rank's experts."""
    E = layer.local_experts
    w = {n: slice_experts(arrays[n], first, E)
         for n in ("w13_weight", "w13_scale", "w2_weight", "w2_scale")}
    if moec.has_weight_preparation():
        prepared = moec.prepare_expert_weights(layer, w["w13_weight"], w["w13_scale"],
                                               w["w2_weight"], w["w2_scale"])
        result = dict(prepared)
        if layer.shared_expert:
            fp8 = {n: moec.weights.tensor(arrays[n].data, arrays[n].shape,
                                          "float8_e8m0fnu" if n.endswith("scale")
                                          else "float8_e4m3fn")
                   for n in ("shared_w13_weight", "shared_w13_scale", "shared_w2_weight",
                             "shared_w2_scale")}
            result.update(moec.prepare_shared_expert(
                layer, fp8["shared_w13_weight"], fp8["shared_w13_scale"],
                fp8["shared_w2_weight"], fp8["shared_w2_scale"]))
        return result, "moec.prepare_expert_weights"
    G, I, H = layer.gate_up_interleave, layer.intermediate, layer.hidden
    il = moec.weights.interleave_gate_up
    result = {"w13": il(w["w13_weight"].data, E, I, H // 2, G),
              "w13_scale": il(w["w13_scale"].data, E, I, H // 32, G),
              "w2": w["w2_weight"].data, "w2_scale": w["w2_scale"].data}
    if layer.shared_expert:
        result.update({"shared_w13": il(arrays["shared_w13_weight"].data, 1, I, H, G),
                       "shared_w13_scale": il(arrays["shared_w13_scale"].data, 1, I, H // 32, G),
                       "shared_w2": arrays["shared_w2_weight"].data,
                       "shared_w2_scale": arrays["shared_w2_scale"].data})
    return result, "gate/up reordering in Python (runtime without moec_prepare_expert_weights)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--network")
    parser.add_argument("--device", default=None,
                        help="'emulated', a GPU ordinal or a HIP library path (default: "
                             "$MOEC_HIP_LIBRARY or the system HIP)")
    parser.add_argument("--small", action="store_true",
                        help="the bundle was compiled with moec compile --small")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--m", type=int, default=33, help="tokens (default 33)")
    parser.add_argument("--save", help="write the layer's .npy files here")
    args = parser.parse_args(argv)

    bundle = moec.Bundle(args.bundle)
    tables = bundle.tables()
    network = args.network or tables[0][0]
    key = next((t for t in tables if t[0] == network), None)
    if key is None:
        parser.error("--network %s: the bundle has %s" % (network, sorted({t[0] for t in tables})))
    ep = key[1]
    facts = bundle.table_facts(network, ep, 0)
    if facts.fused:
        parser.error("--network %s: a fused MegaMoE table needs one device per rank; "
                     "this example runs unfused tables" % network)
    if args.small and facts.hidden > 2048:
        parser.error("--small: the bundle's H is %d, not a bundle from moec compile --small"
                     % facts.hidden)

    if args.device is not None and args.device.isdigit():
        device = moec.Device(None, int(args.device))
    else:
        device = moec.Device(args.device)
    layers = [moec.Layer(bundle, device, network, ep, 0, ep_rank=r) for r in range(ep)]
    rng = random.Random(args.seed)
    arrays = generate(rng, facts, args.m)
    m, H = args.m, facts.hidden

    hidden = device.upload(arrays["tokens_bf16"], "hidden_states")
    ids = device.upload(arrays["topk_ids"], "topk_ids")
    weights = device.upload(arrays["topk_weights"], "topk_weight")
    total = [0.0] * (m * H)
    how = ""
    for layer in layers:
        prepared, how = prepare(layer, arrays, layer.ep_rank * layer.local_experts)
        dev = {name: device.upload(data, name) for name, data in prepared.items()}
        if layer.shared_expert:
            layer.bind_weights(dev["w13"], dev["w13_scale"], dev["w2"], dev["w2_scale"],
                               shared_w13=dev["shared_w13"],
                               shared_w13_scale=dev["shared_w13_scale"],
                               shared_w2=dev["shared_w2"], shared_w2_scale=dev["shared_w2_scale"])
        out = device.alloc(m * H * 2)
        out.fill(0xFF)  # poisoned: every element must be written
        moec.fused_moe(hidden, dev["w13"], dev["w2"], weights, ids, w1_scale=dev["w13_scale"],
                       w2_scale=dev["w2_scale"], layer=layer, m=m, out=out)
        device.synchronize()
        overflow, _ = layer.read_status()
        if overflow:
            raise SystemExit("run_layer: %d routes overflowed" % overflow)
        values = bf16_values(out.download())
        if any(math.isnan(v) for v in values):
            raise SystemExit("run_layer: rank %d left output elements unwritten (NaN)"
                             % layer.ep_rank)
        total = [a + b for a, b in zip(total, values)]
        config, launches = layer.last_forward()
    output = HostArray(bf16_bits(total), (m, H), "uint16")
    rms = math.sqrt(sum(v * v for v in total) / len(total))
    print("run_layer: %s ep%d m=%d H=%d I=%d E=%d top_k=%d%s config=%s %d launches, "
          "output rms %.4g; weights: %s" %
          (network, ep, m, H, facts.intermediate, facts.experts, facts.top_k,
           " +shared expert" if facts.shared_expert else "", config, launches, rms, how))

    if args.save:
        os.makedirs(args.save, exist_ok=True)
        for name in ("w13_weight", "w13_scale", "w2_weight", "w2_scale", "shared_w13_weight",
                     "shared_w13_scale", "shared_w2_weight", "shared_w2_scale"):
            if name in arrays:
                save(os.path.join(args.save, name + ".npy"), arrays[name])
        # An unfused network's ranks all serve the same tokens (docs/cli.md).
        for r in range(ep):
            for name in ("tokens_bf16", "topk_ids", "topk_weights"):
                save(os.path.join(args.save, "rank%d_%s.npy" % (r, name)), arrays[name])
            save(os.path.join(args.save, "rank%d_out_bf16.npy" % r), output)
        print("run_layer: wrote %s" % args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())

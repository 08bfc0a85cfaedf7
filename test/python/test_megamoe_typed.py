"""moec.MegaMoE.finalize_weights with typed torch tensors: each EP rank's
experts in moec's layout as torch.float4_e2m1fn_x2 weights and
torch.float8_e8m0fnu scales over emulated device memory, bound by pointer
(source=None), then one forward of every rank against the oracle. Both
ranks of flash-fused at EP2 run in a child process with two emulated
devices (the device count is fixed when the library loads), threads
exchanging the symmetric buffers as in megamoe_ranks.py. A torch without
those dtypes skips this test only. docs/python.md, "FP8 and FP4 tensors".

    test_megamoe_typed.py BUNDLE EP M INPUTS OUT     (the child)
"""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import moec
from moec import npy

HERE = os.path.dirname(os.path.abspath(__file__))
NETWORK = "flash-fused"
WEIGHTS = ("w13", "w13_scale", "w2", "w2_scale")


def child(bundle_path, ep, m, inputs, out_dir):
    """Every rank: construction (threads, the all_gather between them),
    typed weights bound by pointer, then every rank's forward from this
    thread (the devices defer launches and run the ranks together at the
    first synchronising call, so every upload comes first)."""
    import torch
    from conftest import torch_on_device
    # The test skips without these dtypes; uint8 stands in for a dry run
    # of the child on an older torch.
    fp4 = getattr(torch, "float4_e2m1fn_x2", torch.uint8)
    e8m0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
    arrays = {name: npy.load(os.path.join(inputs, name + ".npy")).numpy()
              for name in ("hidden_states", "topk_ids", "topk_weights") + WEIGHTS}
    bundle = moec.Bundle(bundle_path)
    group = moec.megamoe.ThreadGroup(ep)
    ranks, errors = [None] * ep, []

    def construct(rank):
        try:
            device = moec.Device("emulated", rank)
            moe = moec.MegaMoE(bundle, rank=rank, world_size=ep, max_tok_per_rank=m,
                               network=NETWORK, device=device,
                               all_gather=group.all_gather(rank))
            L, H, I = moe.local_experts, moe.model_dim, moe.inter_dim
            first = rank * L
            prepared = moec.prepare_expert_weights(
                moe.layer, *[arrays[k][first:first + L] for k in WEIGHTS])
            shapes = {"w13": ((L, 2 * I, H // 2), fp4), "w13_scale": ((L, 2 * I, H // 32), e8m0),
                      "w2": ((L, H, I // 2), fp4), "w2_scale": ((L, H, I // 32), e8m0)}
            typed = {k: torch_on_device(device, np.frombuffer(bytes(prepared[k].data), np.uint8)
                                        .reshape(shapes[k][0]), shapes[k][1]) for k in WEIGHTS}
            moe.finalize_weights(*[typed[k] for k in WEIGHTS])  # by pointer
            moe.typed_weights = typed  # bound by pointer: kept alive here
            ranks[rank] = moe
        except BaseException as error:  # reported by the main thread
            errors.append("rank %d: %s: %s" % (rank, type(error).__name__, error))
            group._barrier.abort()

    threads = [threading.Thread(target=construct, args=(r,)) for r in range(ep)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        sys.exit("\n".join(errors))
    data = []
    for rank, moe in enumerate(ranks):
        rows = slice(rank * m, rank * m + m)
        out = moe.device.alloc(m * moe.model_dim * 2)
        out.fill(0xFF)  # poison: BF16 0xFFFF is NaN
        data.append({"hidden": moe.device.upload(np.ascontiguousarray(arrays["hidden_states"][rows])),
                     "weights": moe.device.upload(np.ascontiguousarray(arrays["topk_weights"][rows])),
                     "ids": moe.device.upload(np.ascontiguousarray(arrays["topk_ids"][rows])),
                     "out": out})
    for moe, d in zip(ranks, data):
        moe.forward(d["hidden"], d["weights"], d["ids"], out=d["out"], m=m)
    for rank, (moe, d) in enumerate(zip(ranks, data)):
        assert moe.check() == 1
        bits = np.frombuffer(d["out"].download(), dtype=np.uint16).reshape(m, moe.model_dim)
        np.save(os.path.join(out_dir, "rank%d.npy" % rank), bits)


def test_megamoe_typed_weights(bundle_path, oracle, torch):
    from test_fp8_tensors import dtype_or_skip
    from test_fused_moe import check_zero_rows
    dtype_or_skip(torch, "float4_e2m1fn_x2", "float8_e8m0fnu")
    ep, m = 2, 24
    bundle = bundle_path("flash_ep2")
    facts = moec.Bundle(bundle).table_facts(NETWORK, ep, m)
    assert facts.fused
    H, I, E, K = facts.hidden, facts.intermediate, facts.experts, facts.top_k
    o = oracle("tp", H, I, E, K, ep * m, 71, interleave=0, swiglu=facts.swiglu_limit)
    out_dir = os.path.join(o.directory, "ranks")
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, MOEC_EMULATED_DEVICES=str(ep))
    env["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    result = subprocess.run([sys.executable, os.path.abspath(__file__), bundle, str(ep), str(m),
                             os.path.join(o.directory, "in"), out_dir],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout
    bits = np.concatenate([np.load(os.path.join(out_dir, "rank%d.npy" % r)) for r in range(ep)])
    check_zero_rows(bits, o.arrays["topk_ids"], E)
    o.compare(bits)


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])

"""Runs every EP rank of a moec.MegaMoE in this process, one thread per
rank, each rank on its own emulated device (MOEC_EMULATED_DEVICES = EP,
set by the caller: test_megamoe.py), and writes each rank's outputs.

    megamoe_ranks.py BUNDLE NETWORK EP M_PER_RANK INPUTS OUT FORWARDS TENSORS

INPUTS: `moec reference --write-inputs` arrays for EP * M_PER_RANK tokens
(rank r owns rows r*M .. r*M+M-1) and all experts (rank r binds experts
r*E/EP onwards, checkpoint layout). FORWARDS: forwards per rank; forward f
of rank r feeds its tokens rolled by f rows, so each forward has other
inputs. TENSORS: "torch" (torch tensors over device memory) or "pointers"
(DeviceBuffers). Writes OUT/rank{r}_f{f}.npy (BF16 bits [M, H]) and
OUT/status.json (forwards launched and overflow per rank).

    megamoe_ranks.py --process BUNDLE NETWORK EP M RANK INIT_FILE

runs one rank per process instead (process_rank).
"""

import json
import os
import sys
import threading

import numpy as np

import moec
from moec import npy


def main():
    bundle_path, network, ep, m, inputs, out_dir, forwards, tensors = sys.argv[1:9]
    ep, m, forwards = int(ep), int(m), int(forwards)
    arrays = {}
    for name in ("hidden_states", "topk_ids", "topk_weights", "w13", "w13_scale", "w2",
                 "w2_scale"):
        arrays[name] = npy.load(os.path.join(inputs, name + ".npy")).numpy()
    bundle = moec.Bundle(bundle_path)
    group = moec.megamoe.ThreadGroup(ep)
    ranks, errors = [None] * ep, []

    def construct(rank):
        """The collective part, one thread per rank: construction exchanges
        the symmetric buffers' IPC handles, then each rank's weights."""
        try:
            device = moec.Device("emulated", rank)
            moe = moec.MegaMoE(bundle, rank=rank, world_size=ep, max_tok_per_rank=m,
                               network=network, device=device,
                               all_gather=group.all_gather(rank))
            first = rank * moe.local_experts
            moe.finalize_weights(*[arrays[k][first:first + moe.local_experts]
                                   for k in ("w13", "w13_scale", "w2", "w2_scale")],
                                 source="checkpoint")
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

    # The forwards, every rank's in turn from this thread: the emulated
    # devices defer the launches and run the ranks together at the first
    # synchronising call, which must come after every rank's launches (an
    # upload is one, so every input is on its device first).
    steps = []
    for f in range(forwards):
        step = []
        for rank, moe in enumerate(ranks):
            rows = slice(rank * m, rank * m + m)
            host = {k: np.ascontiguousarray(np.roll(arrays[k][rows], f, axis=0))
                    for k in ("hidden_states", "topk_weights", "topk_ids")}
            if tensors == "torch":
                import torch
                from conftest import torch_on_device
                step.append({"hidden": torch_on_device(moe.device, host["hidden_states"],
                                                       torch.bfloat16),
                             "weights": torch_on_device(moe.device, host["topk_weights"],
                                                        torch.float32),
                             "ids": torch_on_device(moe.device, host["topk_ids"], torch.int32)})
            else:
                out = moe.device.alloc(m * moe.model_dim * 2)
                out.fill(0xFF)  # poison: BF16 0xFFFF is NaN
                step.append({"hidden": moe.device.upload(host["hidden_states"]),
                             "weights": moe.device.upload(host["topk_weights"]),
                             "ids": moe.device.upload(host["topk_ids"]), "out": out})
        steps.append(step)
    for step in steps:
        for moe, data in zip(ranks, step):
            if tensors == "torch":
                # A new tensor over fresh emulated memory: poisoned (0xFF).
                data["out"] = moe.forward(data["hidden"], data["weights"], data["ids"])
            else:
                moe.forward(data["hidden"], data["weights"], data["ids"], out=data["out"], m=m)
    status = {rank: {"forwards": moe.check()} for rank, moe in enumerate(ranks)}
    for f, step in enumerate(steps):
        for rank, data in enumerate(step):
            out = data["out"]
            if tensors == "torch":
                bits = out.view(torch.int16).numpy().view(np.uint16).copy()
            else:
                bits = np.frombuffer(out.download(), dtype=np.uint16)
            np.save(os.path.join(out_dir, "rank%d_f%d.npy" % (rank, f)),
                    bits.reshape(m, ranks[rank].model_dim))
    with open(os.path.join(out_dir, "status.json"), "w") as handle:
        json.dump(status, handle)


def process_rank():
    """megamoe_ranks.py --process BUNDLE NETWORK EP M RANK INIT_FILE: one
    rank in this process, constructed through torch.distributed (gloo,
    file rendezvous). Then every rank writes a pattern into the next
    rank's symmetric buffer (through the mapping of the other process's
    memory) and reads what the previous rank wrote into its own, and runs
    one forward. Prints one JSON line: what each step gave."""
    bundle_path, network, ep, m, rank, init_file = sys.argv[2:8]
    ep, m, rank = int(ep), int(m), int(rank)
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=ep)
    result = {}
    try:
        moe = moec.MegaMoE(bundle_path, rank=rank, world_size=ep, max_tok_per_rank=m,
                           network=network, device="emulated")
        result["constructed"] = repr(moe)
        tail = moe.layer.memory.peer_bytes - 64  # the last 64 bytes: combine rows
        pattern = bytes([rank + 1]) * 64
        moe.device.copy_to_device(moe.peer_buffers[(rank + 1) % ep] + tail, pattern)
        dist.barrier()
        seen = moe.device.copy_to_host(moe.symmetric.ptr + tail, 64)
        result["seen"] = sorted(set(seen))
        moe.device.copy_to_device(moe.symmetric.ptr + tail, bytes(64))  # zero again
        dist.barrier()
        device, H, K = moe.device, moe.model_dim, moe.topk
        hidden = device.upload(bytes(m * H * 2))
        weights = device.upload(bytes(m * K * 4))
        ids = device.upload(np.full((m, K), -1, dtype=np.int32))
        expert_weights = [device.upload(bytes(n)) for n in (
            moe.local_experts * 2 * moe.inter_dim * H // 2,
            moe.local_experts * 2 * moe.inter_dim * H // 32,
            moe.local_experts * H * moe.inter_dim // 2,
            moe.local_experts * H * moe.inter_dim // 32)]
        moe.finalize_weights(*expert_weights)  # bound by pointer: kept alive here
        moe.forward(hidden, weights, ids, m=m)
        moe.check()
        result["forward"] = "ok"
    except moec.MoecError as error:
        result.update(what=error.what, status=error.status_name, message=error.message)
    print(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "--process":
        process_rank()
    else:
        main()

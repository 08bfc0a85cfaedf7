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

    megamoe_ranks.py --process BUNDLE NETWORK EP M RANK INIT_FILE INPUTS OUT FORWARDS

runs rank RANK alone in this process instead (process_rank), the group
formed through torch.distributed (gloo, file rendezvous INIT_FILE), with
the same inputs, forwards and outputs (OUT/status{RANK}.json).
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
    """megamoe_ranks.py --process ...: one rank in this process, on its own
    emulated device (MOEC_EMULATED_DEVICES=1: launches run when made). The
    collective construction exchanges the symmetric buffers' IPC handles
    through torch.distributed; each forward's launches then run in this
    process and wait on the other processes' stores in the shared buffers
    while those run theirs (docs/emulator.md, "Ranks in separate
    processes"). Writes OUT/rank{RANK}_f{f}.npy and OUT/status{RANK}.json."""
    bundle_path, network, ep, m, rank, init_file, inputs, out_dir, forwards = sys.argv[2:11]
    ep, m, rank, forwards = int(ep), int(m), int(rank), int(forwards)
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=ep)
    arrays = {name: npy.load(os.path.join(inputs, name + ".npy")).numpy()
              for name in ("hidden_states", "topk_ids", "topk_weights", "w13", "w13_scale",
                           "w2", "w2_scale")}
    moe = moec.MegaMoE(bundle_path, rank=rank, world_size=ep, max_tok_per_rank=m,
                       network=network, device="emulated")
    first = rank * moe.local_experts
    moe.finalize_weights(*[arrays[k][first:first + moe.local_experts]
                           for k in ("w13", "w13_scale", "w2", "w2_scale")],
                         source="checkpoint")
    rows = slice(rank * m, rank * m + m)
    for f in range(forwards):
        host = {k: np.ascontiguousarray(np.roll(arrays[k][rows], f, axis=0))
                for k in ("hidden_states", "topk_weights", "topk_ids")}
        out = moe.device.alloc(m * moe.model_dim * 2)
        out.fill(0xFF)  # poison: BF16 0xFFFF is NaN
        moe.forward(moe.device.upload(host["hidden_states"]),
                    moe.device.upload(host["topk_weights"]),
                    moe.device.upload(host["topk_ids"]), out=out, m=m)
        moe.synchronize()
        bits = np.frombuffer(out.download(), dtype=np.uint16)
        np.save(os.path.join(out_dir, "rank%d_f%d.npy" % (rank, f)),
                bits.reshape(m, moe.model_dim))
    with open(os.path.join(out_dir, "status%d.json" % rank), "w") as handle:
        json.dump({"forwards": moe.check()}, handle)
    dist.barrier()  # no rank leaves while another may still read its buffer
    moe.release()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "--process":
        process_rank()
    else:
        main()

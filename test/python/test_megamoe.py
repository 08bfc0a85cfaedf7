"""moec.MegaMoE (the fused MegaMoE networks as one object per EP rank) on
the emulated device against the oracle: EP2 and EP4, every rank in one
process (megamoe_ranks.py, one emulated device per rank) and every rank in
its own process (the group through torch.distributed, the launches of the
processes running concurrently over shared memory), and the refusals.
docs/python.md, "MegaMoE"; docs/emulator.md, "Ranks in separate
processes"."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import moec
from test_fused_moe import check_zero_rows

HERE = os.path.dirname(os.path.abspath(__file__))


def run_ranks(bundle, ep, m, inputs, out_dir, forwards, tensors):
    """megamoe_ranks.py in a fresh process with EP emulated devices (the
    device count is fixed when the emulated library loads)."""
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, MOEC_EMULATED_DEVICES=str(ep))
    env["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    result = subprocess.run([sys.executable, os.path.join(HERE, "megamoe_ranks.py"), bundle,
                             "flash-fused", str(ep), str(m), inputs, out_dir, str(forwards),
                             tensors], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout
    with open(os.path.join(out_dir, "status.json")) as handle:
        return {int(rank): value for rank, value in json.load(handle).items()}


@pytest.mark.parametrize("table, ep, m, forwards, tensors", [
    # m 40 per rank: workspace class 128, the compact transport.
    ("flash_ep2", 2, 40, 2, "torch"),
    # m 16 per rank: workspace class 16, the fixed-slot transport.
    ("flash_ep4", 4, 16, 2, "pointers"),
])
def test_megamoe_all_ranks_one_process(bundle_path, oracle, workdir, table, ep, m, forwards,
                                       tensors):
    """Every rank of flash-fused at EP2 / EP4 in one process: collective
    construction through an all_gather between threads, checkpoint weights
    (rank r binds experts r*E/ep onwards), outputs poisoned, forward f feeds
    each rank's tokens rolled by f rows; each forward's ranks together
    match the oracle of all ep*m tokens, every element within its bound."""
    if tensors == "torch":
        from conftest import require_torch
        require_torch()
    bundle = bundle_path(table)
    facts = moec.Bundle(bundle).table_facts("flash-fused", ep, m)
    assert facts.fused and facts.swiglu_limit == 10.0
    H, I, E, K = facts.hidden, facts.intermediate, facts.experts, facts.top_k
    o = oracle("tp", H, I, E, K, ep * m, 20 + ep, interleave=0, swiglu=facts.swiglu_limit)
    out_dir = os.path.join(o.directory, "ranks")
    status = run_ranks(bundle, ep, m, os.path.join(o.directory, "in"), out_dir, forwards,
                       tensors)
    assert status == {r: {"forwards": forwards} for r in range(ep)}  # overflow: check() raised
    compare_forwards(o, out_dir, ep, forwards, E)


def compare_forwards(o, out_dir, ep, forwards, E):
    """Each forward's outputs of every rank (rank{r}_f{f}.npy, rows rolled
    by f) against the oracle of all ep*m tokens: every element within its
    bound (Oracle.compare), routes with only ids -1 exactly zero, and every
    forward equal to the first."""
    ids = o.arrays["topk_ids"]
    outputs = []
    for f in range(forwards):
        # Undo forward f's roll of each rank's rows: every forward is the oracle's layer.
        bits = np.concatenate([np.roll(np.load(os.path.join(out_dir, "rank%d_f%d.npy" % (r, f))),
                                       -f, axis=0) for r in range(ep)])
        check_zero_rows(bits, ids, E)
        o.compare(bits, tag="f%d" % f)
        outputs.append(bits)
    assert np.array_equal(outputs[0], outputs[-1])  # rows are independent of their position


def test_megamoe_refusals(bundle_path, device):
    """Refused by name before any launch: a rank outside the group, no
    token capacity, an unfused network, another clamp, no way to exchange
    the buffers (torch.distributed is not initialised here), another
    shape, an exchange out of rank order."""
    bundle = moec.Bundle(bundle_path("flash_ep2"))
    common = dict(world_size=2, max_tok_per_rank=16, device=device)
    cases = [(dict(rank=2), "rank"), (dict(rank=0, max_tok_per_rank=0), "max_tok_per_rank"),
             (dict(rank=0, network="flash"), "network"),
             (dict(rank=0, swiglu_limit=7.0), "swiglu_limit"),
             (dict(rank=0), "all_gather"),
             (dict(rank=0, model_dim=1024), "layer flash-fused ep2 rank 0")]
    for arguments, what in cases:
        with pytest.raises(moec.MoecError) as error:
            moec.MegaMoE(bundle, **dict(common, **arguments))
        assert error.value.what == what, str(error.value)
    with pytest.raises(moec.MoecError) as error:
        moec.MegaMoE(bundle, rank=1, all_gather=lambda payload: [payload, payload], **common)
    assert "rank order" in error.value.message


@pytest.mark.parametrize("table, ep, m, forwards", [
    # The transports of the one-process test: compact at EP2, fixed slot at EP4.
    ("flash_ep2", 2, 40, 2),
    ("flash_ep4", 4, 16, 2),
])
def test_megamoe_ranks_in_processes(bundle_path, oracle, tmp_path, table, ep, m, forwards):
    """Every rank in its own process (megamoe_ranks.py --process), one
    emulated device each, the group and the symmetric buffers' IPC handles
    through torch.distributed (gloo): each process runs its own launches
    when it makes them, over its own mapping of every rank's symmetric
    buffer, and waits on the other processes' flags while they run theirs.
    The same data, poisoned outputs and oracle check as the one-process
    test."""
    from conftest import require_torch
    require_torch()
    bundle = bundle_path(table)
    facts = moec.Bundle(bundle).table_facts("flash-fused", ep, m)
    H, I, E, K = facts.hidden, facts.intermediate, facts.experts, facts.top_k
    o = oracle("tp", H, I, E, K, ep * m, 20 + ep, interleave=0, swiglu=facts.swiglu_limit)
    out_dir = os.path.join(o.directory, "processes")
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, MOEC_EMULATED_DEVICES="1", MOEC_EMULATED_DEFER_LAUNCHES="0",
               MOEC_EMULATED_PEER_TIMEOUT="60")
    env["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    init_file = str(tmp_path / "rendezvous")
    ranks = [subprocess.Popen([sys.executable, os.path.join(HERE, "megamoe_ranks.py"),
                               "--process", bundle, "flash-fused", str(ep), str(m), str(rank),
                               init_file, os.path.join(o.directory, "in"), out_dir,
                               str(forwards)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, env=env) for rank in range(ep)]
    outputs = []
    try:
        for process in ranks:
            outputs.append(process.communicate(timeout=240)[0])
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    for rank, (process, output) in enumerate(zip(ranks, outputs)):
        assert process.returncode == 0, "rank %d:\n%s" % (rank, output)
        with open(os.path.join(out_dir, "status%d.json" % rank)) as handle:
            assert json.load(handle) == {"forwards": forwards}  # overflow: check() raised
    compare_forwards(o, out_dir, ep, forwards, E)

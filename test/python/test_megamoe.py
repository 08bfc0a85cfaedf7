"""moec.MegaMoE (the fused MegaMoE networks as one object per EP rank) on
the emulated device against the oracle: EP2 and EP4, every rank in one
process (megamoe_ranks.py, one emulated device per rank), and the
refusals. docs/python.md, "MegaMoE"."""

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


def test_megamoe_ranks_in_processes(bundle_path, workdir, tmp_path):
    """EP2 with each rank in its own process, the buffers exchanged through
    torch.distributed (gloo): each process maps the other's symmetric
    buffer (the emulated device's IPC across processes), and a pattern one
    rank writes there is what the other reads in its own. A forward does
    not run across processes yet: the emulator runs a launch over copies of
    its buffers, so a rank waiting on the other's flags is a deadlock
    (docs/emulator.md, "Ranks in separate processes", steps 2 and 3)."""
    from conftest import require_torch
    require_torch()
    bundle = bundle_path("flash_ep2")
    env = dict(os.environ, MOEC_EMULATED_DEVICES="1")
    init_file = str(tmp_path / "rendezvous")
    ranks = [subprocess.Popen([sys.executable, os.path.join(HERE, "megamoe_ranks.py"),
                               "--process", bundle, "flash-fused", "2", "16", str(rank),
                               init_file], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, env=env) for rank in range(2)]
    for rank, process in enumerate(ranks):
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, output
        result = json.loads(output.strip().splitlines()[-1])
        assert result.get("constructed", "").startswith("MegaMoE(flash-fused rank %d/2" % rank), \
            output
        assert result["seen"] == [2 - rank]  # rank (r - 1) mod 2 wrote r - 1 + 1
        assert result.get("what") == "forward m=16", output
        assert "deadlock" in result["message"]

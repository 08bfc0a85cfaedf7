"""The experts-only entry (moec.experts_forward, moec_layer_forward_experts)
behind an all-to-all written here, and moec.vllm_experts.ModularExperts
driven through the calls vLLM's modular kernel makes.

The all-to-all is DeepEP's normal-mode dispatch in one process: every
source token goes once to each EP rank holding one of its experts, with its
top-k ids made local there (-1 for the other ranks' experts), its weights,
and the per-expert route counts the dispatcher reports; each rank receives
its rows in a random order. The combine sums each token's returned rows.
Data: the oracle's seeded inputs (`moec reference --write-inputs`, a tenth
of the routes -1), outputs poisoned before each forward, the combined
layer compared with the oracle within its bound (docs/numerics.md).

The modular-kernel driver follows vLLM 003d383eb3f3275169256e85e5b0ae9d5455342a,
vllm/model_executor/layers/fused_moe/modular_kernel.py,
FusedMoEKernelModularImpl.apply: prepare, moe_problem_size,
workspace_shapes (for the chunk and the full M), the fused_out buffer,
fused_experts.apply with its keywords, then finalize with
finalize_weight_and_reduce_impl().
"""

import os
import types

import numpy as np
import pytest

import moec
from conftest import TOLERANCE, bf16_to_float, torch_on_device
from test_engines import rank_oracle
from test_fused_moe import POISON, prepare_checkpoint


# ---- the all-to-all -------------------------------------------------------------------

class Dispatch:
    """DeepEP-style dispatch of `sources` (token index lists per source
    rank) over `ep` ranks of `local` experts each: per destination rank the
    delivered rows (token, hidden, local ids, weights), in a random order,
    and the routes per local expert."""

    def __init__(self, arrays, sources, ep, local, seed):
        rng = np.random.default_rng(seed)
        ids, self.ep, self.local = arrays["topk_ids"], ep, local
        self.ranks = []
        for rank in range(ep):
            mine = (ids >= rank * local) & (ids < (rank + 1) * local)
            tokens = [t for source in sources for t in source if mine[t].any()]
            tokens = [tokens[i] for i in rng.permutation(len(tokens))]
            local_ids = np.where(mine[tokens], ids[tokens] - rank * local, -1).astype(np.int32)
            counts = [int((local_ids == e).sum()) for e in range(local)]
            self.ranks.append(types.SimpleNamespace(
                tokens=tokens, hidden=arrays["hidden_states"][tokens],
                local_ids=local_ids.reshape(len(tokens), -1),
                weights=arrays["topk_weights"][tokens], counts=counts))

    def combine(self, outputs, m, H):
        """Each token's returned rows summed (FP32), as the combine does."""
        total = np.zeros((m, H), dtype=np.float32)
        for rank, bits in zip(self.ranks, outputs):
            assert bits.shape == (len(rank.tokens), H)
            assert not np.any(bits == 0xFFFF), "a row was never written (still poisoned)"
            np.add.at(total, rank.tokens, bf16_to_float(bits))
        return total


def ep_layers(bundle_path, device):
    bundle = moec.Bundle(bundle_path("flash_ep2"))
    return [moec.Layer(bundle, device, "flash", ep=2, ep_rank=r) for r in range(2)]


def local_weights(layer, arrays):
    first, count = layer.ep_rank * layer.local_experts, layer.local_experts
    return prepare_checkpoint(layer, *[arrays[k][first:first + count]
                                       for k in ("w13", "w13_scale", "w2", "w2_scale")])


def bind(layer, arrays):
    layer.load_weights(**local_weights(layer, arrays))


def check_with_oracle(o, dispatch, outputs, m, H):
    """Each rank's returned rows, at their tokens, against the oracle of
    the layer restricted to that rank's experts (every element within its
    bound); the combined rows against the oracle's layer within its
    relative L2 bound. (The combine sums rows each already rounded to BF16
    once, a rounding per rank that the per-element bound of the layer's
    one rounding does not cover.)"""
    local = dispatch.local
    for r, (rank, bits) in enumerate(zip(dispatch.ranks, outputs)):
        placed = np.zeros((m, H), dtype=np.float32)
        placed[rank.tokens] = bf16_to_float(bits)
        rank_oracle(o, list(range(r * local, (r + 1) * local)), "rank%d" % r).compare(placed)
    total = dispatch.combine(outputs, m, H)
    reference = moec.npy.load(os.path.join(o.directory, "in", "output.npy")).numpy()
    assert reference.shape == (m, H)
    rel = np.linalg.norm(total - reference) / np.linalg.norm(reference)
    assert rel <= TOLERANCE, rel


def _bits(tensor):
    import torch
    return tensor.view(torch.int16).numpy().view(np.uint16).copy()


# ---- the entry behind the all-to-all ----------------------------------------------------

def test_experts_entry_behind_all_to_all(bundle_path, device, oracle, torch):
    """flash at EP2: 37 tokens on two source ranks dispatched to the two EP
    ranks; each rank's experts-only entry (torch tensors over emulated
    device memory, the dispatcher's counts) into poisoned rows; the
    combined result matches the oracle's layer. The same rows as NumPy
    arrays give the same bits."""
    ranks = ep_layers(bundle_path, device)
    H, I, E, K, m = (ranks[0].hidden, ranks[0].intermediate, ranks[0].experts,
                     ranks[0].top_k, 37)
    o = oracle("tp", H, I, E, K, m, 41, interleave=0, swiglu=ranks[0].swiglu_limit)
    dispatch = Dispatch(o.arrays, [range(0, 20), range(20, m)], 2, ranks[0].local_experts, 41)
    outputs = []
    for layer, rank in zip(ranks, dispatch.ranks):
        bind(layer, o.arrays)
        rows = len(rank.tokens)
        assert 0 < rows <= m and sum(rank.counts) > 0
        out = torch_on_device(device, np.full((rows, H), POISON * 0x101, np.uint16),
                              torch.bfloat16)
        before = layer.read_status()[1]
        result = moec.experts_forward(
            layer, torch_on_device(device, rank.hidden, torch.bfloat16),
            torch_on_device(device, rank.local_ids, torch.int32),
            torch_on_device(device, rank.weights, torch.float32), rank.counts, out=out)
        device.synchronize()
        assert result is out
        assert layer.read_status() == (0, before + 1)  # no overflow, one forward
        outputs.append(_bits(out))
        arrays = moec.experts_forward(layer, rank.hidden, rank.local_ids, rank.weights)
        assert arrays.dtype == np.uint16 and np.array_equal(arrays, outputs[-1])
    check_with_oracle(o, dispatch, outputs, m, H)


def test_experts_entry_counts_and_refusals(bundle_path, device, oracle, torch):
    """The C call's checks: counts summing above rows * top_k and shapes
    are refused before any launch; an undercount shows as overflow routes;
    no rows is a no-op; a shared-expert-free unfused table is required."""
    layer = ep_layers(bundle_path, device)[1]
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 16
    o = oracle("tp", H, I, E, K, m, 42, interleave=0, swiglu=layer.swiglu_limit)
    rank = Dispatch(o.arrays, [range(m)], 2, layer.local_experts, 42).ranks[1]
    bind(layer, o.arrays)
    rows = len(rank.tokens)
    forwards = layer.read_status()[1]
    with pytest.raises(moec.MoecError) as error:
        moec.experts_forward(layer, rank.hidden, rank.local_ids, rank.weights,
                             [rows * K, 1, 0, 0])
    assert error.value.status == 1 and "more than the %d slots" % (rows * K) in str(error.value)
    with pytest.raises(moec.MoecError) as error:
        moec.experts_forward(layer, rank.hidden, rank.local_ids, rank.weights, [1, 2])
    assert error.value.what == "expert_counts"
    with pytest.raises(moec.MoecError) as error:
        moec.experts_forward(layer, rank.hidden, rank.local_ids[:, :2], rank.weights)
    assert error.value.what == "topk_ids"
    assert layer.read_status()[1] == forwards  # nothing launched
    # Counts that leave out the busiest expert's routes: the sort reports
    # them as overflow routes (the output must not be used).
    short = list(rank.counts)
    busiest = int(np.argmax(short))
    assert short[busiest] > 0
    short[busiest] = 0
    moec.experts_forward(layer, rank.hidden, rank.local_ids, rank.weights, short)
    assert layer.read_status()[0] >= rank.counts[busiest]
    exact = moec.experts_forward(layer, rank.hidden, rank.local_ids, rank.weights, rank.counts)
    assert layer.read_status()[0] == 0
    unsized = moec.experts_forward(layer, rank.hidden, rank.local_ids, rank.weights)
    assert np.array_equal(exact, unsized)
    empty = moec.experts_forward(layer, rank.hidden[:0], rank.local_ids[:0], rank.weights[:0])
    assert empty.shape == (0, H)


# ---- vLLM's modular kernel --------------------------------------------------------------

class InProcessAllToAll:
    """A vLLM prepare/finalize over the test's all-to-all, all EP ranks in
    one process: prepare returns this rank's delivered rows with global ids
    (vLLM's DeepEP high-throughput prepare maps them back to global ids and
    passes expert_map) and ExpertTokensMetadata's CPU counts; finalize hands
    its rows to the combine, which has them all once the last rank has
    finalized (the collective a real combine is)."""

    def __init__(self, torch, device, dispatch, m, H):
        self.torch, self.device, self.dispatch, self.m, self.H = torch, device, dispatch, m, H
        self.returned, self.combined = {}, None

    def activation_format(self):
        return moec.vllm_experts.FusedMoEActivationFormat.Standard

    def prepare(self, rank, defer_input_quant):
        assert defer_input_quant  # the experts quantise the BF16 rows themselves
        torch, r = self.torch, self.dispatch.ranks[rank]
        local = self.dispatch.local
        global_ids = np.where(r.local_ids >= 0, r.local_ids + rank * local, -1).astype(np.int32)
        meta = types.SimpleNamespace(
            expert_num_tokens=None,
            expert_num_tokens_cpu=torch.tensor(r.counts, dtype=torch.int32))
        return (torch_on_device(self.device, r.hidden, torch.bfloat16), None, meta,
                torch_on_device(self.device, global_ids, torch.int32),
                torch_on_device(self.device, r.weights, torch.float32))

    def finalize(self, rank, output, fused_expert_output, topk_weights, topk_ids,
                 apply_router_weight_on_input, weight_and_reduce_impl):
        rows = weight_and_reduce_impl.apply(None, fused_expert_output, topk_weights, topk_ids,
                                            apply_router_weight_on_input)
        self.device.synchronize()
        self.returned[rank] = _bits(rows)
        if len(self.returned) == len(self.dispatch.ranks):
            self.combined = [self.returned[i] for i in sorted(self.returned)]


def vllm_modular_apply(torch, prepare_finalize, rank, fused_experts, w1, w2, expert_map,
                       global_num_experts, activation):
    """FusedMoEKernelModularImpl.apply (vLLM 003d383e) for one EP rank: the
    calls it makes on the experts object, in its order and with its
    keywords (DBO, LoRA and shared experts left out)."""
    local_num_experts = w1.shape[0]
    a1q, a1q_scale, expert_tokens_meta, topk_ids, topk_weights = prepare_finalize.prepare(
        rank, defer_input_quant=fused_experts.expects_unquantized_inputs)
    _, M_full, N, K, top_k = fused_experts.moe_problem_size(a1q, w1, w2, topk_ids)
    workspace_dtype = fused_experts.workspace_dtype(torch.bfloat16)
    workspace13_shape, workspace2_shape, _ = fused_experts.workspace_shapes(
        M_full, N, K, top_k, global_num_experts, local_num_experts, expert_tokens_meta,
        activation)
    _, _, fused_out_shape = fused_experts.workspace_shapes(
        M_full, N, K, top_k, global_num_experts, local_num_experts, expert_tokens_meta,
        activation)
    assert fused_out_shape == (M_full, K)
    # vLLM's workspace manager: one buffer for workspace13 and fused_out
    # (here over emulated device memory, poisoned).
    size = max(int(np.prod(workspace13_shape)), int(np.prod(fused_out_shape)))
    common = torch_on_device(prepare_finalize.device, np.full(size, POISON * 0x101, np.uint16),
                             workspace_dtype)
    workspace2 = torch.empty(workspace2_shape, dtype=workspace_dtype)
    workspace13 = common[:int(np.prod(workspace13_shape))].view(workspace13_shape)
    fused_out = common[:int(np.prod(fused_out_shape))].view(fused_out_shape)
    unfinalized = fused_experts.apply(
        output=fused_out, hidden_states=a1q, w1=w1, w2=w2, topk_weights=topk_weights,
        topk_ids=topk_ids, activation=activation, global_num_experts=global_num_experts,
        expert_map=expert_map, a1q_scale=a1q_scale, a2_scale=fused_experts.a2_scale,
        workspace13=workspace13, workspace2=workspace2,
        expert_tokens_meta=expert_tokens_meta, apply_router_weight_on_input=False)
    assert unfinalized is None
    output = torch.empty((prepare_finalize.m, K), dtype=torch.bfloat16)
    prepare_finalize.finalize(rank, output, fused_out, topk_weights, topk_ids, False,
                              fused_experts.finalize_weight_and_reduce_impl())


def test_vllm_modular_experts(bundle_path, device, oracle, torch):
    """ModularExperts on each EP rank of flash at EP2 through vLLM's
    modular-kernel calls, with vLLM's expert_map (global -> local, -1
    elsewhere) and the dispatcher's counts; the combined result matches the
    oracle's layer. Another activation is refused naming both."""
    ranks = ep_layers(bundle_path, device)
    H, I, E, K, m = (ranks[0].hidden, ranks[0].intermediate, ranks[0].experts,
                     ranks[0].top_k, 29)
    o = oracle("tp", H, I, E, K, m, 43, interleave=0, swiglu=ranks[0].swiglu_limit)
    local = ranks[0].local_experts
    dispatch = Dispatch(o.arrays, [range(0, 11), range(11, m)], 2, local, 43)
    a2a = InProcessAllToAll(torch, device, dispatch, m, H)
    silu = types.SimpleNamespace(value="silu", name="SILU")  # vLLM's MoEActivation.SILU
    for layer in ranks:
        prepared = local_weights(layer, o.arrays)
        L, Hh, Ih = layer.local_experts, H // 2, I // 2
        w = {k: torch_on_device(device, np.frombuffer(bytes(getattr(v, "data", v)), np.uint8)
                                .reshape(shape), torch.uint8)
             for (k, v), shape in zip(sorted(prepared.items()),
                                      [(L, 2 * I, Hh), (L, 2 * I, H // 32),
                                       (L, H, Ih), (L, H, I // 32)])}
        quant_config = types.SimpleNamespace(w1_scale=w["w13_scale"], w2_scale=w["w2_scale"],
                                             a2_scale=None)
        experts = moec.vllm_experts.ModularExperts(layer, quant_config)
        assert experts.activation_format() == a2a.activation_format()
        assert not experts.is_monolithic() and experts._supports_activation(silu)
        expert_map = torch.full((E,), -1, dtype=torch.int32)
        expert_map[layer.ep_rank * local:(layer.ep_rank + 1) * local] = torch.arange(
            local, dtype=torch.int32)
        with pytest.raises(moec.MoecError) as error:
            experts.apply(None, None, w["w13"], w["w2"], None, None,
                          types.SimpleNamespace(value="gelu"), E, expert_map, None, None,
                          None, None, None, False)
        assert error.value.what == "activation" and "gelu" in str(error.value)
        vllm_modular_apply(torch, a2a, layer.ep_rank, experts, w["w13"], w["w2"], expert_map,
                           E, silu)
    check_with_oracle(o, dispatch, a2a.combined, m, H)

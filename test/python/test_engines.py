"""vLLM's and SGLang's AITER calls, as the engines make them, reaching moec on
the emulated device (torch tensors over emulated device memory) and
compared with the oracle; moec.aiter_compat routing with and without an
installed `aiter`.

The engine functions below are copied from the engines' source, keeping
their argument order and keywords; only the import of the engine's own
types is dropped:
- vLLM 8ed781422f12b84be4ea004a4039b75839795ab0, vllm/_aiter_ops.py,
  _rocm_aiter_fused_moe_impl (positional; imports aiter at call time), and
  vllm/model_executor/layers/fused_moe/expert_map_manager.py,
  determine_expert_map (how vLLM builds expert_mask under EP).
- SGLang 22cb8f7283c30b70f46ac06f4ff5af924d970425,
  python/sglang/srt/layers/moe/moe_runner/aiter.py,
  fused_experts_none_to_aiter (keywords; imports aiter at every call).
"""

import logging
import os
import sys
import types

import numpy as np
import pytest

import moec
import moec.aiter_compat
from conftest import ROOT, TABLES, Oracle, reference_oracle, run, torch_on_device
from test_fused_moe import POISON, prepare_checkpoint

INPUTS = os.path.join(ROOT, "test", "lit", "Tools", "Inputs")


# ---- the engines' code ------------------------------------------------------------

def vllm_rocm_aiter_fused_moe_impl(hidden_states, w1, w2, topk_weight, topk_ids,
                                   expert_mask=None, activation_method=0, quant_method=0,
                                   doweight_stage1=False, w1_scale=None, w2_scale=None,
                                   a1_scale=None, a2_scale=None, num_local_tokens=None,
                                   output_dtype=None):
    # vLLM 8ed78142, vllm/_aiter_ops.py: _rocm_aiter_fused_moe_impl.
    from aiter import ActivationType, QuantType
    from aiter.fused_moe import fused_moe

    activation = ActivationType(activation_method)
    quant_type = QuantType(quant_method)

    return fused_moe(
        hidden_states,
        w1,
        w2,
        topk_weight,
        topk_ids,
        expert_mask,
        activation,
        quant_type,
        doweight_stage1,
        w1_scale,
        w2_scale,
        a1_scale,
        a2_scale,
        num_local_tokens=num_local_tokens,
        dtype=output_dtype,
    )


def vllm_determine_expert_map(torch, ep_size, ep_rank, global_num_experts,
                              expert_placement_strategy="linear", num_fused_shared_experts=0,
                              return_expert_mask=False):
    # vLLM 8ed78142, vllm/model_executor/layers/fused_moe/expert_map_manager.py:
    # determine_expert_map (its docstring and the ValueError left out).
    assert ep_size > 0
    if ep_size == 1:
        return (global_num_experts, None, None)
    base_experts = global_num_experts // ep_size
    remainder = global_num_experts % ep_size
    local_num_experts = base_experts + 1 if ep_rank < remainder else base_experts
    expert_map = torch.full((global_num_experts,), -1, dtype=torch.int32)
    if expert_placement_strategy == "linear":
        start_idx = ep_rank * base_experts + min(ep_rank, remainder)
        expert_map[start_idx: start_idx + local_num_experts] = torch.arange(
            0, local_num_experts, dtype=torch.int32)
    elif expert_placement_strategy == "round_robin":
        local_log_experts = torch.arange(ep_rank, global_num_experts, ep_size, dtype=torch.int32)
        # .long(): torch 1.13 (Debian's) indexes with int64 only; vLLM's torch takes int32.
        expert_map[local_log_experts.long()] = torch.arange(0, local_num_experts,
                                                            dtype=torch.int32)
    expert_mask = None
    if return_expert_mask:
        expert_mask = torch.ones((global_num_experts + num_fused_shared_experts + 1,),
                                 dtype=torch.int32)
        expert_mask[-1] = 0
        expert_mask[:global_num_experts] = expert_map > -1
        expert_map = torch.cat((expert_map, torch.tensor(
            [local_num_experts + i for i in range(num_fused_shared_experts)],
            dtype=torch.int32)), dim=0)
    return (local_num_experts, expert_map, expert_mask)


_AITER_ACTIVATIONS = {"silu": "Silu", "swiglu": "Swiglu"}  # SGLang 22cb8f72, moe_runner/aiter.py


def sglang_fused_experts_none_to_aiter(torch, dispatch_output, quant_info, runner_config):
    # SGLang 22cb8f72, python/sglang/srt/layers/moe/moe_runner/aiter.py:
    # fused_experts_none_to_aiter (returns the output instead of wrapping it
    # in SGLang's StandardCombineInput).
    from aiter import ActivationType, QuantType
    from aiter.fused_moe import fused_moe

    assert not runner_config.no_combine, "no_combine=True is not supported by AITER"

    hidden_states = dispatch_output.hidden_states
    topk_weights, topk_ids, _ = dispatch_output.topk_output
    topk_weights = topk_weights.to(torch.float32)

    if runner_config.apply_router_weight_on_input and not quant_info.doweight_stage1:
        assert (
            topk_weights.dim() == 2 and topk_weights.shape[-1] == 1
        ), "apply_router_weight_on_input requires topk=1"
        hidden_states = hidden_states * topk_weights.to(hidden_states.dtype)
        topk_weights = torch.ones_like(topk_weights)

    activation = runner_config.activation
    output = fused_moe(
        hidden_states=hidden_states,
        w1=quant_info.w13_weight,
        w2=quant_info.w2_weight,
        topk_weight=topk_weights,
        topk_ids=topk_ids.to(torch.int32),
        quant_type=getattr(QuantType, quant_info.quant_type.value),
        activation=getattr(ActivationType, _AITER_ACTIVATIONS.get(activation, "Gelu")),
        w1_scale=quant_info.w13_scale,
        w2_scale=quant_info.w2_scale,
        a1_scale=quant_info.a13_scale,
        a2_scale=quant_info.a2_scale,
        bias1=quant_info.b13,
        bias2=quant_info.b2,
        expert_mask=quant_info.expert_mask,
        doweight_stage1=quant_info.doweight_stage1,
        hidden_pad=quant_info.hidden_pad,
        intermediate_pad=quant_info.intermediate_pad,
    )
    return output


# ---- fixtures and helpers --------------------------------------------------------------

@pytest.fixture
def stand_in_aiter(torch):
    """moec.aiter_compat with no AITER installed: the stand-in `aiter`."""
    assert "aiter" not in sys.modules
    yield
    moec.aiter_compat.uninstall()
    assert "aiter" not in sys.modules


@pytest.fixture(scope="module")
def compiled(workdir):
    """compiled('gptoss-mixed') -> a bundle of test/lit/Tools/Inputs/<name>.table."""
    def compile_table(name):
        out = os.path.join(workdir, "engines-%s.moeb" % name)
        if not os.path.exists(out):
            status, text = run("compile", "-q", os.path.join(INPUTS, name + ".table"), "-o", out)
            assert status == 0, text
        return out
    return compile_table


def variant(workdir, source, old, new, small=False):
    """The table `source` with `old` replaced by `new` on every line that
    has it, compiled (--small for a tuning table): a table the engine's
    call means as it stands."""
    with open(source) as f:
        text = f.read()
    assert old in text, (source, old)
    name = "engines-%s-%s" % (os.path.basename(source)[:-len(".table")],
                              "".join(c if c.isalnum() else "_" for c in new or "none"))
    table = os.path.join(workdir, name + ".table")
    with open(table, "w") as f:
        f.write(text.replace(old, new))
    out = os.path.join(workdir, name + ".moeb")
    status, text = run("compile", "-q", *(["--small", "--allow-spills"] if small else []),
                       table, "-o", out)
    assert status == 0, text
    return out


def situ_oracle(workdir, layer, m, seed, beta, linear_beta):
    """`moec reference` of the layer's problem, SiTUv2 with these betas
    (conftest's oracle has no beta flags)."""
    directory = os.path.join(workdir, "engines-situ-m%d-s%d-b%g-lb%g" % (m, seed, beta,
                                                                        linear_beta))
    flags = ["--interleave", 0, "--swiglu-limit", 0, "--activation", "situ-v2",
             "--situ-beta", beta, "--situ-linear-beta", linear_beta]
    return reference_oracle(directory, "tp", layer.hidden, layer.intermediate, layer.experts,
                            layer.top_k, m, seed, flags)


class Inputs:
    """An oracle's tokens, routing and the given experts' prepared weights,
    as torch tensors over emulated device memory."""

    def __init__(self, torch, device, layer, arrays, experts=None):
        a, H, I = arrays, layer.hidden, layer.intermediate
        experts = list(range(a["w13"].shape[0])) if experts is None else experts
        prepared = prepare_checkpoint(layer, *[a[k][experts] for k in
                                               ("w13", "w13_scale", "w2", "w2_scale")])
        E = len(experts)
        shapes = {"w13": (E, 2 * I, H // 2), "w13_scale": (E, 2 * I, H // 32),
                  "w2": (E, H, I // 2), "w2_scale": (E, H, I // 32)}
        self.w = {n: torch_on_device(device, np.frombuffer(bytes(getattr(v, "data", v)),
                                                           np.uint8).reshape(shapes[n]),
                                     torch.uint8)
                  for n, v in prepared.items()}
        self.hidden = torch_on_device(device, a["hidden_states"], torch.bfloat16)
        self.ids = torch_on_device(device, a["topk_ids"], torch.int32)
        self.weights = torch_on_device(device, a["topk_weights"], torch.float32)
        self.device = device


def _bits(out):
    import torch
    return out.view(torch.int16).numpy().view(np.uint16).copy()


def _vllm(torch, x, expert_mask=None, activation_method=0):
    """vLLM's call for an MXFP4 layer (QuantMethod.BLOCK_1X32 = 3, output
    BF16)."""
    return vllm_rocm_aiter_fused_moe_impl(
        x.hidden, x.w["w13"], x.w["w2"], x.weights, x.ids, expert_mask, activation_method, 3,
        False, x.w["w13_scale"], x.w["w2_scale"], None, None, None, torch.bfloat16)


def _sglang(torch, x, activation, b13=None, b2=None, expert_mask=None):
    quant_info = types.SimpleNamespace(
        w13_weight=x.w["w13"], w2_weight=x.w["w2"],
        quant_type=types.SimpleNamespace(value="per_1x32"), w13_scale=x.w["w13_scale"],
        w2_scale=x.w["w2_scale"], a13_scale=None, a2_scale=None, b13=b13, b2=b2,
        expert_mask=expert_mask, doweight_stage1=False, hidden_pad=0, intermediate_pad=0)
    runner_config = types.SimpleNamespace(no_combine=False, apply_router_weight_on_input=False,
                                          activation=activation)
    dispatch_output = types.SimpleNamespace(hidden_states=x.hidden,
                                            topk_output=(x.weights, x.ids, None))
    return sglang_fused_experts_none_to_aiter(torch, dispatch_output, quant_info, runner_config)


def _aiter(x, **keywords):
    """aiter.fused_moe's SiTUv2 per_1x32 call with keywords an engine adds."""
    from aiter import ActivationType, QuantType
    from aiter.fused_moe import fused_moe
    return fused_moe(x.hidden, x.w["w13"], x.w["w2"], x.weights, x.ids,
                     activation=ActivationType.Situv2, quant_type=QuantType.per_1x32,
                     w1_scale=x.w["w13_scale"], w2_scale=x.w["w2_scale"], **keywords)


# ---- vLLM -----------------------------------------------------------------------------

def test_vllm_positional_call(bundle_path, device, oracle, torch, stand_in_aiter):
    """flash-tp4 (SiLU, MXFP4): vLLM's positional call through
    aiter.fused_moe, which moec.aiter_compat.install made moec's."""
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 21
    o = oracle("tp", H, I, E, K, m, 31, interleave=0)
    x = Inputs(torch, device, layer, o.arrays)
    installation = moec.aiter_compat.install(layer)
    assert installation.stand_in and sys.modules["aiter"].__moec_stand_in__
    before = layer.read_status()[1]
    out = _vllm(torch, x)
    device.synchronize()
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (m, H)
    assert layer.read_status()[1] == before + 1 and installation.calls == {"moec": 1, "aiter": 0}
    assert o.compare(_bits(out)) < 0.01


@pytest.mark.parametrize("placement", ["linear", "round_robin"])
def test_vllm_expert_mask(workdir, device, oracle, torch, stand_in_aiter, placement):
    """flash at EP2: each rank's vLLM call with the expert_mask vLLM builds
    (determine_expert_map, linear or round-robin placement) and that rank's
    experts' weights; each rank's partial output matches the oracle of the
    layer restricted to that rank's experts. vLLM's call passes no
    swiglu_limit, which AITER applies to SiLU as no clamp (flash_ep2's own
    clamp 10 refuses it: test_activation_and_expert_mask_refusals), so the
    table runs without its clamp."""
    bundle = moec.Bundle(variant(workdir, os.path.join(TABLES, "flash_ep2.table"),
                                 " swiglu_limit=10", "", small=True))
    ranks = [moec.Layer(bundle, device, "flash", ep=2, ep_rank=r) for r in range(2)]
    assert ranks[0].swiglu_limit == 0
    H, I, E, K, m = ranks[0].hidden, ranks[0].intermediate, ranks[0].experts, ranks[0].top_k, 19
    o = oracle("tp", H, I, E, K, m, 32, interleave=0)
    for layer in ranks:
        moec.aiter_compat.install(layer)
        local, expert_map, expert_mask = vllm_determine_expert_map(
            torch, 2, layer.ep_rank, E, placement, return_expert_mask=True)
        assert local == layer.local_experts and expert_mask.shape == (E + 1,)
        experts = [g for g in range(E) if expert_map[g] >= 0]
        x = Inputs(torch, device, layer, o.arrays, experts)
        ids_before = x.ids.clone()
        out = _vllm(torch, x, expert_mask)
        device.synchronize()
        assert torch.equal(x.ids, ids_before)  # the caller's ids are never rewritten
        assert rank_oracle(o, experts, "rank%d" % layer.ep_rank).compare(_bits(out)) < 0.01


def rank_oracle(o, experts, tag):
    """The oracle of one EP rank's partial output: o's inputs with every
    route to another rank's expert made -1 (no route)."""
    directory = o.directory + "-" + tag
    os.makedirs(os.path.join(directory, "in"), exist_ok=True)
    for name in os.listdir(os.path.join(o.directory, "in")):
        if name.endswith(".npy") and not name.startswith("output"):
            array = o.arrays[name[:-4]]
            if name == "topk_ids.npy":
                array = np.where(np.isin(array, experts), array, -1).astype(array.dtype)
            moec.npy.save(os.path.join(directory, "in", name), np.ascontiguousarray(array))
    return Oracle(directory, o.family, o.flags)


def test_vllm_gpt_oss_swiglu(compiled, device, oracle, torch, stand_in_aiter):
    """A GPT-OSS table (W13 computes AITER's Swiglu, limit 7): vLLM's call
    with ActivationType.Swiglu runs it; Silu is refused naming both."""
    bundle = moec.Bundle(compiled("gptoss-mixed"))
    layer = moec.Layer(bundle, device, "gptoss")
    assert layer.activation == "gpt-oss-swiglu" and layer.swiglu_limit == 7
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 13
    o = oracle("tp", H, I, E, K, m, 33, interleave=0, swiglu=7, activation="gpt-oss-swiglu")
    x = Inputs(torch, device, layer, o.arrays)
    moec.aiter_compat.install(layer)
    with pytest.raises(moec.MoecError) as error:
        _vllm(torch, x, activation_method=0)  # Silu
    assert error.value.what == "activation"
    assert "ActivationType.Silu" in str(error.value) and "ActivationType.Swiglu" in str(error.value)
    out = _vllm(torch, x, activation_method=2)  # ActivationType.Swiglu
    assert o.compare(_bits(out)) < 0.01


def test_vllm_situv2(compiled, workdir, device, oracle, torch, stand_in_aiter):
    """A SiTUv2 table (Kimi K3, AITER's ActivationType.Situv2 = 3 in
    csrc/include/aiter_enum.h at aiter e4048607): vLLM's call passes no
    betas, which AITER's fused_moe passes its FlyDSL stage 1 as 1.0 and 1.0
    (fused_moe_2stages, aiter/fused_moe.py). The table compiled with 4 and
    25 refuses it naming both values and the fixes, and serves the call
    that passes beta=4, linear_beta=25 (against the oracle with 4 and 25);
    the same table compiled with betas 1 and 1 serves vLLM's call against
    the oracle with 1 and 1, far from the one with 4 and 25. Silu is
    refused naming both sides, never run as SiLU."""
    source = os.path.join(INPUTS, "situv2-tp.table")
    layer = moec.Layer(moec.Bundle(compiled("situv2-tp")), device, "situ")
    assert layer.activation == "situ-v2"
    assert (layer.facts.situ_beta, layer.facts.situ_linear_beta) == (4.0, 25.0)
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 13
    o425 = situ_oracle(workdir, layer, m, 36, 4, 25)
    x = Inputs(torch, device, layer, o425.arrays)
    installation = moec.aiter_compat.install(layer)
    with pytest.raises(moec.MoecError) as error:
        _vllm(torch, x, activation_method=0)  # Silu
    assert error.value.what == "activation"
    assert "ActivationType.Silu" in str(error.value) and "ActivationType.Situv2" in str(error.value)
    with pytest.raises(moec.MoecError) as error:
        _vllm(torch, x, activation_method=3)  # ActivationType.Situv2, no betas
    message = str(error.value)
    assert error.value.what == "beta" and "\n" not in message
    assert "absent, which AITER's fused_moe passes its FlyDSL stage 1 as 1" in message
    assert "compiled with situ_beta = 4, situ_linear_beta = 25" in message
    assert "pass beta=4, linear_beta=25 as the model does" in message
    assert "--situ-beta 1 --situ-linear-beta 1" in message
    assert layer.read_status()[1] == 0 and installation.calls == {"moec": 0, "aiter": 0}
    # linear_beta left out alone is refused as well.
    with pytest.raises(moec.MoecError) as error:
        _aiter(x, beta=4.0)
    assert error.value.what == "linear_beta" and "absent" in str(error.value)
    out = _aiter(x, beta=4.0, linear_beta=25.0)  # an engine passing the model's betas
    assert o425.compare(_bits(out)) < 0.01
    moec.aiter_compat.uninstall()

    ones = moec.Layer(moec.Bundle(variant(workdir, source, "situ_v2=true",
                                          "situ_v2=true situ_beta=1 situ_linear_beta=1")),
                      device, "situ")
    assert (ones.facts.situ_beta, ones.facts.situ_linear_beta) == (1.0, 1.0)
    o11 = situ_oracle(workdir, ones, m, 36, 1, 1)
    moec.aiter_compat.install(ones)
    out = _vllm(torch, Inputs(torch, device, ones, o11.arrays), activation_method=3)
    assert o11.compare(_bits(out)) < 0.01
    # The betas change the function: the same output is far from 4 and 25's,
    # and from a SiLU layer's.
    with pytest.raises(AssertionError):
        Oracle(o11.directory, "tp", o425.flags).compare(_bits(out), tag="as-4-25")
    silu = oracle("tp", H, I, E, K, m, 36, interleave=0)
    with pytest.raises(AssertionError):
        silu.compare(_bits(out), tag="as-silu")


# ---- SGLang ---------------------------------------------------------------------------

def test_sglang_keyword_call(bundle_path, device, oracle, torch, stand_in_aiter):
    """flash-tp4: SGLang's AITER runner (keywords, aiter re-imported per call)."""
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 26
    o = oracle("tp", H, I, E, K, m, 34, interleave=0)
    x = Inputs(torch, device, layer, o.arrays)
    moec.aiter_compat.install(layer)
    for _ in range(2):
        out = _sglang(torch, x, "silu")
        assert o.compare(_bits(out)) < 0.01
    with pytest.raises(moec.MoecError) as error:  # SGLang maps any other activation to Gelu
        _sglang(torch, x, "gelu")
    assert error.value.what == "activation" and "ActivationType.Gelu" in str(error.value)


def test_sglang_gpt_oss_with_biases(compiled, device, oracle, torch, stand_in_aiter):
    """A GPT-OSS table compiled with AITER's biases: SGLang passes
    ActivationType.Swiglu and bias1 / bias2; moec binds them."""
    layer = moec.Layer(moec.Bundle(compiled("bias")), device, "gptoss")
    assert layer.activation == "gpt-oss-swiglu" and layer.facts.w13_bias
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 12
    o = oracle("tp", H, I, E, K, m, 35, interleave=0, swiglu=7, activation="gpt-oss-swiglu")
    rng = np.random.default_rng(35)
    w13_bias = rng.normal(size=(E, 2 * I)).astype(np.float32)
    w2_bias = rng.normal(size=(E, H)).astype(np.float32)
    moec.npy.save(os.path.join(o.directory, "in", "w13_bias.npy"), w13_bias)
    moec.npy.save(os.path.join(o.directory, "in", "w2_bias.npy"), w2_bias)
    x = Inputs(torch, device, layer, o.arrays)
    b13 = torch_on_device(device, w13_bias, torch.float32)
    b2 = torch_on_device(device, w2_bias, torch.float32)
    moec.aiter_compat.install(layer)
    with pytest.raises(moec.MoecError) as error:
        _sglang(torch, x, "swiglu")  # without the biases the table cannot run
    assert error.value.what == "bias1"
    out = _sglang(torch, x, "swiglu", b13, b2)
    assert o.compare(_bits(out)) < 0.01


# ---- refusals -------------------------------------------------------------------------

def test_activation_and_expert_mask_refusals(bundle_path, compiled, device, torch):
    """Nothing runs as another activation; masks that are not the layer's
    experts are refused naming both sides; doweight_stage1 says why."""
    bundle = moec.Bundle(bundle_path("flash_ep2"))
    layer = moec.Layer(bundle, device, "flash", ep=2, ep_rank=1)
    call = dict(w1_scale=1 << 20, w2_scale=1 << 20, m=1, out=1 << 20, layer=layer)
    args = (1 << 20,) * 5

    def refused(**kwargs):
        with pytest.raises(moec.MoecError) as error:
            moec.fused_moe(*args, **dict(call, **kwargs))
        return error.value

    before = layer.read_status()[1]
    # The table clamps at 10; a call without swiglu_limit is AITER's SiLU
    # without a clamp (runtime_swiglu_limit).
    assert layer.swiglu_limit == 10
    error = refused()
    assert error.what == "swiglu_limit" and "\n" not in str(error)
    for words in ("absent, which AITER's kernels apply as no clamp", "swiglu_limit 10",
                  "pass swiglu_limit=10 as the model does", "--swiglu-limit 0"):
        assert words in str(error), str(error)
    call["swiglu_limit"] = 10.0
    # rank 0's block, a mask of 3 experts, a fused shared expert, a pointer
    for mask, words in (([1] * 4 + [0] * 4 + [0], ["[0, 1, 2, 3]", "[4, 5, 6, 7]", "rank 1"]),
                        ([0] * 5 + [1] * 3 + [0], ["[5, 6, 7]"]),
                        ([0] * 4 + [1] * 4 + [1, 0], ["[8]", "shared"]),
                        (1 << 20, ["device pointer"])):
        error = refused(expert_mask=torch.tensor(mask, dtype=torch.int32)
                        if isinstance(mask, list) else mask)
        assert error.what == "expert_mask"
        for word in words:
            assert word in str(error), str(error)
    # vLLM's own mask for this rank is accepted (raw pointers: linear only)
    from moec.fused import _expert_mask_placement
    mask = torch.tensor([0] * 4 + [1] * 4 + [0], dtype=torch.int32)
    assert _expert_mask_placement(layer, mask) is None
    assert _expert_mask_placement(layer, torch.tensor([0, 1] * 4 + [0])) == [1, 3, 5, 7]
    error = refused(activation=2)
    assert error.what == "activation" and "Swiglu" in str(error) and "silu" in str(error)
    error = refused(doweight_stage1=True)
    assert error.what == "doweight_stage1" and "after W2" not in str(error)
    assert "stage 1" in str(error) and "combine" in str(error)
    mixed = moec.Layer(moec.Bundle(compiled("gptoss-mixed")), device, "mixed")
    assert mixed.activation == "mixed"
    for activation in (0, 2):
        with pytest.raises(moec.MoecError) as error:
            moec.fused_moe(*args, **dict(call, layer=mixed, activation=activation))
        assert error.value.what == "activation" and "different activations" in str(error.value)
    assert layer.read_status()[1] == before  # nothing was launched


# ---- aiter_compat ---------------------------------------------------------------------

FAKE_AITER = {
    "__init__.py": "import enum\n"
                   "class ActivationType(enum.IntEnum):\n"
                   "    No = -1\n    Silu = 0\n    Gelu = 1\n    Swiglu = 2\n"
                   "class QuantType(enum.IntEnum):\n"
                   "    No = 0\n    per_Tensor = 1\n    per_Token = 2\n    per_1x32 = 3\n"
                   "    per_1x128 = 4\n    per_128x128 = 5\n",
    "fused_moe.py": "calls = []\n"
                    "def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, *args, **kw):\n"
                    "    calls.append((args, kw))\n"
                    "    return 'aiter-output'\n",
}


@pytest.fixture
def fake_aiter(tmp_path, torch):
    """An installed `aiter` package whose fused_moe records its calls."""
    assert "aiter" not in sys.modules
    package = tmp_path / "site" / "aiter"
    package.mkdir(parents=True)
    for name, text in FAKE_AITER.items():
        (package / name).write_text(text)
    sys.path.insert(0, str(tmp_path / "site"))
    yield
    moec.aiter_compat.uninstall()
    sys.path.remove(str(tmp_path / "site"))
    for name in ("aiter.fused_moe", "aiter"):
        sys.modules.pop(name, None)


def test_install_routes_served_shapes_to_moec_and_the_rest_to_aiter(
        bundle_path, device, oracle, torch, fake_aiter, caplog):
    """With AITER installed: flash-tp4's shape reaches moec; another H, and
    the served shape with another activation, reach AITER's function,
    logged once per shape; uninstall() puts AITER's function back."""
    import aiter.fused_moe
    original = aiter.fused_moe.fused_moe
    installation = moec.aiter_compat.install(bundle_path("flash_tp4"), device)
    assert not installation.stand_in and installation.aiter_function is original
    assert sorted(l.network for l in installation.layers) == ["flash-tp4", "flash-tp4-draft"]
    from aiter.fused_moe import fused_moe
    assert fused_moe is not original
    layer = [l for l in installation.layers if l.network == "flash-tp4"][0]
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 9
    o = oracle("tp", H, I, E, K, m, 36, interleave=0)
    x = Inputs(torch, device, layer, o.arrays)
    assert o.compare(_bits(_vllm(torch, x))) < 0.01
    unserved = torch.zeros((m, 2 * H), dtype=torch.bfloat16)
    w1 = torch.zeros((E, 2 * I, H), dtype=torch.uint8)
    w2 = torch.zeros((E, 2 * H, I // 2), dtype=torch.uint8)
    with caplog.at_level(logging.WARNING, logger="moec.aiter_compat"):
        for _ in range(3):
            assert fused_moe(unserved, w1, w2, x.weights, x.ids, None, aiter.ActivationType.Silu,
                             aiter.QuantType.per_1x32, w1_scale=1 << 20,
                             w2_scale=1 << 20) == "aiter-output"
        assert _sglang(torch, x, "swiglu") == "aiter-output"  # served shape, other activation
    assert installation.calls == {"moec": 1, "aiter": 4}
    assert len(aiter.fused_moe.calls) == 4
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "hidden 1024" in messages[0] and "no layer" in messages[0]
    assert "Swiglu" in messages[1] and "activation" in messages[1]
    moec.aiter_compat.uninstall()
    assert aiter.fused_moe.fused_moe is original


def test_stand_in_refuses_what_no_layer_serves(bundle_path, device, torch, stand_in_aiter):
    """Without AITER, a call no layer serves raises MoecError (nothing
    else could run it)."""
    installation = moec.aiter_compat.install(bundle_path("flash_tp4"), device,
                                             networks=["flash-tp4"])
    assert [l.network for l in installation.layers] == ["flash-tp4"]
    from aiter.fused_moe import fused_moe
    from aiter import ActivationType, QuantType
    hidden = torch.zeros((3, 1024), dtype=torch.bfloat16)
    with pytest.raises(moec.MoecError) as error:
        fused_moe(hidden, torch.zeros((4, 1024, 512), dtype=torch.uint8),
                  torch.zeros((4, 1024, 256), dtype=torch.uint8),
                  torch.zeros((3, 4), dtype=torch.float32), torch.zeros((3, 4), dtype=torch.int32),
                  activation=ActivationType.Silu, quant_type=QuantType.per_1x32,
                  w1_scale=1 << 20, w2_scale=1 << 20)
    assert error.value.what == "hidden_states" and "no layer" in str(error.value)

"""moec.fused_moe serving AITER's A4W4 call (q_dtype_a torch.float4_e2m1fn_x2).

AITER's fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, ...,
quant_type=QuantType.per_1x32) with BF16 hidden states and MXFP4 weights
quantises the tokens to MXFP4 (A4W4) for ActivationType.Silu, for
ActivationType.Situv2 only with AITER_SITUV2_A4W4=1, and for
ActivationType.Swiglu from M = GPTOSS_SWIGLU_MXFP4_BF16_BOUND (256) up
(_fused_moe_impl, aiter/fused_moe.py). moec's layers of AITER's A4W4 tables
(dsv3_fp4: SiLU; kimik3_a4w4: SiTUv2) serve those calls on the emulated
device, compared with `moec reference --a-format fp4` on seeded random data
with the output poisoned first, within conftest.TOLERANCE = 2^-7 relative
L2 (the layer bound of test_fused_moe and test_vllm_class) and every
element within the oracle's own bound; the other calls are refused by
name with nothing launched.
"""

import os
import re

import numpy as np
import pytest

import moec
from moec.fused import _aiter_activation_format
from conftest import TABLES, TOLERANCE, reference_oracle, run, torch_on_device

AITER = os.path.join(TABLES, "aiter")


class QuantType:  # aiter.QuantType.per_1x32 (aiter/ops/enum.py)
    name, value = "per_1x32", 3


class ActivationType:
    def __init__(self, name, value):
        self.name, self.value = name, value


SILU, SWIGLU, SITUV2 = (ActivationType("Silu", 0), ActivationType("Swiglu", 2),
                        ActivationType("Situv2", 3))


@pytest.fixture(scope="module")
def a4w4(workdir):
    """name -> bundle compiled --small from AITER's A4W4 CSV."""
    out = {}
    for name in ("dsv3_fp4", "glm5_fp4", "kimik3_a4w4"):
        path = os.path.join(workdir, "a4w4-%s.moeb" % name)
        status, text = run("compile", os.path.join(AITER, name + "_tuned_fmoe.csv"),
                           "--skip-unsupported", "--small", "--allow-spills", "-q", "-o", path)
        assert status == 0, text
        out[name] = moec.Bundle(path)
    return out


def a4w4_oracle(workdir, tag, layer, m, seed, activation, a_format="fp4"):
    """`moec reference` of the layer's problem with MXFP4 tokens (A4W4)."""
    directory = os.path.join(workdir, "a4w4-%s-m%d-%s" % (tag, m, a_format))
    flags = ["--interleave", layer.gate_up_interleave, "--swiglu-limit", layer.swiglu_limit,
             "--activation", activation, "--a-format", a_format,
             "--mid-format", layer.facts.mid_format]
    return reference_oracle(directory, "tp", layer.hidden, layer.intermediate, layer.experts,
                            layer.top_k, m, seed, flags)


def aiter_call(torch, device, layer, arrays, m, activation, **keywords):
    """aiter.fused_moe's A4W4 call with torch tensors over emulated device
    memory: BF16 hidden states, MXFP4 w1 / w2 (uint8: this torch has no
    float4_e2m1fn_x2) and E8M0 scales prepared for the layer, FP32 weights,
    int32 ids, QuantType.per_1x32, `keywords` (beta=, linear_beta=); the
    output poisoned (0xFFFF: NaN).
    Returns the output's BF16 bits and the forwards launched."""
    H, I, E = layer.hidden, layer.intermediate, layer.local_experts
    packed = getattr(torch, "float4_e2m1fn_x2", torch.uint8)
    prepared = dict(moec.prepare_expert_weights(layer, arrays["w13"], arrays["w13_scale"],
                                                arrays["w2"], arrays["w2_scale"]))
    shapes = {"w13": (E, 2 * I, H // 2), "w13_scale": (E, 2 * I, H // 32),
              "w2": (E, H, I // 2), "w2_scale": (E, H, I // 32)}
    w = {n: torch_on_device(device, np.frombuffer(bytes(getattr(v, "data", v)),
                                                  np.uint8).reshape(shapes[n]),
                            packed if n in ("w13", "w2") else torch.uint8)
         for n, v in prepared.items()}
    hidden = torch_on_device(device, arrays["hidden_states"], torch.bfloat16)
    ids = torch_on_device(device, arrays["topk_ids"], torch.int32)
    weights = torch_on_device(device, arrays["topk_weights"], torch.float32)
    out = torch_on_device(device, np.full((m, H), 0xFFFF, np.uint16), torch.bfloat16)
    before = layer.read_status()[1]
    result = moec.fused_moe(hidden, w["w13"], w["w2"], weights, ids, activation=activation,
                            quant_type=QuantType(), w1_scale=w["w13_scale"],
                            w2_scale=w["w2_scale"], layer=layer, out=out, **keywords)
    device.synchronize()
    assert result is out
    bits = np.frombuffer(out._moec_buffer.download(), np.uint16).reshape(m, H)
    assert not np.any(bits == 0xFFFF), "output elements left unwritten"
    return bits, layer.read_status()[1] - before


def a8w4_rel_l2(oracle, bits):
    """The relative L2 of `bits` against the A8W4 oracle (FP8 tokens and
    intermediate) of the same inputs."""
    flags = [f for f in oracle.flags]
    flags[flags.index("--a-format") + 1] = "fp8"
    flags[flags.index("--mid-format") + 1] = "fp8"
    out_dir = os.path.join(oracle.directory, "a8w4-out")
    os.makedirs(out_dir, exist_ok=True)
    moec.npy.save(os.path.join(out_dir, "output.npy"), np.ascontiguousarray(bits))
    status, text = run("reference", "--family", "tp", *flags, "--inputs",
                       os.path.join(oracle.directory, "in"), "--compare", out_dir, "-o",
                       os.path.join(oracle.directory, "oracle-a8w4"))
    match = re.search(r"relative L2 ([0-9.eE+-]+)", text)
    assert match, text
    return float(match.group(1))


def test_table_facts_name_the_activation_format(a4w4, bundle_path):
    for name, activation in (("dsv3_fp4", "silu"), ("glm5_fp4", "silu"),
                             ("kimik3_a4w4", "situ-v2")):
        for network, ep, workspace, _ in a4w4[name].tables():
            facts = a4w4[name].table_facts(network, ep, workspace)
            assert (facts.a_format, facts.mid_format, facts.activation) == \
                ("fp4", "fp4", activation), (name, network)
    facts = moec.Bundle(bundle_path("flash_tp4")).table_facts("flash-tp4")
    assert (facts.a_format, facts.mid_format) == ("fp8", "fp8")


@pytest.mark.parametrize("name,network,m,seed", [
    ("dsv3_fp4", "aiter-2", 5, 21), ("dsv3_fp4", "aiter-2", 37, 22),
    ("glm5_fp4", "aiter-2", 9, 24)])
def test_a4w4_silu_matches_the_a4w4_oracle(a4w4, device, workdir, torch, name, network, m,
                                           seed):
    """DeepSeek V3's and GLM-5's FP4 tables (SiLU; compiled --small, H = I
    = 512 for dsv3's aiter-2 and 1024 for GLM-5's): AITER runs SiLU
    per_1x32 calls with FP4 weights as A4W4 whatever M, and so does moec's
    layer."""
    layer = moec.Layer(a4w4[name], device, network)
    assert layer.a_format == "fp4" and layer.activation == "silu"
    o = a4w4_oracle(workdir, name, layer, m, seed, "silu")
    bits, launched = aiter_call(torch, device, layer, o.arrays, m, SILU)
    assert launched == 1
    no_route = ~np.any((o.arrays["topk_ids"] >= 0) & (o.arrays["topk_ids"] < layer.experts),
                       axis=1)
    assert np.all(bits[no_route] == 0)
    rel = o.compare(bits)
    assert rel <= TOLERANCE
    # The A8W4 oracle of the same inputs is farther than the bound: the
    # comparison tells MXFP4 tokens from FP8 ones.
    assert a8w4_rel_l2(o, bits) > TOLERANCE


def test_kimik3_situv2_a4w4_needs_aiters_switch(a4w4, device, workdir, torch, monkeypatch):
    """Kimi K3's A4W4 table (SiTUv2): AITER runs a SiTUv2 call as A4W4 only
    with AITER_SITUV2_A4W4=1 (else a16w4, or a8w4 with AITER_SITUV2_A8W4=1),
    so the layer refuses the call without it, naming the switch."""
    bundle = a4w4["kimik3_a4w4"]
    network, ep, workspace, _ = bundle.tables()[0]
    layer = moec.Layer(bundle, device, network, ep, workspace)
    assert layer.a_format == "fp4" and layer.activation == "situ-v2"
    m, seed = 11, 23
    o = a4w4_oracle(workdir, "kimik3", layer, m, seed, "situ-v2")
    monkeypatch.delenv("AITER_SITUV2_A4W4", raising=False)
    monkeypatch.delenv("AITER_SITUV2_A8W4", raising=False)
    before = layer.read_status()[1]
    with pytest.raises(moec.MoecError) as error:
        aiter_call(torch, device, layer, o.arrays, m, SITUV2)
    assert error.value.what == "activation"
    assert "without AITER_SITUV2_A4W4=1" in error.value.message
    assert "quantises the tokens to BF16 (q_dtype_a torch.bfloat16)" in error.value.message
    assert "set AITER_SITUV2_A4W4=1" in error.value.message
    monkeypatch.setenv("AITER_SITUV2_A8W4", "1")
    monkeypatch.setenv("AITER_SITUV2_A4W4", "1")  # AITER tests A8W4 first
    with pytest.raises(moec.MoecError) as error:
        aiter_call(torch, device, layer, o.arrays, m, SITUV2)
    assert "to FP8 (q_dtype_a torch.float8_e4m3fn)" in error.value.message
    assert layer.read_status()[1] == before  # nothing launched
    monkeypatch.delenv("AITER_SITUV2_A8W4")
    # Kimi K3's betas, as the model passes them (absent: AITER's 1 and 1).
    betas = dict(beta=layer.facts.situ_beta, linear_beta=layer.facts.situ_linear_beta)
    assert betas == dict(beta=4.0, linear_beta=25.0)
    bits, launched = aiter_call(torch, device, layer, o.arrays, m, SITUV2, **betas)
    assert launched == 1
    assert o.compare(bits) <= TOLERANCE
    # SiLU is not what the table computes.
    with pytest.raises(moec.MoecError) as error:
        aiter_call(torch, device, layer, o.arrays, m, SILU)
    assert error.value.what == "activation"


class _Tensor:
    """A stand-in tensor of a dtype this torch lacks."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = dtype, shape

    def data_ptr(self):
        return 1 << 20


def test_prequantised_fp4_rows_refused(a4w4, device):
    """AITER takes hidden_states already in float4_e2m1fn_x2 with a1_scale;
    moec's layer quantises BF16 rows itself and refuses them by name."""
    layer = moec.Layer(a4w4["dsv3_fp4"], device, "aiter-2")
    H = layer.hidden
    with pytest.raises(moec.MoecError) as error:
        moec.fused_moe(_Tensor("torch.float4_e2m1fn_x2", (4, H // 2)), 1 << 20, 1 << 20,
                       1 << 20, 1 << 20, w1_scale=1 << 20, w2_scale=1 << 20, layer=layer,
                       quant_type=QuantType())
    assert error.value.what == "hidden_states"
    assert "pre-quantised" in error.value.message and "MXFP4 for A4W4" in error.value.message


def test_aiters_choice_of_activation_format(monkeypatch):
    """q_dtype_a as _fused_moe_impl picks it for per_1x32 with FP4 weights
    on gfx950, gate and up separate (values read from aiter/fused_moe.py)."""
    for name in ("AITER_SITUV2_A4W4", "AITER_SITUV2_A8W4", "GPTOSS_SWIGLU_MXFP4_BF16_BOUND"):
        monkeypatch.delenv(name, raising=False)
    assert _aiter_activation_format(SILU, 1)[0] == "fp4"
    assert _aiter_activation_format(None, 100000)[0] == "fp4"  # AITER's default is Silu
    assert _aiter_activation_format(SWIGLU, 255)[0] == "bf16"
    assert _aiter_activation_format(SWIGLU, 256)[0] == "fp4"
    assert _aiter_activation_format(SITUV2, 4096)[0] == "bf16"
    monkeypatch.setenv("GPTOSS_SWIGLU_MXFP4_BF16_BOUND", "8")
    assert _aiter_activation_format(SWIGLU, 8)[0] == "fp4"
    monkeypatch.setenv("AITER_SITUV2_A4W4", "1")
    assert _aiter_activation_format(SITUV2, 1)[0] == "fp4"
    monkeypatch.setenv("AITER_SITUV2_A8W4", "1")
    assert _aiter_activation_format(SITUV2, 1)[0] == "fp8"

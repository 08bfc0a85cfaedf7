"""Typed FP8 / FP4 torch tensors through the package on the emulated
device: MXFP4 weights as torch.float4_e2m1fn_x2 with torch.float8_e8m0fnu
scales (what AITER's and vLLM's MXFP4 paths hold), the FHMoE shared expert
as torch.float8_e4m3fn, and the refusals (pre-quantised FP8 activations,
wrong dtypes) naming the argument. A torch without a dtype (Debian's 1.13
has none of them) skips only the tests that need that dtype; the
refusals run on every torch. docs/python.md, "FP8 and FP4 tensors"."""

import numpy as np
import pytest

import moec
from conftest import torch_on_device
from test_fhmoe_routes import routed_ids_naming_e
from test_fused_moe import POISON, check_zero_rows, prepare_checkpoint, upload_all


def dtype_or_skip(torch, *names):
    """The torch dtypes `names`, or a skip naming the first one this torch
    lacks (a skip of that dtype only: torch itself is required)."""
    found = []
    for name in names:
        dtype = getattr(torch, name, None)
        if dtype is None:
            pytest.skip("torch %s has no torch.%s" % (torch.__version__, name))
        found.append(dtype)
    return found


def device_tensor(device, data, shape, dtype):
    """A torch CPU tensor of `dtype` (1-byte elements) over emulated device
    memory holding `data`'s bytes."""
    array = np.frombuffer(bytes(getattr(data, "data", data)), np.uint8).reshape(shape)
    return torch_on_device(device, array, dtype)


def test_fused_moe_fp4_weights_e8m0_scales(bundle_path, device, oracle, torch):
    """flash-tp4 through moec.fused_moe with W13 / W2 as
    torch.float4_e2m1fn_x2 and their scales as torch.float8_e8m0fnu, output
    poisoned, against the oracle (1/128 relative L2, conftest.TOLERANCE)."""
    fp4, e8m0 = dtype_or_skip(torch, "float4_e2m1fn_x2", "float8_e8m0fnu")
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 14
    o = oracle("tp", H, I, E, K, m, 51, interleave=0)
    a = o.arrays
    prepared = prepare_checkpoint(layer, a["w13"], a["w13_scale"], a["w2"], a["w2_scale"])
    w = {"w13": device_tensor(device, prepared["w13"], (E, 2 * I, H // 2), fp4),
         "w13_scale": device_tensor(device, prepared["w13_scale"], (E, 2 * I, H // 32), e8m0),
         "w2": device_tensor(device, prepared["w2"], (E, H, I // 2), fp4),
         "w2_scale": device_tensor(device, prepared["w2_scale"], (E, H, I // 32), e8m0)}
    hidden = torch_on_device(device, a["hidden_states"], torch.bfloat16)
    ids = torch_on_device(device, a["topk_ids"], torch.int32)
    weights = torch_on_device(device, a["topk_weights"], torch.float32)
    out = torch_on_device(device, np.full((m, H), 0xFFFF, np.uint16), torch.bfloat16)
    assert (w["w13"].dtype, w["w13_scale"].dtype) == (fp4, e8m0)
    result = moec.fused_moe(hidden, w["w13"], w["w2"], weights, ids, w1_scale=w["w13_scale"],
                            w2_scale=w["w2_scale"], out=out, layer=layer)
    device.synchronize()
    assert result is out
    bits = np.frombuffer(out._moec_buffer.download(), np.uint16).reshape(m, H)
    check_zero_rows(bits, a["topk_ids"], E)
    o.compare(bits)


@pytest.mark.skipif(not moec.has_weight_preparation(),
                    reason="the runtime has no moec_prepare_shared_expert")
def test_fhmoe_shared_expert_fp8_tensors(bundle_path, device, oracle, torch):
    """dsv4-pro-tp8 (FHMoE): the FP8 shared expert handed in as torch
    float8_e4m3fn weights with float8_e8m0fnu scales, prepared from torch
    host tensors with no moec.weights.tensor wrapper (byte-identical to the
    wrapped path) and bound as typed tensors over device memory; the
    output against the oracle. Seed 52 names E in a routed slot (token 7,
    slot 2), passed as generated: the layer and the oracle both count it
    invalid (test_fhmoe_routes.py)."""
    fp8, e8m0 = dtype_or_skip(torch, "float8_e4m3fn", "float8_e8m0fnu")
    layer = moec.Layer(moec.Bundle(bundle_path("dsv4_pro_tp8_fhmoe")), device)
    assert layer.shared_expert
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 13
    o = oracle("fhmoe", H, I, E, K, m, 52, interleave=0)
    assert routed_ids_naming_e(o.arrays["topk_ids"], E) == [(7, 2)]
    a = o.arrays
    names = ("shared_w13", "shared_w13_scale", "shared_w2", "shared_w2_scale")
    typed = [torch.from_numpy(np.ascontiguousarray(a[n])).view(fp8 if "scale" not in n else e8m0)
             for n in names]
    assert typed[0].dtype == fp8 and typed[1].dtype == e8m0
    prepared = moec.prepare_shared_expert(layer, *typed)
    t = moec.weights.tensor
    wrapped = moec.prepare_shared_expert(
        layer, *[t(a[n], a[n].shape, "float8_e8m0fnu" if "scale" in n else "float8_e4m3fn")
                 for n in names])
    for name in names:
        assert bytes(prepared[name].data) == bytes(wrapped[name].data), name
    shapes = layer.weight_layout().shapes()
    shared = {n: device_tensor(device, prepared[n], shapes[n], e8m0 if "scale" in n else fp8)
              for n in names}
    routed = upload_all(device, prepare_checkpoint(layer, a["w13"], a["w13_scale"], a["w2"],
                                                   a["w2_scale"]))
    layer.bind_weights(routed["w13"], routed["w13_scale"], routed["w2"], routed["w2_scale"],
                       **shared)
    inputs = upload_all(device, {k: a[k] for k in ("hidden_states", "topk_ids", "topk_weights")})
    out = device.alloc(m * H * 2)
    out.fill(POISON)
    layer.forward(m, inputs["hidden_states"], inputs["topk_ids"], inputs["topk_weights"], out)
    device.synchronize()
    bits = np.frombuffer(out.download(), np.uint16).reshape(m, H)
    assert not np.any(bits == 0xFFFF)
    o.compare(bits)


@pytest.mark.skipif(not moec.has_weight_preparation(),
                    reason="the runtime has no moec_prepare_expert_weights")
def test_prepare_expert_weights_typed_host_tensors(bundle_path, device, torch):
    """Checkpoint MXFP4 host tensors typed float4_e2m1fn_x2 / float8_e8m0fnu
    (what MegaMoE.finalize_weights(source="checkpoint") passes on) prepare
    to the same bytes as their uint8 bits; FP8 E4M3FN weights are refused
    naming the tensor."""
    fp4, e8m0, fp8 = dtype_or_skip(torch, "float4_e2m1fn_x2", "float8_e8m0fnu",
                                   "float8_e4m3fn")
    layout = _tp_layer(bundle_path, device).weight_layout()
    rng = np.random.default_rng(3)
    w13 = rng.integers(0, 256, (4, 1024, 256), dtype=np.uint8)
    w13s = rng.integers(118, 124, (4, 1024, 16), dtype=np.uint8)
    w2 = rng.integers(0, 256, (4, 512, 256), dtype=np.uint8)
    w2s = rng.integers(118, 124, (4, 512, 16), dtype=np.uint8)
    expected = moec.prepare_expert_weights(layout, w13, w13s, w2, w2s)
    typed = [torch.from_numpy(x).view(d) for x, d in ((w13, fp4), (w13s, e8m0), (w2, fp4),
                                                       (w2s, e8m0))]
    prepared = moec.prepare_expert_weights(layout, *typed)
    for name in ("w13", "w13_scale", "w2", "w2_scale"):
        assert bytes(prepared[name].data) == bytes(expected[name].data), name
    with pytest.raises(moec.MoecError) as error:
        moec.prepare_expert_weights(layout, torch.from_numpy(w13).view(fp8), *typed[1:])
    assert error.value.status_name == "MOEC_STATUS_INVALID_ARGUMENT"
    assert "w13" in error.value.message


# ---- refusals ---------------------------------------------------------------------

def _tp_layer(bundle_path, device):
    from test_fused_moe import _tp_layer as layer_of
    return layer_of(bundle_path, device)


def _tensors(torch, layer, m):
    """CPU tensors of fused_moe's shapes and dtypes (refused before any
    launch, so they need not be device memory)."""
    H, I, E, K = layer.hidden, layer.intermediate, layer.experts, layer.top_k
    return {"hidden_states": torch.zeros((m, H), dtype=torch.bfloat16),
            "w1": torch.zeros((E, 2 * I, H // 2), dtype=torch.uint8),
            "w2": torch.zeros((E, H, I // 2), dtype=torch.uint8),
            "topk_weight": torch.zeros((m, K), dtype=torch.float32),
            "topk_ids": torch.zeros((m, K), dtype=torch.int32),
            "w1_scale": torch.zeros((E, 2 * I, H // 32), dtype=torch.uint8),
            "w2_scale": torch.zeros((E, H, I // 32), dtype=torch.uint8)}


def _refused(layer, what, **arguments):
    before = layer.read_status()[1]
    with pytest.raises(moec.MoecError) as error:
        moec.fused_moe(arguments.pop("hidden_states"), arguments.pop("w1"),
                       arguments.pop("w2"), arguments.pop("topk_weight"),
                       arguments.pop("topk_ids"), layer=layer, **arguments)
    assert error.value.what == what, str(error.value)
    assert error.value.status_name == "MOEC_STATUS_INVALID_ARGUMENT"
    assert layer.read_status()[1] == before  # nothing launched
    return error.value


@pytest.mark.parametrize("name, dtype", [("w1_scale", "float32"), ("w2_scale", "bfloat16"),
                                         ("w1", "int8"), ("hidden_states", "float16")])
def test_wrong_dtype_refused_by_name(bundle_path, device, torch, name, dtype):
    layer = _tp_layer(bundle_path, device)
    arguments = _tensors(torch, layer, 3)
    arguments[name] = arguments[name].to(getattr(torch, dtype))
    error = _refused(layer, name, **arguments)
    assert "torch.%s is not supported" % dtype in error.message


def test_bind_weights_refuses_wrong_dtype(bundle_path, device, torch):
    layer = _tp_layer(bundle_path, device)
    with pytest.raises(moec.MoecError) as error:
        layer.bind_weights(w13=1 << 20, w13_scale=torch.zeros(4, dtype=torch.float32),
                           w2=1 << 20, w2_scale=1 << 20)
    assert error.value.what == "w13_scale"
    assert "torch.uint8 or torch.float8_e8m0fnu" in error.value.message


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2"])
def test_prequantised_fp8_activations_refused(bundle_path, device, torch, name):
    """AITER's a8w4 path can take FP8 hidden states with a1_scale; moec's
    layers quantise BF16 rows on the device and take no pre-quantised
    rows: fused_moe and experts_forward refuse them naming hidden_states,
    with that reason, before anything is launched."""
    fp8, = dtype_or_skip(torch, name)
    layer = _tp_layer(bundle_path, device)
    arguments = _tensors(torch, layer, 3)
    arguments["hidden_states"] = arguments["hidden_states"].to(torch.float32).to(fp8)
    error = _refused(layer, "hidden_states", **arguments)
    assert "pre-quantised" in error.message and "BF16" in error.message
    with pytest.raises(moec.MoecError) as error:
        moec.experts_forward(layer, arguments["hidden_states"], arguments["topk_ids"],
                             arguments["topk_weight"])
    assert error.value.what == "hidden_states" and "pre-quantised" in error.value.message

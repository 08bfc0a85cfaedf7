"""moec.fused_moe and the layer API on the emulated device against the
oracle, one test per family at the shipped tables' small shapes (H = I =
512), plus weight preparation, refusals and errors."""

import numpy as np
import pytest

import moec
from conftest import bf16_to_float, torch_on_device

POISON = 0xFF  # outputs are poisoned before each forward: BF16 0xFFFF is NaN


def prepare_checkpoint(layer, w13, w13_scale, w2, w2_scale):
    """Checkpoint layout -> the layer's kernel layout (the runtime's
    moec_prepare_expert_weights when it has it, else Python's reordering)."""
    if moec.has_weight_preparation():
        return dict(moec.prepare_expert_weights(layer, w13, w13_scale, w2, w2_scale))
    E, I, H, G = w13.shape[0], layer.intermediate, layer.hidden, layer.gate_up_interleave
    il = moec.weights.interleave_gate_up
    return {"w13": il(w13.tobytes(), E, I, H // 2, G),
            "w13_scale": il(w13_scale.tobytes(), E, I, H // 32, G),
            "w2": w2.tobytes(), "w2_scale": w2_scale.tobytes()}


def upload_all(device, arrays):
    return {name: device.upload(np.ascontiguousarray(value) if isinstance(value, np.ndarray)
                                else value, name)
            for name, value in arrays.items()}


def run_fused_moe(device, status_layer, inputs, weights, m, H, **kwargs):
    """fused_moe with raw device pointers into a poisoned output; returns
    the output's BF16 bits [m, H]."""
    out = device.alloc(m * H * 2)
    out.fill(POISON)
    forwards_before = status_layer.read_status()[1]
    result = moec.fused_moe(int(inputs["hidden_states"]), int(weights["w13"]),
                            int(weights["w2"]), int(inputs["topk_weights"]),
                            int(inputs["topk_ids"]), w1_scale=int(weights["w13_scale"]),
                            w2_scale=int(weights["w2_scale"]), m=m, out=int(out), **kwargs)
    assert result == int(out)
    device.synchronize()
    overflow, forwards = status_layer.read_status()
    assert overflow == 0 and forwards == forwards_before + 1
    bits = np.frombuffer(out.download(), dtype=np.uint16).reshape(m, H)
    return bits


def check_zero_rows(bits, ids, experts):
    """Tokens without a valid route come out exactly zero; nothing is left
    poisoned."""
    assert not np.any(bits == 0xFFFF), "output elements left unwritten"
    no_route = ~np.any((ids >= 0) & (ids < experts), axis=1)
    assert np.all(bits[no_route] == 0)


def test_tp_checkpoint_weights_raw_pointers(bundle_path, device, oracle):
    """flash-tp4 (backbone top-6 -> 4 at the small shape) and its draft
    network in one bundle; moec.use picks the layer by shape."""
    bundle = moec.Bundle(bundle_path("flash_tp4"))
    backbone = moec.Layer(bundle, device, "flash-tp4")
    draft = moec.Layer(bundle, device, "flash-tp4-draft")
    assert (backbone.top_k, draft.top_k) == (4, 3) and backbone.gate_up_interleave == 16
    with moec.use(backbone, draft):
        for layer, m, seed in ((backbone, 37, 3), (draft, 9, 4)):
            H, I, E, K = layer.hidden, layer.intermediate, layer.experts, layer.top_k
            o = oracle("tp", H, I, E, K, m, seed, interleave=0, swiglu=layer.swiglu_limit)
            a = o.arrays
            weights = upload_all(device, prepare_checkpoint(
                layer, a["w13"], a["w13_scale"], a["w2"], a["w2_scale"]))
            inputs = upload_all(device, {k: a[k] for k in ("hidden_states", "topk_ids",
                                                             "topk_weights")})
            # Raw pointers carry no shapes: with two layers in use, layer= is needed.
            with pytest.raises(moec.MoecError) as error:
                run_fused_moe(device, layer, inputs, weights, m, H)
            assert error.value.what == "layer"
            bits = run_fused_moe(device, layer, inputs, weights, m, H, layer=layer)
            check_zero_rows(bits, a["topk_ids"], E)
            rel = o.compare(bits)
            assert rel < 0.01  # measured ~2e-3
            assert layer.last_forward()[1] == 5  # quant, sort, W13, W2, combine


def test_fhmoe_shared_expert(bundle_path, device, oracle):
    """dsv4-pro-tp8 (FHMoE): routed experts plus the FP8 shared expert,
    which the layer appends to every token."""
    layer = moec.Layer(moec.Bundle(bundle_path("dsv4_pro_tp8_fhmoe")), device)
    assert layer.shared_expert
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 20
    o = oracle("fhmoe", H, I, E, K, m, 5, interleave=0)
    a = o.arrays
    weights = upload_all(device, prepare_checkpoint(layer, a["w13"], a["w13_scale"], a["w2"],
                                                    a["w2_scale"]))
    if moec.has_weight_preparation():
        t = moec.weights.tensor
        shared = moec.prepare_shared_expert(
            layer, t(a["shared_w13"], a["shared_w13"].shape, "float8_e4m3fn"),
            t(a["shared_w13_scale"], a["shared_w13_scale"].shape, "float8_e8m0fnu"),
            t(a["shared_w2"], a["shared_w2"].shape, "float8_e4m3fn"),
            t(a["shared_w2_scale"], a["shared_w2_scale"].shape, "float8_e8m0fnu"))
    else:
        il = moec.weights.interleave_gate_up
        G = layer.gate_up_interleave
        shared = {"shared_w13": il(a["shared_w13"].tobytes(), 1, I, H, G),
                  "shared_w13_scale": il(a["shared_w13_scale"].tobytes(), 1, I, H // 32, G),
                  "shared_w2": a["shared_w2"], "shared_w2_scale": a["shared_w2_scale"]}
    shared = upload_all(device, shared)
    inputs = upload_all(device, {k: a[k] for k in ("hidden_states", "topk_ids", "topk_weights")})
    # FHMoE needs its shared expert bound before the first forward.
    with pytest.raises(moec.MoecError) as error:
        run_fused_moe(device, layer, inputs, weights, m, H, layer=layer)
    assert error.value.what == "shared_w13"
    layer.bind_weights(weights["w13"], weights["w13_scale"], weights["w2"], weights["w2_scale"],
                       **shared)
    with moec.use(layer):
        bits = run_fused_moe(device, layer, inputs, weights, m, H)
    assert not np.any(bits == 0xFFFF)
    o.compare(bits)


def test_megamoe_unfused_expert_parallel(bundle_path, device, oracle):
    """flash at EP2 (unfused, clamp-10 SwiGLU, gate rows then up rows): one
    layer per rank on the one device, each binding its 4 of the 8 experts;
    the ranks' partial outputs sum to the layer."""
    bundle = moec.Bundle(bundle_path("flash_ep2"))
    ranks = [moec.Layer(bundle, device, "flash", ep=2, ep_rank=r) for r in range(2)]
    layer0 = ranks[0]
    H, I, E, K, m = layer0.hidden, layer0.intermediate, layer0.experts, layer0.top_k, 24
    assert (E, layer0.local_experts, layer0.swiglu_limit) == (8, 4, 10.0)
    o = oracle("tp", H, I, E, K, m, 6, interleave=0, swiglu=layer0.swiglu_limit)
    a = o.arrays
    inputs = upload_all(device, {k: a[k] for k in ("hidden_states", "topk_ids", "topk_weights")})
    total = np.zeros((m, H), dtype=np.float32)
    for layer in ranks:
        first, count = layer.ep_rank * layer.local_experts, layer.local_experts
        local = {k: a[k][first:first + count] for k in ("w13", "w13_scale", "w2", "w2_scale")}
        weights = upload_all(device, prepare_checkpoint(
            layer, local["w13"], local["w13_scale"], local["w2"], local["w2_scale"]))
        # The clamp as AITER's keyword (absent: AITER's SiLU has none).
        bits = run_fused_moe(device, layer, inputs, weights, m, H, layer=layer,
                             swiglu_limit=layer.swiglu_limit)
        assert not np.any(bits == 0xFFFF)
        total += bf16_to_float(bits)
    o.compare(total.astype(np.float32))


# ---- AITER-prepared weights ---------------------------------------------------
# AITER's preparation of MXFP4 expert weights, written from its algorithms
# (aiter/ops/shuffle.py, aiter/utility/fp4_utils.py) in NumPy.

def aiter_shuffle_weight_16x16(w):
    """shuffle_weight(w, layout=(16, 16)) for 1-byte elements."""
    E, N, K = w.shape
    x = w.reshape(E, N // 16, 16, K // 32, 2, 16)
    return np.ascontiguousarray(x.transpose(0, 1, 3, 4, 2, 5)).reshape(E, N, K)


def aiter_e8m0_shuffle(s):
    """e8m0_shuffle (shuffle_scale without the gate/up interleave) of [rows, cols]."""
    m, n = s.shape
    padded = np.zeros(((m + 255) // 256 * 256, (n + 7) // 8 * 8), dtype=s.dtype)
    padded[:m, :n] = s
    sm, sn = padded.shape
    x = padded.reshape(sm // 32, 2, 16, sn // 8, 2, 4)
    return np.ascontiguousarray(x.transpose(0, 3, 5, 2, 4, 1)).reshape(sm, sn)


def aiter_shuffle_weight_a16w4(w, gate_up):
    """shuffle_weight(w, layout=(16, 16), is_guinterleave=True, gate_up)."""
    E, N, K = w.shape
    if gate_up:
        N //= 2
    N0, K0 = N // 16, K // (4 * 16)
    if gate_up:
        x = w.reshape(E, 2, N0, 16, K0, 4, 16).transpose(0, 2, 1, 4, 5, 3, 6)
    else:
        x = w.reshape(E, N0, 16, K0, 4, 16).transpose(0, 1, 3, 4, 2, 5)
    return np.ascontiguousarray(x).reshape(w.shape)


def aiter_shuffle_scale_a16w4(s, experts, gate_up):
    """shuffle_scale(s [E * N, K/32], experts, is_guinterleave=True, gate_up)."""
    rows, k = s.shape
    n = rows // experts
    K1, N1 = k // 8, n // 32
    x = s.reshape(experts, 2, N1, 16, K1, 2, 4) if gate_up else \
        s.reshape(experts, N1, 2, 16, K1, 2, 4)
    x = x.transpose(0, 2, 4, 6, 3, 5, 1) if gate_up else x.transpose(0, 1, 4, 6, 3, 5, 2)
    return np.ascontiguousarray(x).reshape(rows, k)


def aiter_prepare(source, w13, w13_scale, w2, w2_scale):
    E = w13.shape[0]
    flat = lambda s: s.reshape(-1, s.shape[-1])  # noqa: E731
    if source == "aiter_preshuffle_16x16":
        return (aiter_shuffle_weight_16x16(w13), aiter_e8m0_shuffle(flat(w13_scale)),
                aiter_shuffle_weight_16x16(w2), aiter_e8m0_shuffle(flat(w2_scale)))
    gate_up = source == "aiter"
    return (aiter_shuffle_weight_a16w4(w13, gate_up),
            aiter_shuffle_scale_a16w4(flat(w13_scale), E, gate_up),
            aiter_shuffle_weight_a16w4(w2, False),
            aiter_shuffle_scale_a16w4(flat(w2_scale), E, False))


@pytest.mark.skipif(not moec.has_weight_preparation(),
                    reason="the runtime has no moec_prepare_expert_weights")
@pytest.mark.parametrize("source", ["aiter", "aiter_a16w4", "aiter_preshuffle_16x16"])
def test_aiter_prepared_weights(bundle_path, device, oracle, source):
    """Weights an engine prepared for aiter.fused_moe give the same kernel
    layout as the checkpoint, byte for byte, and the oracle's output."""
    if source not in moec.weights.SOURCES:
        pytest.skip("the runtime's header has no %s source" % source)
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 17
    o = oracle("tp", H, I, E, K, m, 8, interleave=0)
    a = o.arrays
    expected = moec.prepare_expert_weights(layer, a["w13"], a["w13_scale"], a["w2"],
                                           a["w2_scale"])
    aiter = aiter_prepare(source, a["w13"], a["w13_scale"], a["w2"], a["w2_scale"])
    for tensor, original in zip(aiter, ("w13", "w13_scale", "w2", "w2_scale")):
        assert tensor.nbytes >= a[original].nbytes
    prepared = moec.prepare_expert_weights(layer, *aiter, source=source)
    for name in ("w13", "w13_scale", "w2", "w2_scale"):
        assert bytes(prepared[name].data) == bytes(expected[name].data), name
    weights = upload_all(device, dict(prepared))
    inputs = upload_all(device, {k: a[k] for k in ("hidden_states", "topk_ids", "topk_weights")})
    o.compare(run_fused_moe(device, layer, inputs, weights, m, H, layer=layer))


@pytest.mark.skipif(not moec.has_weight_preparation(),
                    reason="the runtime has no moec_prepare_expert_weights")
def test_prepare_checks_shapes_and_matches_python(bundle_path, device):
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    layout = layer.weight_layout()
    assert (layout.hidden, layout.intermediate, layout.experts,
            layout.gate_up_interleave) == (512, 512, 4, 16)
    sizes = moec.weight_sizes(layout)
    assert sizes["w13"] == 4 * 1024 * 256 and sizes["w2_scale"] == 4 * 512 * 16
    rng = np.random.default_rng(1)
    w13 = rng.integers(0, 256, (4, 1024, 256), dtype=np.uint8)
    w13s = rng.integers(118, 124, (4, 1024, 16), dtype=np.uint8)
    w2 = rng.integers(0, 256, (4, 512, 256), dtype=np.uint8)
    w2s = rng.integers(118, 124, (4, 512, 16), dtype=np.uint8)
    prepared = moec.prepare_expert_weights(layout, w13, w13s, w2, w2s, threads=2)
    il = moec.weights.interleave_gate_up
    assert bytes(prepared["w13"].data) == bytes(il(w13.tobytes(), 4, 512, 256, 16))
    assert bytes(prepared["w13_scale"].data) == bytes(il(w13s.tobytes(), 4, 512, 16, 16))
    assert bytes(prepared["w2"].data) == w2.tobytes()
    with pytest.raises(moec.MoecError) as error:
        moec.prepare_expert_weights(layout, np.ascontiguousarray(w13[:, :, :128]), w13s,
                                    w2, w2s)
    assert error.value.status_name == "MOEC_STATUS_INVALID_ARGUMENT"
    assert "w13" in error.value.message


# ---- torch tensors (only where torch is installed) -------------------------------

def test_torch_tensors(bundle_path, device, oracle, torch):
    """torch CPU tensors over emulated device memory (the emulated device's
    allocations are host memory): fused_moe takes their data_ptr and shapes.
    W13 and W2 are torch.float4_e2m1fn_x2 where torch has it, else uint8."""
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 12
    o = oracle("tp", H, I, E, K, m, 9, interleave=0)
    a = o.arrays
    packed = getattr(torch, "float4_e2m1fn_x2", torch.uint8)
    prepared = prepare_checkpoint(layer, a["w13"], a["w13_scale"], a["w2"], a["w2_scale"])
    w = {n: torch_on_device(device, np.frombuffer(bytes(getattr(v, "data", v)),
                                                  np.uint8).reshape(shape),
                            packed if n in ("w13", "w2") else torch.uint8)
         for (n, v), shape in zip(prepared.items(), ((E, 2 * I, H // 2), (E, 2 * I, H // 32),
                                                    (E, H, I // 2), (E, H, I // 32)))}
    hidden = torch_on_device(device, a["hidden_states"], torch.bfloat16)
    ids = torch_on_device(device, a["topk_ids"], torch.int32)
    weights = torch_on_device(device, a["topk_weights"], torch.float32)
    out = torch_on_device(device, np.full((m, H), 0xFFFF, np.uint16), torch.bfloat16)
    with moec.use(layer):
        result = moec.fused_moe(hidden, w["w13"], w["w2"], weights, ids, w1_scale=w["w13_scale"],
                                w2_scale=w["w2_scale"], out=out)
    device.synchronize()
    assert result is out
    bits = np.frombuffer(out._moec_buffer.download(), np.uint16).reshape(m, H)
    o.compare(bits)


# ---- refusals and errors -------------------------------------------------------------

UNSUPPORTED = [
    ("expert_mask", object()), ("activation", 2), ("activation", "Gelu"), ("quant_type", 0),
    ("quant_type", 4), ("doweight_stage1", True), ("a1_scale", 1 << 20), ("a2_scale", 1 << 20),
    ("block_size_M", 32), ("num_local_tokens", 1 << 20), ("moe_sorting_dispatch_policy", 1),
    ("dtype", "torch.float16"), ("hidden_pad", 64), ("intermediate_pad", 64),
    ("bias1", 1 << 20), ("bias2", 1 << 20), ("splitk", 2),
]


@pytest.mark.parametrize("name,value", UNSUPPORTED, ids=["%s=%r" % (n, v) for n, v in UNSUPPORTED])
def test_unsupported_argument_refused_by_name(bundle_path, device, name, value):
    layer = _tp_layer(bundle_path, device)
    before = layer.read_status()[1]
    with pytest.raises(moec.MoecError) as error:
        moec.fused_moe(1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, w1_scale=1 << 20,
                       w2_scale=1 << 20, m=1, out=1 << 20, layer=layer, **{name: value})
    assert error.value.what == name
    assert str(error.value).startswith(name + ": MOEC_STATUS_INVALID_ARGUMENT")
    assert layer.read_status()[1] == before  # nothing was launched


def test_supported_aiter_values_accepted(bundle_path, device):
    """AITER's enum members (by value or name) for what moec does run."""
    class QuantType:
        name, value = "per_1x32", 3

    class ActivationType:
        name, value = "Silu", 0
    from moec.fused import _check_activation, _refuse_unsupported
    _refuse_unsupported(QuantType(), False, None, None, None, None, 0, None, 0, 0, 0)
    layer = _tp_layer(bundle_path, device)
    assert layer.activation == "silu"
    for activation in (ActivationType(), 0, "Silu", None):
        _check_activation(layer, activation)


_layers = {}


def _tp_layer(bundle_path, device):
    if "tp" not in _layers:
        _layers["tp"] = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    return _layers["tp"]


def test_errors_carry_status_and_message(bundle_path, device, tmp_path):
    with pytest.raises(moec.MoecError) as error:
        moec.Bundle(str(tmp_path / "missing.moeb"))
    assert error.value.status_name == "MOEC_STATUS_IO_ERROR" and error.value.message
    bundle = moec.Bundle(bundle_path("flash_tp4"))
    with pytest.raises(moec.MoecError) as error:
        bundle.resolve_table("no-such-network", 1, 0)
    assert error.value.status_name == "MOEC_STATUS_NOT_FOUND"
    assert "no-such-network" in str(error.value)
    layer = _tp_layer(bundle_path, device)
    with pytest.raises(moec.MoecError) as error:  # m above the layer's capacity
        layer.forward(layer.max_tokens + 1, 1 << 20, 1 << 20, 1 << 20, 1 << 20)
    assert error.value.status_name == "MOEC_STATUS_INVALID_ARGUMENT"
    with pytest.raises(moec.MoecError) as error:
        moec.fused_moe(1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, w1_scale=1 << 20,
                       w2_scale=1 << 20, layer=layer)
    assert error.value.what == "m"
    with pytest.raises(moec.MoecError) as error:
        moec.fused_moe(1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, w2_scale=1 << 20, m=1,
                       layer=layer)
    assert error.value.what == "w1_scale"


def test_layer_with_biases(workdir, device, oracle):
    """A GPT-OSS table whose W13 and W2 take AITER's per-expert FP32 biases
    (test/lit/Tools/Inputs/bias.table, network gptoss): Layer.bind_bias
    binds them, the layer refuses its weights without them, and the output
    matches the oracle given the same biases (and not the oracle without)."""
    import os
    from conftest import ROOT, run
    path = os.path.join(workdir, "bias.moeb")
    status, text = run("compile", "-q", os.path.join(ROOT, "test", "lit", "Tools", "Inputs",
                                                     "bias.table"), "-o", path)
    assert status == 0, text
    layer = moec.Layer(moec.Bundle(path), device, "gptoss")
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 12
    o = oracle("tp", H, I, E, K, m, 6, interleave=0, swiglu=7, activation="gpt-oss-swiglu")
    a = o.arrays
    rng = np.random.default_rng(11)
    w13_bias = rng.normal(size=(E, 2 * I)).astype(np.float32)
    w2_bias = rng.normal(size=(E, H)).astype(np.float32)
    weights = upload_all(device, prepare_checkpoint(
        layer, a["w13"], a["w13_scale"], a["w2"], a["w2_scale"]))
    inputs = upload_all(device, {k: a[k] for k in ("hidden_states", "topk_ids", "topk_weights")})
    with pytest.raises(moec.MoecError) as error:
        layer.bind_weights(weights["w13"], weights["w13_scale"], weights["w2"],
                           weights["w2_scale"])
    assert "bias" in str(error.value)
    biases = upload_all(device, {"w13_bias": w13_bias, "w2_bias": w2_bias})
    layer.bind_bias(biases["w13_bias"], biases["w2_bias"])
    layer.bind_weights(weights["w13"], weights["w13_scale"], weights["w2"], weights["w2_scale"])
    out = device.alloc(m * H * 2)
    out.fill(POISON)
    layer.forward(m, inputs["hidden_states"], inputs["topk_ids"], inputs["topk_weights"], out)
    device.synchronize()
    bits = np.frombuffer(out.download(), dtype=np.uint16).reshape(m, H)
    assert not np.any(bits == 0xFFFF)
    # Without the biases the oracle is far off; with them (moec reference
    # reads w13_bias.npy and w2_bias.npy next to the inputs) it agrees.
    for name in ("w13_bias.npy", "w2_bias.npy"):
        if os.path.exists(os.path.join(o.directory, "in", name)):
            os.remove(os.path.join(o.directory, "in", name))
    with pytest.raises(AssertionError):
        o.compare(bits, tag="no-bias")
    moec.npy.save(os.path.join(o.directory, "in", "w13_bias.npy"), w13_bias)
    moec.npy.save(os.path.join(o.directory, "in", "w2_bias.npy"), w2_bias)
    assert o.compare(bits) < 0.01

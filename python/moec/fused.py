"""moec.fused_moe: aiter.fused_moe's call, run by a moec layer."""

import ctypes
import math
import os
import struct
import threading

from ._capi import invalid
from .runtime import DeviceBuffer, Layer, check_weight_dtype, pointer_of

__all__ = ["fused_moe", "use", "current_layers"]

# AITER's enums (aiter/ops/enum.py, csrc/include/aiter_enum.h).
_ACTIVATIONS = {"No": -1, "Silu": 0, "Gelu": 1, "Swiglu": 2, "Situv2": 3}
_QUANT_TYPES = {"No": 0, "per_Tensor": 1, "per_Token": 2, "per_1x32": 3, "per_1x128": 4,
                "per_128x128": 5}
_QUANT_PER_1X32 = 3
# Layer.activation -> the ActivationType whose function its W13 kernels
# compute (aiter.fused_moe's default, None, is Silu).
_LAYER_ACTIVATIONS = {"silu": _ACTIVATIONS["Silu"], "gpt-oss-swiglu": _ACTIVATIONS["Swiglu"],
                      "situ-v2": _ACTIVATIONS["Situv2"]}

_lock = threading.Lock()
_default_layers = []


class _Using:
    """What moec.use returns: also a context manager restoring the previous
    default layers on exit."""

    def __init__(self, previous):
        self._previous = previous

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        with _lock:
            _default_layers[:] = self._previous


def use(*layers):
    """Makes `layers` the ones moec.fused_moe picks from when called
    without layer=. A call takes the first whose (hidden, intermediate,
    experts of this rank, top_k) match its tensors' shapes (raw pointers:
    there must be exactly one). `with moec.use(layer): ...` restores the
    previous set afterwards; moec.use() clears it."""
    for i, layer in enumerate(layers):
        if not isinstance(layer, Layer):
            raise invalid("use(layers[%d])" % i, "expected a moec.Layer, got %s" %
                          type(layer).__name__)
    with _lock:
        previous = list(_default_layers)
        _default_layers[:] = layers
    return _Using(previous)


def current_layers():
    with _lock:
        return list(_default_layers)


def _enum_value(value, what, names):
    """An AITER enum member, its int value or its name -> int value."""
    if value is None:
        return None
    name = getattr(value, "name", None)
    if name is not None and name in names:
        return names[name]
    if isinstance(value, str) and value in names:
        return names[value]
    try:
        return int(getattr(value, "value", value))
    except (TypeError, ValueError):
        raise invalid(what, "unrecognised value %r" % (value,))


def _is_tensor(value):
    return hasattr(value, "data_ptr") and hasattr(value, "shape") and hasattr(value, "dtype")


def _shape(value):
    return tuple(int(d) for d in value.shape) if _is_tensor(value) else None


def _check_dtype(value, what, allowed):
    if _is_tensor(value) and str(value.dtype) not in allowed:
        raise invalid(what, "dtype %s is not supported (expected %s)" %
                      (value.dtype, " or ".join(allowed)))


_FP8_ACTIVATIONS = ("torch.float8_e4m3fn", "torch.float8_e4m3fnuz", "torch.float8_e5m2",
                    "torch.float8_e5m2fnuz")
# AITER's q_dtype_a of an A4W4 call (dtypes.fp4x2).
_FP4_ACTIVATIONS = ("torch.float4_e2m1fn_x2",)


def _refuse_prequantised(value, what):
    """Pre-quantised FP8 rows (AITER's a8w4 path with a1_scale) are not
    an input of moec's layers: their first kernel quantises BF16 rows to
    FP8 1x32 on the device (or, A16W4, W13 reads the BF16 rows). Refused
    naming the argument, with that reason."""
    if _is_tensor(value) and str(value.dtype) in _FP8_ACTIVATIONS + _FP4_ACTIVATIONS:
        raise invalid(what, "%s rows are pre-quantised activations, which moec's layers do "
                      "not take: the layer's first kernel quantises BF16 rows to its "
                      "activation format (FP8 for A8W4, MXFP4 for A4W4) with E8M0 1x32 "
                      "scales on the device, or W13 reads them as they are (A16W4); pass "
                      "the BF16 rows (and no a1_scale)" % value.dtype)


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _activation_name(value):
    return {v: "ActivationType.%s" % k for k, v in _ACTIVATIONS.items()}.get(value, repr(value))


def _refuse_unsupported(quant_type, doweight_stage1, a1_scale, a2_scale, block_size_M,
                        num_local_tokens, moe_sorting_dispatch_policy, dtype, hidden_pad,
                        intermediate_pad, splitk):
    """The aiter.fused_moe arguments moec refuses whatever the layer."""
    quant = _enum_value(quant_type, "quant_type", _QUANT_TYPES)
    if quant not in (None, _QUANT_PER_1X32):
        raise invalid("quant_type", "%r is not supported: moec runs MXFP4 weights with E8M0 "
                      "1x32 scales (QuantType.per_1x32) and quantises the activations "
                      "itself, per 1x32, to the layer's format (FP8 for A8W4 tables, "
                      "MXFP4 for A4W4; A16W4 tables read them as BF16)" % (quant_type,))
    if doweight_stage1:
        raise invalid("doweight_stage1", "not supported: moec's kernels apply the routing "
                      "weight once, to each route's W2 output in the combine; AITER's "
                      "doweight_stage1 applies it in stage 1 (W13), before the intermediate "
                      "is quantised to FP8, which no moec kernel does, and moving it would "
                      "round differently; pass False (for top_k = 1 an engine may scale "
                      "hidden_states itself and pass ones, as SGLang's AITER runner does)")
    for name, value in (("a1_scale", a1_scale), ("a2_scale", a2_scale),
                        ("num_local_tokens", num_local_tokens)):
        if value is not None:
            reason = {"a1_scale": "moec quantises the input on the device (per 1x32)",
                      "a2_scale": "moec quantises the intermediate on the device (per 1x32)",
                      "num_local_tokens": "moec takes the token count from hidden_states "
                                          "(or m=) and ids of -1 for padding rows"}[name]
            raise invalid(name, "not supported: %s; pass None" % reason)
    if block_size_M not in (None, -1, 0):
        raise invalid("block_size_M", "not supported: the bundle's selection table picks the "
                      "tiles for each M; pass None")
    if moe_sorting_dispatch_policy not in (0, False, None):
        raise invalid("moe_sorting_dispatch_policy", "not supported: pass 0")
    if dtype is not None and str(dtype) not in ("torch.bfloat16", "bfloat16"):
        raise invalid("dtype", "%s is not supported: moec writes BF16" % (dtype,))
    for name, value in (("hidden_pad", hidden_pad), ("intermediate_pad", intermediate_pad),
                        ("splitk", splitk)):
        if value not in (0, None):
            reason = {"hidden_pad": "the layer's hidden size is as compiled",
                      "intermediate_pad": "moec.prepare_expert_weights pads the intermediate "
                                          "as the table was compiled",
                      "splitk": "the selection table picks split-K"}[name]
            raise invalid(name, "not supported (%r): %s; pass 0" % (value, reason))


def _check_activation(layer, activation):
    """The call's ActivationType must be the one the layer's W13 kernels
    compute: moec never runs a table as another activation."""
    wanted = _enum_value(activation, "activation", _ACTIVATIONS)
    if wanted is None:
        wanted = _ACTIVATIONS["Silu"]  # aiter.fused_moe's default
    served = _LAYER_ACTIVATIONS.get(layer.activation)
    if wanted != served:
        raise invalid("activation", "%s (%r) is not what the layer serves: %r computes %s%s; "
                      "moec never runs a table as another activation" %
                      (_activation_name(wanted), activation, layer,
                       _activation_name(served) if served is not None else
                       "different activations in different rows",
                       " (%s)" % layer.activation if served is not None else ""))


def _aiter_activation_format(activation, m):
    """The format aiter.fused_moe quantises the tokens to (its q_dtype_a) for
    a QuantType.per_1x32 call with MXFP4 weights on gfx950, gate and up rows
    separate (GateMode.SEPARATED, its default): _fused_moe_impl in
    aiter/fused_moe.py picks, for
      - ActivationType.Situv2: fp8 when $AITER_SITUV2_A8W4 is "1", else fp4
        when $AITER_SITUV2_A4W4 is "1", else bf16 (a16w4);
      - ActivationType.Swiglu: bf16 below M = $GPTOSS_SWIGLU_MXFP4_BF16_BOUND
        (default 256), else fp4;
      - ActivationType.Silu (and the rest): fp4.
    Returns (format, the reason in words)."""
    value = _enum_value(activation, "activation", _ACTIVATIONS)
    value = _ACTIVATIONS["Silu"] if value is None else value
    if value == _ACTIVATIONS["Situv2"]:
        if os.environ.get("AITER_SITUV2_A8W4", "0") == "1":
            return "fp8", "ActivationType.Situv2 with AITER_SITUV2_A8W4=1"
        if os.environ.get("AITER_SITUV2_A4W4", "0") == "1":
            return "fp4", "ActivationType.Situv2 with AITER_SITUV2_A4W4=1"
        return "bf16", ("ActivationType.Situv2 without AITER_SITUV2_A4W4=1 (nor "
                        "AITER_SITUV2_A8W4=1)")
    if value == _ACTIVATIONS["Swiglu"]:
        bound = int(os.environ.get("GPTOSS_SWIGLU_MXFP4_BF16_BOUND", "256"))
        return ("bf16" if m < bound else "fp4"), (
            "ActivationType.Swiglu at M = %d, %s GPTOSS_SWIGLU_MXFP4_BF16_BOUND = %d" %
            (m, "below" if m < bound else "at or above", bound))
    return "fp4", _activation_name(value)


_Q_DTYPE_A = {"fp4": "torch.float4_e2m1fn_x2", "fp8": "torch.float8_e4m3fn",
              "bf16": "torch.bfloat16"}
# The layer's activation format (Layer.a_format) -> its name and tokens.
_FORMAT_TABLES = {"fp4": "an A4W4 table (MXFP4 tokens",
                  "bf16": "an A16W4 table (BF16 tokens, no quant kernel"}


def _check_activation_format(layer, activation, m):
    """An A4W4 layer (MXFP4 tokens) or an A16W4 layer (BF16 tokens into
    W13) serves exactly the calls aiter.fused_moe itself runs in its
    format (_aiter_activation_format), and refuses the others naming why:
    moec never runs an A4W4 table where AITER would take BF16 or FP8
    tokens, nor an A16W4 table where it would quantise them. A8W4 layers
    quantise to FP8 whatever the call, as before (docs/python.md)."""
    served = getattr(layer, "a_format", None)
    if served not in _FORMAT_TABLES:
        return
    wanted, why = _aiter_activation_format(activation, m)
    if wanted == served:
        return
    what = "hidden_states" if why.startswith("ActivationType.Swiglu") else "activation"
    hint = ""
    if why.startswith("ActivationType.Situv2"):
        if served == "fp4":
            hint = (": set AITER_SITUV2_A4W4=1 (and not AITER_SITUV2_A8W4), as an engine "
                    "serving AITER's kimik3_a4w4 table does")
        else:
            hint = (": unset AITER_SITUV2_A4W4 and AITER_SITUV2_A8W4, as an engine serving "
                    "AITER's kimik3_fp4 (a16w4) table does")
    raise invalid(what, "%s: aiter.fused_moe quantises the tokens to %s (q_dtype_a %s), but "
                  "%r is %s, q_dtype_a %s)%s" %
                  (why, wanted.upper(), _Q_DTYPE_A[wanted], layer, _FORMAT_TABLES[served],
                   _Q_DTYPE_A[served], hint))


def _host_values(tensor, what):
    """A small tensor's values as a list of ints (torch, NumPy or a
    sequence); a device tensor is copied to the host."""
    if hasattr(tensor, "detach"):
        return [int(v) for v in tensor.detach().to("cpu").reshape(-1).tolist()]
    if hasattr(tensor, "tolist"):
        return [int(v) for v in tensor.reshape(-1).tolist()]
    if isinstance(tensor, (list, tuple)):
        return [int(v) for v in tensor]
    raise invalid(what, "expected a tensor of 0/1 per global expert (AITER's expert_mask), "
                  "got %s: a device pointer carries no length" % type(tensor).__name__)


_mask_cache = {}


def _expert_mask_placement(layer, expert_mask):
    """vLLM's expert_mask (determine_expert_map(..., return_expert_mask=True):
    int32 [global experts + fused shared experts + 1], 1 for the experts of
    this EP rank, the last entry 0) checked against the layer. Returns None
    when the mask selects the layer's own block of experts (topk_ids pass
    unchanged), or the mask's local experts in order when they are vLLM's
    round-robin placement of the layer's rank (topk_ids are renumbered)."""
    key = (id(layer), id(expert_mask), getattr(expert_mask, "_version", None))
    if key in _mask_cache:
        return _mask_cache[key][2]
    mask = _host_values(expert_mask, "expert_mask")
    E, L, ep, rank = layer.experts, layer.local_experts, layer.ep, layer.ep_rank
    if len(mask) < E:
        raise invalid("expert_mask", "%d entries, but the layer routes %d experts (%r)" %
                      (len(mask), E, layer))
    extra = [i for i in range(E, len(mask)) if mask[i]]
    if extra:
        raise invalid("expert_mask", "marks ids %s beyond the layer's %d routed experts "
                      "(fused shared experts): moec's FHMoE binds its shared expert with "
                      "Layer.bind_weights(shared_...=) and adds it to every token" %
                      (extra, E))
    local = [i for i in range(E) if mask[i]]
    block = list(range(rank * L, rank * L + L))
    round_robin = list(range(rank, E, ep))
    if local == block:
        placement = None
    elif ep > 1 and local == round_robin:
        placement = local
    else:
        raise invalid("expert_mask", "selects experts %s, but the layer is EP rank %d of %d "
                      "and serves experts %s (linear placement) or %s (round robin)" %
                      (local, rank, ep, block, round_robin))
    if len(_mask_cache) > 64:
        _mask_cache.clear()
    # Holding the mask and the layer keeps their ids unique while cached.
    _mask_cache[key] = (expert_mask, layer, placement)
    return placement


def _renumbered_ids(layer, topk_ids, placement, m):
    """topk_ids with the round-robin experts of this rank renumbered to the
    layer's block (rank * local + j) and every other id -1: a torch tensor
    on topk_ids' device, or for a CPU tensor (the emulated device, whose
    memory is host memory) one over device memory the layer keeps."""
    if not _is_tensor(topk_ids) or not hasattr(topk_ids, "new_full"):
        raise invalid("expert_mask", "a round-robin placement renumbers topk_ids, which "
                      "needs them as a torch tensor (got a device pointer)")
    import torch
    E, L = layer.experts, layer.local_experts
    lookup = torch.full((E + 1,), -1, dtype=torch.int32, device=topk_ids.device)
    lookup[torch.tensor(placement, dtype=torch.long, device=topk_ids.device)] = torch.arange(
        layer.ep_rank * L, layer.ep_rank * L + L, dtype=torch.int32, device=topk_ids.device)
    ids = topk_ids.to(torch.long)
    ids = torch.where((ids >= 0) & (ids < E), ids, torch.full_like(ids, E))
    if getattr(topk_ids, "is_cuda", False):
        return lookup[ids]
    # The emulated device: copied in through the device, which tracks what
    # was written (a kernel reading bytes nobody wrote is an error there).
    layer.device.synchronize()
    buffer = _ids_scratch(layer, m)
    layer.device.copy_to_device(buffer.ptr, lookup[ids].contiguous(), "expert_mask ids")
    return _cpu_tensor_over(buffer, tuple(topk_ids.shape), torch.int32)


def _cpu_tensor_over(buffer, shape, dtype):
    """A torch CPU tensor over a DeviceBuffer of the emulated device (whose
    memory is host memory, and which CPU tensors stand for); it keeps the
    buffer alive."""
    import torch
    count = _numel(shape) * torch.empty((), dtype=dtype).element_size()
    raw = (ctypes.c_uint8 * count).from_address(buffer.ptr)
    tensor = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)
    tensor._moec_buffer = buffer
    return tensor


def _float32(value):
    return struct.unpack("f", struct.pack("f", float(value)))[0]


# What AITER's fused_moe passes its stage-1 kernels for an argument the call
# leaves out (aiter/fused_moe.py at e4048607a5, fused_moe_2stages): the betas
# 1.0 to FlyDSL's stage 1, the only SiTUv2 stage 1 moec serves (opus's, which
# would get 4 and 25, is refused); the clamp through runtime_swiglu_limit
# (aiter/ops/flydsl/moe_kernels.py): 7 for Swiglu, none otherwise.
_AITER_ABSENT_BETA = 1.0


def _aiter_clamp(layer, swiglu_limit):
    """The clamp AITER's kernels apply for `swiglu_limit` (None or falsy:
    7 for Swiglu, none otherwise), as runtime_swiglu_limit encodes it."""
    if swiglu_limit:
        return float(swiglu_limit)
    return 7.0 if layer.activation == "gpt-oss-swiglu" else math.inf


def _clamp_text(limit):
    return "swiglu_limit %g" % limit if limit != math.inf else "no clamp"


def _check_activation_constants(layer, swiglu_limit, beta, linear_beta):
    """AITER's swiglu_limit, beta and linear_beta are run-time scalars of its
    stage-1 kernels; moec compiles them into the table's W13 kernels
    (layer.swiglu_limit, layer.facts.situ_beta / situ_linear_beta). The call
    must mean the table's, as AITER would apply it, given or not: an absent
    one is AITER's default (_AITER_ABSENT_BETA, _aiter_clamp), never the
    table's, so a layer compiled otherwise refuses it (docs/python.md)."""
    applied = _aiter_clamp(layer, swiglu_limit)
    served = layer.swiglu_limit if layer.swiglu_limit > 0 else math.inf
    if _float32(applied) != _float32(served):
        if swiglu_limit is None:
            aiter_default = "7" if layer.activation == "gpt-oss-swiglu" else "0"
            raise invalid("swiglu_limit", "absent, which AITER's kernels apply as %s, but "
                          "%r's W13 kernels were compiled with %s; pass swiglu_limit=%g as "
                          "the model does, or compile the table with --swiglu-limit %s" %
                          (_clamp_text(applied), layer, _clamp_text(served),
                           served if served != math.inf else 0, aiter_default))
        raise invalid("swiglu_limit", "%r clamps at %g, but %r's W13 kernels were "
                      "compiled with %s; moec's clamp is the table's (moec compile "
                      "--swiglu-limit), not a run-time argument" %
                      (swiglu_limit, applied, layer, _clamp_text(served)))
    served_betas = (layer.facts.situ_beta, layer.facts.situ_linear_beta)
    if served_betas[0] is None or served_betas[1] is None:
        # Only SiTUv2 reads the betas (AITER ignores them for other
        # activations, and _check_activation matched the call's to the layer's).
        return
    for name, value, served in (("beta", beta, served_betas[0]),
                                ("linear_beta", linear_beta, served_betas[1])):
        applied = _AITER_ABSENT_BETA if value is None else value
        if _float32(applied) == _float32(served):
            continue
        if value is None:
            raise invalid(name, "absent, which AITER's fused_moe passes its FlyDSL stage 1 as "
                          "%g, but %r's SiTUv2 W13 kernels were compiled with situ_beta = %g, "
                          "situ_linear_beta = %g; pass beta=%g, linear_beta=%g as the model "
                          "does, or compile the table with --situ-beta %g --situ-linear-beta %g" %
                          (_AITER_ABSENT_BETA, layer, served_betas[0], served_betas[1],
                           served_betas[0], served_betas[1], _AITER_ABSENT_BETA,
                           _AITER_ABSENT_BETA))
        raise invalid(name, "%r, but %r's SiTUv2 W13 kernels were compiled with %s = %g; "
                      "moec's betas are the table's (moec compile --situ-beta / "
                      "--situ-linear-beta), not run-time arguments" %
                      (value, layer, "situ_beta" if name == "beta" else
                       "situ_linear_beta", served))


def _check_biases(layer, bias1, bias2):
    """AITER's bias1 / bias2 are for a layer whose kernels take them
    (Layer.bind_bias); refused by name for one whose kernels do not."""
    for name, value, takes, cols in (
            ("bias1", bias1, layer.facts.w13_bias, 2 * layer.intermediate),
            ("bias2", bias2, layer.facts.w2_bias, layer.hidden)):
        if value is None and takes:
            raise invalid(name, "required: %r's kernels were compiled with AITER's biases" %
                          (layer,))
        if value is not None and not takes:
            raise invalid(name, "not supported: %r's kernels take no bias (a table compiled "
                          "with bias=true does); pass None" % (layer,))
        if value is not None:
            _check_dtype(value, name, ("torch.float32",))
            shape = _shape(value)
            if shape is not None and _numel(shape) != layer.local_experts * cols:
                raise invalid(name, "shape %s, expected [%d, %d] (FP32 per local expert)" %
                              (shape, layer.local_experts, cols))


def _pick_layer(layer, layers, H, I, E, K, activation, m=None):
    if layer is not None:
        if not isinstance(layer, Layer):
            raise invalid("layer", "expected a moec.Layer, got %s" % type(layer).__name__)
        candidates = [layer]
    else:
        candidates = current_layers() if layers is None else list(layers)
        if not candidates:
            raise invalid("layer", "no layer: pass layer=moec.Layer(...) or call "
                          "moec.use(layer) first")
    shapes_known = H is not None
    if not shapes_known:
        if len(candidates) > 1:
            raise invalid("layer", "raw pointers carry no shapes and %d layers are in use; "
                          "pass layer=" % len(candidates))
        return candidates[0]
    matching = [c for c in candidates
                if (c.hidden, c.intermediate, c.local_experts) == (H, I, E)
                and (K is None or K == c.top_k)]
    if not matching:
        have = "; ".join("%r" % c for c in candidates)
        raise invalid("layer" if layer is not None else "hidden_states",
                      "no layer for H=%d I=%d experts=%d top_k=%s (w1 [E, 2I, H/2], w2 [E, "
                      "H, I/2], topk_ids [M, top_k]); in use: %s" % (H, I, E, K, have))
    # Layers of one shape may differ in activation (a SiLU and a GPT-OSS
    # table): the call's ActivationType picks; _check_activation refuses
    # a shape none of whose layers computes it.
    wanted = _enum_value(activation, "activation", _ACTIVATIONS)
    wanted = _ACTIVATIONS["Silu"] if wanted is None else wanted
    same = [c for c in matching if _LAYER_ACTIVATIONS.get(c.activation) == wanted]
    if len(same) > 1 and m is not None:
        # An A4W4 and an A8W4 table of one shape: the one in the format
        # AITER would quantise this call's tokens to.
        fmt = _aiter_activation_format(activation, m)[0]
        same = [c for c in same if getattr(c, "a_format", None) == fmt] or same
    return same[0] if same else matching[0]


def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask=None,
              activation=None, quant_type=None, doweight_stage1=False, w1_scale=None,
              w2_scale=None, a1_scale=None, a2_scale=None, block_size_M=None,
              num_local_tokens=None, moe_sorting_dispatch_policy=0, dtype=None,
              hidden_pad=0, intermediate_pad=0, bias1=None, bias2=None, splitk=0,
              swiglu_limit=None, beta=None, linear_beta=None, *,
              layer=None, out=None, m=None, stream=None):
    """aiter.fused_moe's arguments, run by a moec layer (docs/python.md).

    hidden_states BF16 [M, H]; w1 / w2 the moec-prepared MXFP4 weights of
    this rank's experts ([E, 2I, H/2], [E, H, I/2] bytes) with w1_scale /
    w2_scale their E8M0 scales; topk_weight FP32 [M, top_k]; topk_ids
    int32 [M, top_k], global expert ids (-1: no route). Torch tensors
    (their data_ptr; the current stream of a GPU tensor) or device pointers
    (ints: then m= is required). activation must be the layer's
    (Layer.activation: ActivationType.Silu, the default, Swiglu for a
    GPT-OSS table, Situv2 for a Kimi K3 SiTUv2 table); swiglu_limit, beta
    and linear_beta must mean the table's as AITER applies them, given or
    not (None: AITER's default, betas 1 and the clamp of
    runtime_swiglu_limit, not the table's); a layer of an A4W4
    table (layer.a_format "fp4") serves only the calls AITER itself runs
    with MXFP4 tokens, one of an A16W4 table ("bf16") only those it runs
    with BF16 tokens (_aiter_activation_format); expert_mask (vLLM's, under expert parallelism) must
    select the layer's experts; bias1 / bias2 go to a table compiled with
    biases. Keyword-only, moec's own: layer= (default: moec.use), out=
    (BF16 [M, H]; default a new tensor like hidden_states, or a new
    moec.DeviceBuffer for raw pointers), m=, stream=.
    Returns out. Any aiter argument moec does not support, given a value
    other than its default, raises moec.MoecError naming it.
    """
    call = _plan(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask, activation,
                 quant_type, doweight_stage1, w1_scale, w2_scale, a1_scale, a2_scale,
                 block_size_M, num_local_tokens, moe_sorting_dispatch_policy, dtype,
                 hidden_pad, intermediate_pad, bias1, bias2, splitk, swiglu_limit, beta,
                 linear_beta, layer=layer, out=out, m=m)
    return call.run(stream)


class _Call:
    """One checked fused_moe call: everything is verified, nothing is
    launched or bound until run()."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def run(self, stream=None):
        layer, m, H, out = self.layer, self.m, self.H, self.out
        topk_ids = self.topk_ids
        if self.placement is not None:
            topk_ids = _renumbered_ids(layer, topk_ids, self.placement, m)
        if out is None:
            if _is_tensor(self.hidden_states) and getattr(self.hidden_states, "is_cuda", False):
                import torch
                out = torch.empty((m, H), dtype=torch.bfloat16,
                                  device=self.hidden_states.device)
            elif _is_tensor(self.hidden_states):
                import torch
                out = _cpu_tensor_over(DeviceBuffer(layer.device, m * H * 2), (m, H),
                                       torch.bfloat16)
            else:
                out = DeviceBuffer(layer.device, m * H * 2)
        if (stream is None and layer.device.capture_stream is None
                and _is_tensor(self.hidden_states)
                and getattr(self.hidden_states, "is_cuda", False)):
            import torch
            stream = torch.cuda.current_stream(self.hidden_states.device).cuda_stream
        if self.bias1 is not None or self.bias2 is not None:
            layer.bind_bias(self.bias1, self.bias2)
        layer.bind_weights(w13=pointer_of(self.w1, "w1"),
                           w13_scale=pointer_of(self.w1_scale, "w1_scale"),
                           w2=pointer_of(self.w2, "w2"),
                           w2_scale=pointer_of(self.w2_scale, "w2_scale"))
        layer.forward(m, self.hidden_states, topk_ids, self.topk_weight, out, stream)
        return out


def _plan(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask, activation, quant_type,
          doweight_stage1, w1_scale, w2_scale, a1_scale, a2_scale, block_size_M,
          num_local_tokens, moe_sorting_dispatch_policy, dtype, hidden_pad, intermediate_pad,
          bias1, bias2, splitk, swiglu_limit=None, beta=None, linear_beta=None, *,
          layer=None, layers=None, out=None, m=None):
    """fused_moe's checks: a _Call, or MoecError naming the argument.
    layers: the candidates instead of moec.use's."""
    _refuse_unsupported(quant_type, doweight_stage1, a1_scale, a2_scale, block_size_M,
                        num_local_tokens, moe_sorting_dispatch_policy, dtype, hidden_pad,
                        intermediate_pad, splitk)
    if w1_scale is None:
        raise invalid("w1_scale", "required: the E8M0 scales of w1 (MXFP4)")
    if w2_scale is None:
        raise invalid("w2_scale", "required: the E8M0 scales of w2 (MXFP4)")

    hs, w1s, w2s = _shape(hidden_states), _shape(w1), _shape(w2)
    ids_shape, weight_shape = _shape(topk_ids), _shape(topk_weight)
    H = I = E = K = None
    if hs is not None:
        if len(hs) != 2:
            raise invalid("hidden_states", "expected [M, H], got shape %s" % (hs,))
        _refuse_prequantised(hidden_states, "hidden_states")
        _check_dtype(hidden_states, "hidden_states", ("torch.bfloat16",))
        M, H = hs
        if m is not None and int(m) != M:
            raise invalid("m", "%d differs from hidden_states.shape[0] = %d" % (m, M))
        m = M
    elif m is None:
        raise invalid("m", "required with raw pointers: the token count of hidden_states")
    if ids_shape is not None:
        _check_dtype(topk_ids, "topk_ids", ("torch.int32",))
        if len(ids_shape) != 2 or ids_shape[0] != m:
            raise invalid("topk_ids", "expected [%d, top_k], got shape %s" % (m, ids_shape))
        K = ids_shape[1]
    if weight_shape is not None:
        _check_dtype(topk_weight, "topk_weight", ("torch.float32",))
        if len(weight_shape) != 2 or weight_shape[0] != m or (K is not None and weight_shape[1] != K):
            raise invalid("topk_weight", "expected [%d, %s], got shape %s" %
                          (m, K if K is not None else "top_k", weight_shape))
    packed = ("torch.uint8", "torch.float4_e2m1fn_x2")
    if w1s is not None or w2s is not None:
        if w1s is None or w2s is None or H is None:
            raise invalid("w1" if w1s is None else "w2", "pass hidden_states, w1 and w2 all as "
                          "tensors or all as pointers")
        _check_dtype(w1, "w1", packed)
        _check_dtype(w2, "w2", packed)
        check_weight_dtype(w1_scale, "w13_scale", "w1_scale")
        check_weight_dtype(w2_scale, "w2_scale", "w2_scale")
        if len(w2s) != 3 or w2s[1] != H:
            raise invalid("w2", "expected [E, H=%d, I/2], got shape %s" % (H, w2s))
        E, I = w2s[0], w2s[2] * 2
        if tuple(w1s) != (E, 2 * I, H // 2):
            raise invalid("w1", "expected [E, 2I, H/2] = %s, got shape %s" %
                          ((E, 2 * I, H // 2), w1s))
        for name, value, count in (("w1_scale", w1_scale, E * 2 * I * H // 32),
                                   ("w2_scale", w2_scale, E * H * I // 32)):
            shape = _shape(value)
            if shape is not None and _numel(shape) != count:
                raise invalid(name, "%d elements, expected %d (E8M0, one per 32 along K)" %
                              (_numel(shape), count))
    chosen = _pick_layer(layer, layers, H, I, E, K, activation, m)
    _check_activation(chosen, activation)
    _check_activation_format(chosen, activation, m)
    _check_activation_constants(chosen, swiglu_limit, beta, linear_beta)
    _check_biases(chosen, bias1, bias2)
    placement = None
    if expert_mask is not None:
        placement = _expert_mask_placement(chosen, expert_mask)
    if H is None:
        H = chosen.hidden
    if _is_tensor(out):
        _check_dtype(out, "out", ("torch.bfloat16",))
        if _shape(out) != (m, H):
            raise invalid("out", "expected [%d, %d], got shape %s" % (m, H, _shape(out)))
    return _Call(layer=chosen, m=m, H=H, out=out, placement=placement,
                 hidden_states=hidden_states, w1=w1, w2=w2, w1_scale=w1_scale,
                 w2_scale=w2_scale, topk_ids=topk_ids, topk_weight=topk_weight, bias1=bias1,
                 bias2=bias2)




def _ids_scratch(layer, m):
    """Device memory for renumbered topk_ids of a CPU tensor (emulated
    device), kept on the layer and grown to the largest m seen."""
    need = m * layer.top_k * 4
    buffer = getattr(layer, "_moec_ids_scratch", None)
    if buffer is None or buffer.nbytes < need:
        buffer = DeviceBuffer(layer.device, need)
        layer._moec_ids_scratch = buffer
    return buffer

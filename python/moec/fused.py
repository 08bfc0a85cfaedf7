"""moec.fused_moe: aiter.fused_moe's call, run by a moec layer."""

import threading

from ._capi import invalid
from .runtime import DeviceBuffer, Layer, pointer_of

__all__ = ["fused_moe", "use", "current_layers"]

# AITER's enums (aiter/ops/enum.py): ActivationType.Silu = 0,
# QuantType.per_1x32 = 3 (MXFP4 weights with E8M0 1x32 scales).
_ACTIVATION_SILU = 0
_QUANT_PER_1X32 = 3

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


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _refuse_unsupported(expert_mask, activation, quant_type, doweight_stage1, a1_scale,
                        a2_scale, block_size_M, num_local_tokens, moe_sorting_dispatch_policy,
                        dtype, hidden_pad, intermediate_pad, bias1, bias2, splitk):
    if expert_mask is not None:
        raise invalid("expert_mask", "not supported: moec takes expert parallelism from the "
                      "layer (moec.Layer(..., ep=N, ep_rank=r)) with global expert ids in "
                      "topk_ids")
    act = _enum_value(activation, "activation", {"Silu": 0, "Gelu": 1, "Swiglu": 2, "No": -1})
    if act not in (None, _ACTIVATION_SILU):
        raise invalid("activation", "%r is not supported: moec runs SiLU-and-mul (clamped "
                      "as the table was compiled: layer.swiglu_limit); pass "
                      "ActivationType.Silu or leave it out" % (activation,))
    quant = _enum_value(quant_type, "quant_type",
                        {"No": 0, "per_Tensor": 1, "per_Token": 2, "per_1x32": 3,
                         "per_1x128": 4, "per_128x128": 5})
    if quant not in (None, _QUANT_PER_1X32):
        raise invalid("quant_type", "%r is not supported: moec runs MXFP4 weights with E8M0 "
                      "1x32 scales (QuantType.per_1x32) and quantises the activations to "
                      "FP8 1x32 itself" % (quant_type,))
    if doweight_stage1:
        raise invalid("doweight_stage1", "not supported: moec applies the routing weights "
                      "after W2 (in the combine); pass False")
    for name, value in (("a1_scale", a1_scale), ("a2_scale", a2_scale), ("bias1", bias1),
                        ("bias2", bias2), ("num_local_tokens", num_local_tokens)):
        if value is not None:
            reason = {"a1_scale": "moec quantises the input on the device (per 1x32)",
                      "a2_scale": "moec quantises the intermediate on the device (per 1x32)",
                      "bias1": "fused_moe binds no biases (a table compiled with bias "
                               "takes them through Layer.bind_bias)",
                      "bias2": "fused_moe binds no biases (a table compiled with bias "
                               "takes them through Layer.bind_bias)",
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


def _pick_layer(layer, H, I, E, K):
    if layer is not None:
        if not isinstance(layer, Layer):
            raise invalid("layer", "expected a moec.Layer, got %s" % type(layer).__name__)
        candidates = [layer]
    else:
        candidates = current_layers()
        if not candidates:
            raise invalid("layer", "no layer: pass layer=moec.Layer(...) or call "
                          "moec.use(layer) first")
    shapes_known = H is not None
    if not shapes_known:
        if len(candidates) > 1:
            raise invalid("layer", "raw pointers carry no shapes and %d layers are in use; "
                          "pass layer=" % len(candidates))
        return candidates[0]
    for candidate in candidates:
        if ((candidate.hidden, candidate.intermediate, candidate.local_experts) == (H, I, E)
                and (K is None or K == candidate.top_k)):
            return candidate
    have = "; ".join("%r" % c for c in candidates)
    raise invalid("layer" if layer is not None else "hidden_states",
                  "no layer for H=%d I=%d experts=%d top_k=%s (w1 [E, 2I, H/2], w2 [E, H, "
                  "I/2], topk_ids [M, top_k]); in use: %s" % (H, I, E, K, have))


def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask=None,
              activation=None, quant_type=None, doweight_stage1=False, w1_scale=None,
              w2_scale=None, a1_scale=None, a2_scale=None, block_size_M=None,
              num_local_tokens=None, moe_sorting_dispatch_policy=0, dtype=None,
              hidden_pad=0, intermediate_pad=0, bias1=None, bias2=None, splitk=0, *,
              layer=None, out=None, m=None, stream=None):
    """aiter.fused_moe's arguments, run by a moec layer (docs/python.md).

    hidden_states BF16 [M, H]; w1 / w2 the moec-prepared MXFP4 weights of
    this rank's experts ([E, 2I, H/2], [E, H, I/2] bytes) with w1_scale /
    w2_scale their E8M0 scales; topk_weight FP32 [M, top_k]; topk_ids
    int32 [M, top_k], global expert ids (-1: no route). Torch tensors
    (their data_ptr; the current stream of a GPU tensor) or device pointers
    (ints: then m= is required). Keyword-only, moec's own: layer= (default:
    moec.use), out= (BF16 [M, H]; default a new tensor like hidden_states,
    or a new moec.DeviceBuffer for raw pointers), m=, stream=.
    Returns out. Any aiter argument moec does not support, given a value
    other than its default, raises moec.MoecError naming it.
    """
    _refuse_unsupported(expert_mask, activation, quant_type, doweight_stage1, a1_scale,
                        a2_scale, block_size_M, num_local_tokens, moe_sorting_dispatch_policy,
                        dtype, hidden_pad, intermediate_pad, bias1, bias2, splitk)
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
    chosen = _pick_layer(layer, H, I, E, K)
    if H is None:
        H = chosen.hidden

    if out is None:
        if _is_tensor(hidden_states):
            import torch
            out = torch.empty((m, H), dtype=torch.bfloat16, device=hidden_states.device)
        else:
            out = DeviceBuffer(chosen.device, m * H * 2)
    elif _is_tensor(out):
        _check_dtype(out, "out", ("torch.bfloat16",))
        if _shape(out) != (m, H):
            raise invalid("out", "expected [%d, %d], got shape %s" % (m, H, _shape(out)))
    if stream is None and _is_tensor(hidden_states) and getattr(hidden_states, "is_cuda", False):
        import torch
        stream = torch.cuda.current_stream(hidden_states.device).cuda_stream

    chosen.bind_weights(w13=pointer_of(w1, "w1"), w13_scale=pointer_of(w1_scale, "w1_scale"),
                        w2=pointer_of(w2, "w2"), w2_scale=pointer_of(w2_scale, "w2_scale"))
    chosen.forward(m, hidden_states, topk_ids, topk_weight, out, stream)
    return out

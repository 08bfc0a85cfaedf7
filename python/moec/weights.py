"""Weight preparation: checkpoint or AITER-prepared tensors -> the layout a
layer's kernels read (moec_prepare_expert_weights, moec_prepare_shared_expert).

Everything here runs on the host; upload the results once at load time
(Layer.load_weights, or the engine's own allocator) and bind them.
"""

import ctypes

from . import _capi
from ._buffers import host_buffer
from ._capi import call, invalid
from ._weight_layout import WeightLayout
from .npy import HostArray

__all__ = ["WeightLayout", "PreparedWeights", "weight_sizes", "prepare_expert_weights",
           "prepare_shared_expert", "has_weight_preparation", "interleave_gate_up",
           "tensor", "CHECKPOINT", "AITER", "SOURCES"]

CHECKPOINT = "checkpoint"
AITER = "aiter"
#: source= names of prepare_expert_weights -> moec_weight_source_t
SOURCES = {
    CHECKPOINT: 0,                 # MOEC_WEIGHT_SOURCE_CHECKPOINT
    AITER: 1,                      # MOEC_WEIGHT_SOURCE_AITER (a8w4: a16w4 shuffles, gate_up)
    "aiter_a16w4": 2,              # MOEC_WEIGHT_SOURCE_AITER_A16W4
    "aiter_preshuffle_16x16": 3,   # MOEC_WEIGHT_SOURCE_AITER_PRESHUFFLE_16X16
}
_SOURCES = SOURCES

_C_DTYPES = ("uint8", "float8_e4m3fn", "float8_e8m0fnu", "float32", "bfloat16", "int32")


def has_weight_preparation():
    """Whether the loaded runtime exports the weight-preparation functions."""
    return all(_capi.has(n) for n in ("moec_layer_weight_layout", "moec_weight_sizes",
                                      "moec_prepare_expert_weights",
                                      "moec_prepare_shared_expert"))


def weight_sizes(layout):
    """Bytes of every prepared tensor (moec_weight_sizes), as a dict."""
    sizes = _capi.WeightSizes()
    c_layout = layout._c()
    call("moec_weight_sizes", "weight sizes", ctypes.byref(c_layout), ctypes.byref(sizes))
    return {name: getattr(sizes, name) for name, _ in _capi.WeightSizes._fields_}


class tensor:
    """A host tensor with an explicit moec dtype ("uint8", "float8_e4m3fn",
    "float8_e8m0fnu", "float32", "bfloat16", "int32"), for data whose
    element type Python cannot tell (NumPy uint16 holding BF16 bits, bytes)."""

    def __init__(self, data, shape, dtype):
        if dtype not in _C_DTYPES:
            raise invalid("dtype", "%r is not one of %s" % (dtype, ", ".join(_C_DTYPES)))
        self.data, self.shape, self.dtype = data, tuple(int(d) for d in shape), dtype


_TORCH_DTYPES = {"torch.uint8": "uint8", "torch.float8_e4m3fn": "float8_e4m3fn",
                 "torch.float8_e8m0fnu": "float8_e8m0fnu", "torch.float32": "float32",
                 "torch.bfloat16": "bfloat16", "torch.int32": "int32",
                 "torch.float4_e2m1fn_x2": "uint8"}
_HOST_DTYPES = {"uint8": "uint8", "float32": "float32", "int32": "int32",
                "|u1": "uint8", "<f4": "float32", "<i4": "int32"}


def _c_tensor(value, what, keep):
    """moec_tensor_t for a host tensor; `keep` holds what must stay alive."""
    if value is None:
        return None
    if isinstance(value, tensor):
        shape, dtype, data = value.shape, value.dtype, value.data
    else:
        shape = tuple(int(d) for d in getattr(value, "shape", ()))
        data = value
        if isinstance(value, HostArray):
            dtype = _HOST_DTYPES.get(value.dtype)
        elif hasattr(value, "element_size"):  # torch
            dtype = _TORCH_DTYPES.get(str(value.dtype))
        elif hasattr(value, "dtype"):  # NumPy
            dtype = _HOST_DTYPES.get(getattr(value.dtype, "str", str(value.dtype)))
        else:
            raise invalid(what, "pass a HostArray, NumPy array, torch CPU tensor or "
                          "moec.weights.tensor(data, shape, dtype)")
        if dtype is None:
            raise invalid(what, "element type %s is not one moec reads; wrap it as "
                          "moec.weights.tensor(data, shape, dtype)" % getattr(value, "dtype", "?"))
    if not 1 <= len(shape) <= 4:
        raise invalid(what, "%d dimensions (1 to 4 allowed)" % len(shape))
    view = host_buffer(data, what)
    keep.append(view)
    c = _capi.Tensor()
    c.data = view.address
    c.ndim = len(shape)
    for i, d in enumerate(shape):
        c.shape[i] = d
    c.dtype = dtype.encode()
    keep.append(c.dtype)
    return c


class PreparedWeights(dict):
    """name -> HostArray (uint8) of prepared weights, ready to upload."""


def _outputs(layout, names, out):
    sizes = weight_sizes(layout)
    shapes = layout.shapes()
    result = PreparedWeights()
    for name in names:
        if out is not None and name in out:
            result[name] = out[name]
            continue
        shape = shapes.get(name)
        count = 1
        for d in shape or ():
            count *= d
        if shape is None or count != sizes[name]:
            shape = (sizes[name],)
        result[name] = HostArray(bytearray(sizes[name]), shape, "uint8")
    views = {}
    for name in names:
        view = host_buffer(result[name], "out[%s]" % name, writable=True)
        if view.nbytes < sizes[name]:
            raise invalid("out[%s]" % name, "%d bytes, %d needed" % (view.nbytes, sizes[name]))
        views[name] = view
    return result, views


def _layout_of(layout_or_layer):
    if isinstance(layout_or_layer, WeightLayout):
        return layout_or_layer
    if hasattr(layout_or_layer, "weight_layout"):
        return layout_or_layer.weight_layout()
    raise invalid("layout", "expected a WeightLayout or a moec.Layer")


def prepare_expert_weights(layout, w13, w13_scale, w2, w2_scale, source=CHECKPOINT,
                           threads=0, out=None):
    """Routed experts -> the kernels' layout (moec_prepare_expert_weights).

    layout: a WeightLayout or a Layer (its weight_layout()). source:
    "checkpoint" (MXFP4 W13 [E, 2I', H/2] gate rows then up rows, E8M0
    scales [E, 2I', H/32], W2 [E, H, I'/2], [E, H, I'/32]; I' may be the
    unpadded intermediate), or tensors an engine prepared for
    aiter.fused_moe: "aiter" (shuffle_weight_a16w4(w1, 16, True),
    shuffle_scale_a16w4(w1_scale, E, True), the same with gate_up False for
    W2), "aiter_a16w4" (gate_up False for W13 too) or
    "aiter_preshuffle_16x16" (shuffle_weight(w, (16, 16)) + e8m0_shuffle). threads: 0 = all cores. out: optional
    dict of writable host buffers. Returns PreparedWeights (w13, w13_scale,
    w2, w2_scale). A tensor of the wrong shape or dtype is refused naming it.
    """
    if source not in _SOURCES:
        raise invalid("source", "%r is not one of %s" % (source, ", ".join(_SOURCES)))
    layout = _layout_of(layout)
    names = ("w13", "w13_scale", "w2", "w2_scale")
    result, views = _outputs(layout, names, out)
    keep = []
    tensors = [_c_tensor(v, n, keep) for v, n in zip((w13, w13_scale, w2, w2_scale), names)]
    for t, n in zip(tensors, names):
        if t is None:
            raise invalid(n, "required")
    c_layout = layout._c()
    call("moec_prepare_expert_weights", "prepare_expert_weights", ctypes.byref(c_layout),
         _SOURCES[source], *[ctypes.byref(t) for t in tensors],
         *[views[n].address for n in names], int(threads))
    return result


def prepare_shared_expert(layout, w13, w13_scale, w2, w2_scale, threads=0, out=None):
    """The FHMoE FP8 shared expert (DeepSeek block scales) -> the kernels'
    layout (moec_prepare_shared_expert). Returns PreparedWeights with
    shared_w13, shared_w13_scale, shared_w2, shared_w2_scale."""
    layout = _layout_of(layout)
    names = ("shared_w13", "shared_w13_scale", "shared_w2", "shared_w2_scale")
    result, views = _outputs(layout, names, out)
    keep = []
    tensors = [_c_tensor(v, n, keep) for v, n in zip((w13, w13_scale, w2, w2_scale), names)]
    for t, n in zip(tensors, names):
        if t is None:
            raise invalid(n, "required")
    c_layout = layout._c()
    call("moec_prepare_shared_expert", "prepare_shared_expert", ctypes.byref(c_layout),
         *[ctypes.byref(t) for t in tensors], *[views[n].address for n in names], int(threads))
    return result


def interleave_gate_up(data, experts, intermediate, row_bytes, interleave):
    """Pure-Python reordering of W13 rows (or their scale rows) from the
    checkpoint's gate rows then up rows to blocks of G gate rows then G up
    rows (docs/families.md). data: bytes of [experts, 2 * intermediate,
    row_bytes]. Returns a bytearray; G = 0 returns a copy."""
    data = bytes(data)
    G = int(interleave)
    if len(data) != experts * 2 * intermediate * row_bytes:
        raise invalid("w13", "%d bytes, expected %d x %d x %d" %
                      (len(data), experts, 2 * intermediate, row_bytes))
    if G == 0 or G == intermediate:
        return bytearray(data)
    if intermediate % G:
        raise invalid("gate_up_interleave", "%d does not divide intermediate %d" %
                      (G, intermediate))
    out = bytearray(len(data))
    block = G * row_bytes
    expert_bytes = 2 * intermediate * row_bytes
    for e in range(experts):
        base = e * expert_bytes
        up = base + intermediate * row_bytes
        for b in range(intermediate // G):
            dst = base + 2 * b * block
            out[dst:dst + block] = data[base + b * block:base + (b + 1) * block]
            out[dst + block:dst + 2 * block] = data[up + b * block:up + (b + 1) * block]
    return out

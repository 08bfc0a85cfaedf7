"""moec.experts_forward: the experts-only entry, for expert parallelism
through an external all-to-all (DeepEP, MORI, vLLM's modular kernels).

The dispatcher delivers rows to this EP rank; this rank's experts compute
them (Layer.forward_experts, moec_layer_forward_experts) and each output row
is the weighted sum of its local slots, which the dispatcher's combine
sends back and sums per token. docs/engines.md, "Past one node".
"""

from ._capi import invalid
from .fused import (_check_dtype, _cpu_tensor_over, _host_values, _is_tensor,
                    _refuse_prequantised, _shape)
from .runtime import DeviceBuffer, Layer

__all__ = ["experts_forward"]


def _is_array(value):
    return hasattr(value, "__array_interface__") and not _is_tensor(value)


def _check_rows(layer, hidden, local_ids, weights):
    """(rows, H) of the delivered rows; MoecError naming the argument."""
    shapes = {"hidden_states": _array_shape(hidden), "topk_ids": _array_shape(local_ids),
              "topk_weights": _array_shape(weights)}
    if shapes["hidden_states"] is None:
        raise invalid("hidden_states", "expected a torch tensor or a NumPy array "
                      "(Layer.forward_experts takes device pointers)")
    if len(shapes["hidden_states"]) != 2 or shapes["hidden_states"][1] != layer.hidden:
        raise invalid("hidden_states", "expected [rows, H=%d], got shape %s" %
                      (layer.hidden, shapes["hidden_states"]))
    rows = shapes["hidden_states"][0]
    for name in ("topk_ids", "topk_weights"):
        if shapes[name] != (rows, layer.top_k):
            raise invalid(name, "expected [%d, top_k=%d], got shape %s" %
                          (rows, layer.top_k, shapes[name]))
    _refuse_prequantised(hidden, "hidden_states")
    _check_dtype(hidden, "hidden_states", ("torch.bfloat16",))
    _check_dtype(local_ids, "topk_ids", ("torch.int32",))
    _check_dtype(weights, "topk_weights", ("torch.float32",))
    for name, value, dtype in (("hidden_states", hidden, "uint16"),
                               ("topk_ids", local_ids, "int32"),
                               ("topk_weights", weights, "float32")):
        if _is_array(value) and str(value.dtype) != dtype:
            raise invalid(name, "NumPy dtype %s, expected %s%s" %
                          (value.dtype, dtype, " (BF16 bits)" if dtype == "uint16" else ""))
    return rows, layer.hidden


def _array_shape(value):
    if _is_tensor(value) or _is_array(value):
        return tuple(int(d) for d in value.shape)
    return None


def experts_forward(layer, hidden_states, topk_ids, topk_weights, expert_counts=None, *,
                    out=None, stream=None):
    """The delivered rows through `layer`'s experts (this EP rank's).

    hidden_states BF16 [rows, H]; topk_ids int32 [rows, top_k], this rank's
    experts by local id in [0, layer.local_experts), any other id (-1,
    another rank's expert) adding zero; topk_weights FP32 [rows, top_k];
    expert_counts: None or the routes per local expert the dispatcher
    reports (a list, NumPy array or torch tensor), which size the sorted
    list. Torch tensors (GPU tensors, or CPU tensors over emulated device
    memory): returns out, BF16 [rows, H] (default a new tensor). NumPy
    arrays (hidden as uint16 BF16 bits): uploaded, run, synchronised, and
    returned as a new uint16 array. The layer's weights must be bound.
    """
    if not isinstance(layer, Layer):
        raise invalid("layer", "expected a moec.Layer, got %s" % type(layer).__name__)
    rows, H = _check_rows(layer, hidden_states, topk_ids, topk_weights)
    counts = None
    if expert_counts is not None:
        counts = _host_values(expert_counts, "expert_counts")
    if _is_array(hidden_states):
        if not (_is_array(topk_ids) and _is_array(topk_weights)):
            raise invalid("topk_ids", "pass hidden_states, topk_ids and topk_weights all "
                          "as NumPy arrays or all as tensors")
        return _forward_arrays(layer, rows, H, hidden_states, topk_ids, topk_weights, counts,
                               out, stream)
    if out is None:
        import torch
        if getattr(hidden_states, "is_cuda", False):
            out = torch.empty((rows, H), dtype=torch.bfloat16, device=hidden_states.device)
        else:
            out = _cpu_tensor_over(DeviceBuffer(layer.device, max(rows * H * 2, 1)),
                                   (rows, H), torch.bfloat16)
    elif _shape(out) != (rows, H):
        raise invalid("out", "expected [%d, %d], got shape %s" % (rows, H, _shape(out)))
    _check_dtype(out, "out", ("torch.bfloat16",))
    if (stream is None and layer.device.capture_stream is None
            and getattr(hidden_states, "is_cuda", False)):
        import torch
        stream = torch.cuda.current_stream(hidden_states.device).cuda_stream
    layer.forward_experts(rows, hidden_states, topk_ids, topk_weights, out, counts, stream)
    return out


def _forward_arrays(layer, rows, H, hidden, ids, weights, counts, out, stream):
    """NumPy rows: through device buffers of the layer's device."""
    import numpy as np
    if out is None:
        out = np.empty((rows, H), dtype=np.uint16)
    elif getattr(out, "shape", None) != (rows, H) or str(out.dtype) != "uint16":
        raise invalid("out", "expected a uint16 [%d, %d] array (BF16 bits)" % (rows, H))
    device = layer.device
    buffers = [device.upload(np.ascontiguousarray(a), what=name) for name, a in
               (("hidden_states", hidden), ("topk_ids", ids), ("topk_weights", weights))]
    result = DeviceBuffer(device, max(rows * H * 2, 1))
    try:
        layer.forward_experts(rows, *[b.ptr for b in buffers], result.ptr, counts, stream)
        device.synchronize(stream)
        if rows:
            result.download(rows * H * 2, out)
        return out
    finally:
        for buffer in buffers + [result]:
            buffer.free()

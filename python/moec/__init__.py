"""moec: the moec runtime from Python (ctypes over libmoec_runtime.so).

    import moec
    layer = moec.Layer("flash_tp4.moeb", device=None, network="flash-tp4")
    moec.use(layer)
    out = moec.fused_moe(hidden_states, w1, w2, topk_weight, topk_ids,
                         w1_scale=w1_scale, w2_scale=w2_scale)

The standard library only at import; NumPy and torch are used when the
caller passes their objects. docs/python.md describes the whole API.
"""

from ._capi import MoecError, library_path
from .experts import experts_forward
from .fused import current_layers, fused_moe, use
from .graph import Graph, graph_capture
from .megamoe import MegaMoE
from .npy import HostArray
from .runtime import (AiterSelection, Bundle, Device, DeviceBuffer, Layer, Selection,
                      TableFacts, emulated_hip_library, select_aiter)
from .weights import (AITER, CHECKPOINT, PreparedWeights, WeightLayout,
                      has_weight_preparation, prepare_expert_weights, prepare_shared_expert,
                      weight_sizes)
from . import aiter_compat, megamoe, npy, vllm_experts, weights

__version__ = "0.1.0"

__all__ = ["MoecError", "Bundle", "Selection", "AiterSelection", "select_aiter", "Device", "DeviceBuffer", "Layer", "TableFacts", "HostArray",
           "fused_moe", "use", "current_layers", "emulated_hip_library", "library_path",
           "WeightLayout", "PreparedWeights", "weight_sizes", "prepare_expert_weights",
           "prepare_shared_expert", "has_weight_preparation", "CHECKPOINT", "AITER", "npy",
           "weights", "aiter_compat", "experts_forward", "vllm_experts", "MegaMoE", "megamoe",
           "Graph", "graph_capture"]

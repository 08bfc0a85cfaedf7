"""moec's experts behind vLLM's modular MoE kernel.

`ModularExperts` has the method set of vLLM's `FusedMoEExpertsModular`
(vllm/model_executor/layers/fused_moe/modular_kernel.py at vLLM
003d383eb3f3275169256e85e5b0ae9d5455342a): vLLM's prepare/finalize (its
all-to-all: DeepEP, MORI, naive) dispatches the tokens, `apply` runs the
delivered rows through a moec layer's experts (moec.experts_forward) and
writes each row's weighted sum, and `finalize_weight_and_reduce_impl`
tells finalize that the weights are applied and the top-k reduced.

vLLM is not imported: vLLM's kernel checks isinstance against its own
base class, so an engine registers `vllm_class()` (this class mixed into
vLLM's `FusedMoEExpertsModular`). Without vLLM, stand-ins with vLLM's
values stand for its enums. docs/engines.md, "Past one node".
"""

from enum import Enum

from ._capi import invalid
from .experts import experts_forward
from .fused import _cpu_tensor_over, _is_tensor
from .runtime import DeviceBuffer

__all__ = ["ModularExperts", "TopKWeightAndReduceNoOP", "FusedMoEActivationFormat",
           "vllm_class"]

VLLM_COMMIT = "003d383eb3f3275169256e85e5b0ae9d5455342a"


class FusedMoEActivationFormat(Enum):
    """vLLM's enum of the same name (its values), used when vLLM is absent."""
    Standard = ("standard",)
    BatchedExperts = ("batched_experts",)


class TopKWeightAndReduceNoOP:
    """What vLLM's TopKWeightAndReduceNoOP does: the experts already applied
    the weights and reduced over top-k, so finalize only moves the rows."""

    def apply(self, output, fused_expert_output, topk_weights, topk_ids,
              apply_router_weight_on_input):
        if output is None:
            return fused_expert_output
        if output.data_ptr() != fused_expert_output.data_ptr():
            output.copy_(fused_expert_output)
        return output


# vLLM's MoEActivation values -> the moec Layer.activation that computes it.
_ACTIVATIONS = {"silu": "silu", "swigluoai": "gpt-oss-swiglu",
                "swigluoai_uninterleave": "gpt-oss-swiglu"}


def _activation_value(activation):
    return getattr(activation, "value", activation)


class ModularExperts:
    """A moec Layer as vLLM's modular experts (Standard activation format:
    [rows, H] BF16 rows as the dispatcher delivered them, unquantised; moec
    quantises them itself).

    ModularExperts(layer, quant_config=None, moe_config=None, w1_scale=None,
    w2_scale=None): layer is this EP rank's moec.Layer (weights prepared
    in moec's layout, the w1 / w2 vLLM passes to apply); the E8M0 scales
    come from quant_config.w1_scale / w2_scale (vLLM's FusedMoEQuantConfig)
    or the keywords.
    """

    consumes_expert_mask = False

    def __init__(self, layer, quant_config=None, moe_config=None, *, w1_scale=None,
                 w2_scale=None):
        if layer.fused or layer.shared_expert:
            raise invalid("layer", "%r: the experts-only entry needs an unfused table "
                          "without a shared expert" % (layer,))
        self.layer = layer
        self.quant_config, self.moe_config = quant_config, moe_config
        # Kept under private names: vLLM's base class has read-only
        # properties w1_scale / w2_scale (reading quant_config), which an
        # instance attribute of the mixed class could not be assigned over.
        self._w1_scale = w1_scale if w1_scale is not None else getattr(quant_config,
                                                                       "w1_scale", None)
        self._w2_scale = w2_scale if w2_scale is not None else getattr(quant_config,
                                                                       "w2_scale", None)
        self.max_num_tokens = self.num_dispatchers = None
        self._scratch = {}

    @property
    def w1_scale(self):
        """The E8M0 scales of W13 (torch.uint8 or torch.float8_e8m0fnu)."""
        return self._w1_scale

    @property
    def w2_scale(self):
        return self._w2_scale

    # -- what vLLM asks of the class --
    @staticmethod
    def activation_format():
        return _format().Standard

    @staticmethod
    def is_monolithic():
        return False

    @property
    def expects_unquantized_inputs(self):
        """The rows arrive as BF16: prepare defers input quantisation."""
        return True

    @staticmethod
    def _supports_current_device():
        return True  # the moec runtime loaded a device for the layer

    @staticmethod
    def _supports_no_act_and_mul():
        return False

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key):
        return True  # the layer's table fixes it (MXFP4 weights, FP8 activations)

    @staticmethod
    def _supports_activation(activation):
        return _activation_value(activation) in _ACTIVATIONS

    @staticmethod
    def _supports_parallel_config(moe_parallel_config):
        return True  # EP goes through vLLM's dispatcher; TP as the table was compiled

    @property
    def a1_scale(self):
        return getattr(self.quant_config, "a1_scale", None)

    @property
    def a2_scale(self):
        return getattr(self.quant_config, "a2_scale", None)

    @staticmethod
    def supports_lora():
        return False

    def supports_packed_ue8m0_act_scales(self):
        return False

    def process_weights_after_loading(self, layer):
        pass

    def moe_problem_size(self, a1, w1, w2, topk_ids):
        """(E, M, N, K, topk) as vLLM's base class reads them: w1 [E, N, .],
        a1 [M, K] (Standard format), topk_ids [M, topk]."""
        E, N = int(w1.shape[0]), int(w1.shape[1])
        if a1.dim() != 2 or topk_ids.dim() != 2 or int(topk_ids.shape[0]) != int(a1.shape[0]):
            raise invalid("hidden_states", "the Standard format takes a1 [M, K] and "
                          "topk_ids [M, topk]; got %s and %s" %
                          (tuple(a1.shape), tuple(topk_ids.shape)))
        return E, int(a1.shape[0]), N, int(a1.shape[-1]), int(topk_ids.shape[1])

    def workspace_dtype(self, act_dtype):
        return act_dtype

    def workspace_shapes(self, M, N, K, topk, global_num_experts, local_num_experts,
                         expert_tokens_meta, activation):
        """No workspace of vLLM's (the layer binds its own); the output is
        the reduced [M, K]."""
        return (0,), (0,), (M, K)

    def finalize_weight_and_reduce_impl(self):
        return _reduce_no_op()

    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation,
              global_num_experts, expert_map, a1q_scale, a2_scale, workspace13, workspace2,
              expert_tokens_meta, apply_router_weight_on_input):
        """Writes each delivered row's weighted sum over its local slots
        into output [M, K]; returns None."""
        layer = self.layer
        served = _ACTIVATIONS.get(_activation_value(activation))
        if served != layer.activation:
            raise invalid("activation", "vLLM asks for %s, %r computes %s; moec never runs "
                          "a table as another activation" %
                          (activation, layer, layer.activation))
        if a1q_scale is not None or a2_scale is not None:
            raise invalid("a1q_scale" if a1q_scale is not None else "a2_scale",
                          "moec quantises the rows itself (expects_unquantized_inputs)")
        if self.w1_scale is None or self.w2_scale is None:
            raise invalid("quant_config", "w1_scale and w2_scale (the E8M0 scales of the "
                          "prepared weights) are required")
        rows = int(hidden_states.shape[0])
        if int(w1.shape[0]) != layer.local_experts:
            raise invalid("w1", "%d experts, %r has %d local experts" %
                          (int(w1.shape[0]), layer, layer.local_experts))
        local_ids = self._local_ids(topk_ids, expert_map, global_num_experts, rows)
        weights = topk_weights
        if apply_router_weight_on_input:
            import torch
            weights = self._on_device("weights", torch.ones_like(topk_weights,
                                                                 dtype=torch.float32))
        counts = getattr(expert_tokens_meta, "expert_num_tokens_cpu", None)
        layer.bind_weights(w13=w1, w13_scale=self.w1_scale, w2=w2, w2_scale=self.w2_scale)
        experts_forward(layer, hidden_states, local_ids, weights, counts, out=output)
        return None

    # -- helpers --
    def _local_ids(self, topk_ids, expert_map, global_num_experts, rows):
        """int32 local ids: expert_map (global -> local, -1 elsewhere)
        applied, ids outside [0, global experts) made -1; without an
        expert_map the ids are local already."""
        import torch
        if expert_map is None:
            return topk_ids if topk_ids.dtype == torch.int32 else self._on_device(
                "ids", topk_ids.to(torch.int32))
        ids = topk_ids.to(torch.long)
        valid = (ids >= 0) & (ids < int(expert_map.shape[0]))
        mapped = expert_map.to(topk_ids.device)[torch.where(valid, ids, torch.zeros_like(ids))]
        local = torch.where(valid, mapped.to(torch.int32), torch.full_like(mapped, -1,
                                                                            dtype=torch.int32))
        return self._on_device("ids", local.contiguous())

    def _on_device(self, name, tensor):
        """A GPU tensor as it is; a CPU tensor (the emulated device, whose
        memory is host memory) copied into device memory this object keeps."""
        if getattr(tensor, "is_cuda", False):
            return tensor
        device = self.layer.device
        nbytes = max(tensor.numel() * tensor.element_size(), 1)
        buffer = self._scratch.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self._scratch[name] = DeviceBuffer(device, nbytes)
        device.synchronize()
        device.copy_to_device(buffer.ptr, tensor.contiguous(), name)
        return _cpu_tensor_over(buffer, tuple(tensor.shape), tensor.dtype)


def _format():
    try:
        from vllm.model_executor.layers.fused_moe.modular_kernel import (
            FusedMoEActivationFormat as vllm_format)
        return vllm_format
    except ImportError:
        return FusedMoEActivationFormat


def _reduce_no_op():
    try:
        from vllm.model_executor.layers.fused_moe.topk_weight_and_reduce import (
            TopKWeightAndReduceNoOP as vllm_no_op)
        return vllm_no_op()
    except ImportError:
        return TopKWeightAndReduceNoOP()


def vllm_class():
    """ModularExperts mixed into vLLM's FusedMoEExpertsModular, for
    FusedMoEKernel's isinstance check (vLLM must be installed). Tested
    against a stand-in of vLLM's modules at VLLM_COMMIT (the abstract
    methods, the read-only quant-config properties, the enums and the
    no-op reduction: test/python/test_vllm_class.py), not against vLLM
    itself."""
    from vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEExpertsModular
    return type("MoecModularExperts", (ModularExperts, FusedMoEExpertsModular), {})

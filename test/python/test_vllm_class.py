"""moec.vllm_experts.vllm_class() against a stand-in of vLLM's module tree.

vLLM is not installed here, so the modules vllm_class() and ModularExperts
import are built in the test: vllm.model_executor.layers.fused_moe.
modular_kernel (FusedMoEActivationFormat, TopKWeightAndReduce,
FusedMoEExperts, FusedMoEExpertsModular) and .topk_weight_and_reduce
(TopKWeightAndReduceNoOP), with what vLLM
003d383eb3f3275169256e85e5b0ae9d5455342a (moec.vllm_experts.VLLM_COMMIT)
declares there: the abstract methods a concrete experts class must
implement, the read-only properties that read quant_config (w1_scale,
w2_scale, a1_scale, a2_scale), the Standard-format constructor check and
the enum values. Written here from those declarations, not copied; the
methods' bodies are the minimum that shows the behaviour.

The class vllm_class() returns must subclass the stand-in base,
instantiate (no abstract method left), answer with the stand-in's enum and
no-op reduction, and drive the modular-kernel calls (test_experts_entry's
driver) to the oracle at EP2, with MXFP4 weights as torch.float4_e2m1fn_x2
and float8_e8m0fnu scales where torch has those dtypes (uint8 elsewhere).
"""

import abc
import enum
import sys
import types

import numpy as np
import pytest

import moec
from conftest import torch_on_device
from test_experts_entry import (Dispatch, InProcessAllToAll, check_with_oracle, ep_layers,
                                local_weights, vllm_modular_apply)

MK = "vllm.model_executor.layers.fused_moe.modular_kernel"
REDUCE = "vllm.model_executor.layers.fused_moe.topk_weight_and_reduce"


def stand_in_vllm():
    """{module name: module} of the stand-in tree."""
    mk = types.ModuleType(MK)

    class FusedMoEActivationFormat(enum.Enum):
        Standard = ("standard",)
        BatchedExperts = ("batched_experts",)

    class TopKWeightAndReduce(abc.ABC):
        @abc.abstractmethod
        def apply(self, output, fused_expert_output, topk_weights, topk_ids,
                  apply_router_weight_on_input):
            raise NotImplementedError

    class FusedMoEExperts(abc.ABC):
        consumes_expert_mask = False

        def __init__(self, moe_config, quant_config, max_num_tokens=None,
                     num_dispatchers=None):
            standard = self.activation_format() == FusedMoEActivationFormat.Standard
            if standard and (max_num_tokens is not None or num_dispatchers is not None):
                raise ValueError("max_num_tokens and num_dispatchers are for the batched "
                                 "format only")
            self.moe_config, self.quant_config = moe_config, quant_config
            self.max_num_tokens, self.num_dispatchers = max_num_tokens, num_dispatchers

        @staticmethod
        def is_monolithic():
            raise NotImplementedError

        @property
        def expects_unquantized_inputs(self):
            return False

        @staticmethod
        @abc.abstractmethod
        def activation_format():
            raise NotImplementedError

        @staticmethod
        @abc.abstractmethod
        def _supports_current_device():
            raise NotImplementedError

        @staticmethod
        @abc.abstractmethod
        def _supports_no_act_and_mul():
            raise NotImplementedError

        @staticmethod
        @abc.abstractmethod
        def _supports_quant_scheme(weight_key, activation_key):
            raise NotImplementedError

        @staticmethod
        @abc.abstractmethod
        def _supports_activation(activation):
            raise NotImplementedError

        @staticmethod
        @abc.abstractmethod
        def _supports_parallel_config(moe_parallel_config):
            raise NotImplementedError

        # Read-only views of quant_config, as vLLM's base class has them.
        a1_scale = property(lambda self: self.quant_config.a1_scale)
        a2_scale = property(lambda self: self.quant_config.a2_scale)
        w1_scale = property(lambda self: self.quant_config.w1_scale)
        w2_scale = property(lambda self: self.quant_config.w2_scale)

        @staticmethod
        def supports_lora():
            return False

        def supports_packed_ue8m0_act_scales(self):
            return False

    class FusedMoEExpertsModular(FusedMoEExperts):
        @staticmethod
        def is_monolithic():
            return False

        def workspace_dtype(self, act_dtype):
            return act_dtype

        @abc.abstractmethod
        def workspace_shapes(self, M, N, K, topk, global_num_experts, local_num_experts,
                             expert_tokens_meta, activation):
            raise NotImplementedError

        @abc.abstractmethod
        def finalize_weight_and_reduce_impl(self):
            raise NotImplementedError

        @abc.abstractmethod
        def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation,
                  global_num_experts, expert_map, a1q_scale, a2_scale, workspace13,
                  workspace2, expert_tokens_meta, apply_router_weight_on_input):
            raise NotImplementedError

    for cls in (FusedMoEActivationFormat, TopKWeightAndReduce, FusedMoEExperts,
                FusedMoEExpertsModular):
        cls.__module__ = MK
        setattr(mk, cls.__name__, cls)

    reduce = types.ModuleType(REDUCE)

    class TopKWeightAndReduceNoOP(TopKWeightAndReduce):
        def apply(self, output, fused_expert_output, topk_weights, topk_ids,
                  apply_router_weight_on_input):
            if output is None or output is fused_expert_output:
                return fused_expert_output
            output.copy_(fused_expert_output)
            return output

    TopKWeightAndReduceNoOP.__module__ = REDUCE
    reduce.TopKWeightAndReduceNoOP = TopKWeightAndReduceNoOP

    modules = {MK: mk, REDUCE: reduce}
    parts = MK.split(".")
    for i in range(1, len(parts)):  # vllm, vllm.model_executor, ... packages
        name = ".".join(parts[:i])
        package = types.ModuleType(name)
        package.__path__ = []
        modules[name] = package
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    return modules


@pytest.fixture
def vllm(monkeypatch):
    """The stand-in vLLM in sys.modules for one test; its modular_kernel."""
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    modules = stand_in_vllm()
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return modules[MK]


def test_vllm_class_is_a_vllm_experts_class(bundle_path, device, vllm, torch):
    """Without the stand-in vllm_class() fails to import; with it the class
    subclasses both, instantiates (every abstract method implemented, the
    scales kept despite the base's read-only properties) and answers with
    vLLM's own enum and reduction objects."""
    cls = moec.vllm_experts.vllm_class()
    assert issubclass(cls, vllm.FusedMoEExpertsModular)
    assert issubclass(cls, moec.vllm_experts.ModularExperts)
    assert not getattr(cls, "__abstractmethods__", None)
    layer = ep_layers(bundle_path, device)[0]
    scales = types.SimpleNamespace(w1_scale=torch.zeros(1, dtype=torch.uint8),
                                   w2_scale=torch.zeros(2, dtype=torch.uint8),
                                   a1_scale=None, a2_scale=None)
    experts = cls(layer, scales)
    assert isinstance(experts, vllm.FusedMoEExperts)
    assert experts.w1_scale is scales.w1_scale and experts.w2_scale is scales.w2_scale
    assert experts.a2_scale is None and not experts.is_monolithic()
    assert experts.activation_format() is vllm.FusedMoEActivationFormat.Standard
    reduce = sys.modules[REDUCE].TopKWeightAndReduceNoOP
    assert type(experts.finalize_weight_and_reduce_impl()) is reduce
    assert experts.expects_unquantized_inputs
    silu, gelu = (types.SimpleNamespace(value=v) for v in ("silu", "gelu"))
    assert cls._supports_activation(silu) and not cls._supports_activation(gelu)
    assert cls._supports_current_device() and not cls._supports_no_act_and_mul()
    assert experts.workspace_shapes(5, 1024, 512, 4, 8, 4, None, silu) == ((0,), (0,),
                                                                           (5, 512))
    # A fused table has no experts-only entry: refused by the class too.
    bundle = moec.Bundle(bundle_path("flash_ep2"))
    fused = moec.Layer(bundle, device, "flash-fused", ep=2, ep_rank=0)
    with pytest.raises(moec.MoecError) as error:
        cls(fused, scales)
    assert error.value.what == "layer"


def test_vllm_class_drives_apply_to_the_oracle(bundle_path, device, oracle, vllm, torch):
    """Both EP ranks of flash at EP2 as instances of vllm_class(), driven
    through vLLM's modular-kernel calls (prepare, moe_problem_size,
    workspace_shapes, apply, finalize with the class's reduction) behind
    the in-process all-to-all, with vLLM's expert_map; the combined rows
    match the oracle's layer (relative L2 within 1/128, each rank's rows
    element-wise within the oracle's bound)."""
    cls = moec.vllm_experts.vllm_class()
    fp4 = getattr(torch, "float4_e2m1fn_x2", torch.uint8)
    e8m0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
    ranks = ep_layers(bundle_path, device)
    H, I, E, K, m = (ranks[0].hidden, ranks[0].intermediate, ranks[0].experts,
                     ranks[0].top_k, 23)
    o = oracle("tp", H, I, E, K, m, 61, interleave=0, swiglu=ranks[0].swiglu_limit)
    local = ranks[0].local_experts
    dispatch = Dispatch(o.arrays, [range(0, 8), range(8, m)], 2, local, 61)
    a2a = InProcessAllToAll(torch, device, dispatch, m, H)
    silu = types.SimpleNamespace(value="silu", name="SILU")
    for layer in ranks:
        prepared = local_weights(layer, o.arrays)
        shapes = {"w13": ((local, 2 * I, H // 2), fp4), "w13_scale": ((local, 2 * I, H // 32), e8m0),
                  "w2": ((local, H, I // 2), fp4), "w2_scale": ((local, H, I // 32), e8m0)}
        w = {k: torch_on_device(device, np.frombuffer(bytes(getattr(v, "data", v)), np.uint8)
                                .reshape(shapes[k][0]), shapes[k][1])
             for k, v in prepared.items()}
        quant_config = types.SimpleNamespace(w1_scale=w["w13_scale"], w2_scale=w["w2_scale"],
                                             a1_scale=None, a2_scale=None)
        experts = cls(layer, quant_config)
        assert isinstance(experts, vllm.FusedMoEExpertsModular)
        expert_map = torch.full((E,), -1, dtype=torch.int32)
        expert_map[layer.ep_rank * local:(layer.ep_rank + 1) * local] = torch.arange(
            local, dtype=torch.int32)
        vllm_modular_apply(torch, a2a, layer.ep_rank, experts, w["w13"], w["w2"], expert_map,
                           E, silu)
    check_with_oracle(o, dispatch, a2a.combined, m, H)


def test_vllm_class_needs_vllm(monkeypatch):
    """Without vLLM (and no stand-in) vllm_class() raises ImportError."""
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError):
        moec.vllm_experts.vllm_class()

"""moec.aiter_compat: aiter.fused_moe.fused_moe reaches moec (docs/engines.md).

    import moec.aiter_compat
    moec.aiter_compat.install("model.moeb")     # before the engine's first MoE call

Afterwards `from aiter.fused_moe import fused_moe` and
`aiter.fused_moe.fused_moe(...)` (what vLLM's and SGLang's AITER paths look up
at call time) run moec for every call a bundle's layer serves: its shapes,
its activation, MXFP4 weights, BF16 in and out. Every other call goes to
AITER's own function when AITER is installed, logged once per shape with the
reason; without AITER it raises moec.MoecError. Without AITER, install()
puts a stand-in `aiter` package (ActivationType, QuantType, fused_moe) into
sys.modules, so the engines' imports succeed.
"""

import enum
import importlib
import importlib.util
import logging
import sys
import threading
import types

from ._capi import MoecError, invalid
from .fused import _plan
from .runtime import Bundle, Layer

__all__ = ["install", "uninstall", "installed", "ActivationType", "QuantType"]

logger = logging.getLogger("moec.aiter_compat")


class ActivationType(enum.IntEnum):
    """AITER's ActivationType (csrc/include/aiter_enum.h), for the stand-in."""
    No = -1
    Silu = 0
    Gelu = 1
    Swiglu = 2
    Situv2 = 3


class QuantType(enum.IntEnum):
    """AITER's QuantType (csrc/include/aiter_enum.h), for the stand-in."""
    No = 0
    per_Tensor = 1
    per_Token = 2
    per_1x32 = 3
    per_1x128 = 4
    per_128x128 = 5


# aiter.fused_moe.fused_moe's positional parameters, in order (the
# dispatcher binds an engine's positional call by these names).
_AITER_PARAMETERS = ("hidden_states", "w1", "w2", "topk_weight", "topk_ids", "expert_mask",
                     "activation", "quant_type", "doweight_stage1", "w1_scale", "w2_scale",
                     "a1_scale", "a2_scale", "block_size_M", "num_local_tokens",
                     "moe_sorting_dispatch_policy", "dtype", "hidden_pad", "intermediate_pad",
                     "bias1", "bias2", "splitk", "swiglu_limit", "beta", "linear_beta")
_DEFAULTS = {"expert_mask": None, "activation": None, "quant_type": None,
             "doweight_stage1": False, "w1_scale": None, "w2_scale": None, "a1_scale": None,
             "a2_scale": None, "block_size_M": None, "num_local_tokens": None,
             "moe_sorting_dispatch_policy": 0, "dtype": None, "hidden_pad": 0,
             "intermediate_pad": 0, "bias1": None, "bias2": None, "splitk": 0,
             "swiglu_limit": None, "beta": None, "linear_beta": None}


class Installation:
    """What install() returns: .layers (the moec layers calls may reach),
    .aiter_function (AITER's own fused_moe, None with the stand-in),
    .stand_in (True when no AITER was found), .calls ({"moec": n,
    "aiter": n}), uninstall()."""

    def __init__(self, layers, module, original, stand_in, saved_modules):
        self.layers, self.stand_in = list(layers), stand_in
        self.aiter_function = original
        self.calls = {"moec": 0, "aiter": 0}
        self._module, self._saved_modules = module, saved_modules
        self._logged = set()
        self._lock = threading.Lock()

    def fused_moe(self, *args, **kwargs):
        """aiter.fused_moe.fused_moe's signature, dispatched."""
        values = dict(_DEFAULTS)
        values.update(zip(_AITER_PARAMETERS, args))
        values.update(kwargs)
        try:
            # an argument moec does not know (a newer AITER's) goes to AITER
            bound = _bind(args, kwargs)
            moec_only = {k: bound.pop(k) for k in ("layer", "out", "m", "stream") if k in bound}
            call = _plan(*[values[name] for name in _AITER_PARAMETERS],
                         layers=None if "layer" in moec_only else self.layers,
                         layer=moec_only.get("layer"), out=moec_only.get("out"),
                         m=moec_only.get("m"))
        except MoecError as error:
            if self.aiter_function is None:
                raise
            self._log_once(values, error)
            with self._lock:
                self.calls["aiter"] += 1
            return self.aiter_function(*args, **kwargs)
        with self._lock:
            self.calls["moec"] += 1
        return call.run(moec_only.get("stream"))

    def _log_once(self, values, error):
        key = (_describe(values), error.what)
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        logger.warning("aiter.fused_moe %s: AITER's own fused_moe runs it; moec does not serve "
                    "it (%s)", key[0], error)

    def uninstall(self):
        """Puts back what install() replaced."""
        global _installation
        if self._module is not None and self.aiter_function is not None:
            self._module.fused_moe = self.aiter_function
        for name, module in self._saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        with _install_lock:
            if _installation is self:
                _installation = None


def _bind(args, kwargs):
    if len(args) > len(_AITER_PARAMETERS):
        raise invalid("fused_moe", "%d positional arguments; aiter.fused_moe takes at most %d" %
                      (len(args), len(_AITER_PARAMETERS)))
    bound = dict(zip(_AITER_PARAMETERS, args))
    for name, value in kwargs.items():
        if name in bound:
            raise invalid(name, "given positionally and by keyword")
        if name not in _AITER_PARAMETERS and name not in ("layer", "out", "m", "stream"):
            raise invalid(name, "not an argument of aiter.fused_moe")
        bound[name] = value
    for name in _AITER_PARAMETERS[:5]:
        if name not in bound:
            raise invalid(name, "required (aiter.fused_moe's positional argument)")
    return bound


def _describe(values):
    """The shape key of a call, for the once-per-shape log."""
    def shape(v):
        s = getattr(v, "shape", None)
        return "x".join(str(int(d)) for d in s) if s is not None else "ptr"

    def dtype(v):
        return str(getattr(v, "dtype", "?")).replace("torch.", "")
    activation, quant = values["activation"], values["quant_type"]
    hidden, w1, w2, ids = (values.get(k) for k in ("hidden_states", "w1", "w2", "topk_ids"))
    return ("hidden %s %s, w1 %s %s, w2 %s, topk_ids %s, activation %s, quant_type %s" %
            (shape(hidden).split("x")[-1], dtype(hidden), shape(w1), dtype(w1), shape(w2),
             shape(ids).split("x")[-1], getattr(activation, "name", activation),
             getattr(quant, "name", quant)))


def _layers_from(bundle_or_layers, device, ep, ep_rank, networks):
    if isinstance(bundle_or_layers, Layer):
        return [bundle_or_layers]
    if isinstance(bundle_or_layers, (list, tuple)):
        for i, layer in enumerate(bundle_or_layers):
            if not isinstance(layer, Layer):
                raise invalid("bundle_or_layers[%d]" % i, "expected a moec.Layer, got %s" %
                              type(layer).__name__)
        return list(bundle_or_layers)
    bundle = bundle_or_layers if isinstance(bundle_or_layers, Bundle) else \
        Bundle(bundle_or_layers)
    layers = []
    for network, table_ep, _, _ in bundle.tables():
        if table_ep != ep or (networks is not None and network not in networks) or \
                any(l.network == network for l in layers):
            continue
        if bundle.table_facts(network, ep).fused:
            # MegaMoE peer kernels exchange rows between ranks: not a
            # fused_moe call (they need Layer.bind_peers).
            logger.info("aiter_compat: %s ep%d is a fused MegaMoE table; fused_moe calls do "
                        "not reach it", network, ep)
            continue
        layers.append(Layer(bundle, device, network, ep, ep_rank=ep_rank))
    if not layers:
        raise invalid("bundle_or_layers", "%s has no unfused table at ep=%d%s" %
                      (bundle.path, ep, " for networks %s" % (networks,) if networks else ""))
    return layers


def _stand_in_modules(dispatch):
    package = types.ModuleType("aiter")
    package.__doc__ = "moec's stand-in for AITER (moec.aiter_compat): fused_moe only."
    package.__moec_stand_in__ = True
    package.__path__ = []
    package.ActivationType, package.QuantType = ActivationType, QuantType
    submodule = types.ModuleType("aiter.fused_moe")
    submodule.fused_moe = dispatch
    submodule.ActivationType, submodule.QuantType = ActivationType, QuantType
    package.fused_moe = submodule
    return package, submodule


_install_lock = threading.Lock()
_installation = None


def installed():
    """The current Installation, or None."""
    return _installation


def install(bundle_or_layers, device=None, *, ep=1, ep_rank=0, networks=None):
    """Makes aiter.fused_moe.fused_moe reach moec.

    bundle_or_layers: a moec.Layer, a list of them, or a bundle (moec.Bundle
    or path), for which one Layer per network of its unfused tables at
    `ep` is created on `device` (a moec.Device, None for HIP, "emulated")
    as EP rank `ep_rank`; `networks` limits them. Returns the Installation
    (uninstall() puts everything back); a second install() replaces the
    first."""
    global _installation
    layers = _layers_from(bundle_or_layers, device, int(ep), int(ep_rank), networks)
    with _install_lock:
        previous = _installation
    if previous is not None:
        previous.uninstall()
    parent = sys.modules.get("aiter")
    have_aiter = (parent is not None and not getattr(parent, "__moec_stand_in__", False)) or \
        (parent is None and importlib.util.find_spec("aiter") is not None)
    holder = {}

    def fused_moe(*args, **kwargs):
        return holder["installation"].fused_moe(*args, **kwargs)
    fused_moe.__doc__ = "aiter.fused_moe.fused_moe, dispatched by moec.aiter_compat."
    fused_moe.__wrapped_by_moec__ = True

    if have_aiter:
        module = importlib.import_module("aiter.fused_moe")
        original = module.fused_moe
        installation = Installation(layers, module, original, False, {})
        module.fused_moe = fused_moe
        logger.info("aiter_compat: aiter.fused_moe.fused_moe reaches moec for %s; AITER (%s) "
                    "runs the rest", layers, getattr(module, "__file__", "?"))
    else:
        package, submodule = _stand_in_modules(fused_moe)
        saved = {name: sys.modules.get(name) for name in ("aiter", "aiter.fused_moe")}
        sys.modules["aiter"], sys.modules["aiter.fused_moe"] = package, submodule
        installation = Installation(layers, submodule, None, True, saved)
        logger.info("aiter_compat: no AITER installed; a stand-in aiter.fused_moe reaches moec "
                    "for %s and refuses the rest", layers)
    holder["installation"] = installation
    with _install_lock:
        _installation = installation
    return installation


def uninstall():
    """Undoes the current install(), if any."""
    current = installed()
    if current is not None:
        current.uninstall()

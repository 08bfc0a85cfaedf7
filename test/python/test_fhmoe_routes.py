"""FHMoE (dsv4-pro-tp8) routed slots holding an invalid expert id, on the
emulated device against the oracle.

The layer appends the shared expert to every token as id E with weight 1
in its own last slot and copies the caller's routed slots in front of it
unchanged (docs/runtime-api.md, the forward contract). Its sort and
combine kernels are compiled with shared_last_route: the last slot is valid
only with id E, every routed slot only with an id in [0, E). So a routed
slot holding exactly E is invalid, as in the oracle (docs/reference.md,
FHMoE), which counts any routed id >= E as invalid. The oracle's generated
routing (`--invalid-fraction`) draws invalid ids as -1 or E + (0..6), so
some seeds name E in a routed slot: seed 52 at m = 13 in token 7, slot 2
(weight 0.0885). Through the untyped weight path, so these run on every
torch (docs/python.md, "seed 52")."""

import numpy as np
import pytest

import moec
from moec import npy
from test_fused_moe import POISON, prepare_checkpoint, upload_all

SEED, M = 52, 13
# Routes of seed 52 at m = 13 whose id is exactly E (token, slot).
SEED52_ROUTES_NAMING_E = [(7, 2)]


def routed_ids_naming_e(ids, experts):
    """(token, slot) of every routed slot holding exactly `experts`."""
    return [tuple(int(v) for v in p) for p in np.argwhere(ids == experts)]


def invalidate_routes_naming_e(o, experts):
    """-1 instead of E in an invalid routed slot (both are invalid to the
    layer and the oracle). Rewrites the oracle's input too, so the kernels and
    the oracle read the same ids (the oracle counts both as invalid)."""
    ids = o.arrays["topk_ids"].copy()
    ids[ids == experts] = -1
    o.arrays["topk_ids"] = ids
    npy.save("%s/in/topk_ids.npy" % o.directory, np.ascontiguousarray(ids))


def fhmoe_forward(bundle_path, device, o, layer):
    """Binds the oracle's routed and shared weights (moec.weights.tensor,
    DeviceBuffers), runs one forward into a poisoned output, returns the
    BF16 bits [m, H]."""
    a = o.arrays
    H, m = layer.hidden, a["hidden_states"].shape[0]
    names = ("shared_w13", "shared_w13_scale", "shared_w2", "shared_w2_scale")
    t = moec.weights.tensor
    shared = moec.prepare_shared_expert(
        layer, *[t(a[n], a[n].shape, "float8_e8m0fnu" if "scale" in n else "float8_e4m3fn")
                 for n in names])
    shared = upload_all(device, {n: shared[n] for n in names})
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
    if np.any(bits == 0xFFFF):
        pytest.fail("output elements left poisoned")
    return bits


def _layer(bundle_path, device):
    layer = moec.Layer(moec.Bundle(bundle_path("dsv4_pro_tp8_fhmoe")), device)
    assert layer.shared_expert
    return layer


@pytest.mark.skipif(not moec.has_weight_preparation(),
                    reason="the runtime has no moec_prepare_shared_expert")
def test_fhmoe_seed52_invalid_routes_as_minus_one(bundle_path, device, oracle):
    """Seed 52's data with its routed id E passed as -1: within the oracle's per-element bounds and 2^-7 relative
    L2 (conftest.TOLERANCE; measured 2.3e-3)."""
    layer = _layer(bundle_path, device)
    H, I, E, K = layer.hidden, layer.intermediate, layer.experts, layer.top_k
    o = oracle("fhmoe", H, I, E, K, M, SEED, interleave=0)
    assert routed_ids_naming_e(o.arrays["topk_ids"], E) == SEED52_ROUTES_NAMING_E
    invalidate_routes_naming_e(o, E)
    assert routed_ids_naming_e(o.arrays["topk_ids"], E) == []
    assert o.compare(fhmoe_forward(bundle_path, device, o, layer)) < 4e-3


@pytest.mark.skipif(not moec.has_weight_preparation(),
                    reason="the runtime has no moec_prepare_shared_expert")
def test_fhmoe_routed_id_e_is_invalid(bundle_path, device, oracle):
    """Seed 52's data as generated (token 7, slot 2 names E): the oracle
    leaves that slot out, and so must the layer; before shared_last_route
    the layer added the shared expert a second time with weight 0.0885
    (590 elements of token 7 over their bound, worst 7.6 times it). Within
    the oracle's per-element bounds and 2^-7 relative L2, the bound of the
    -1 test above."""
    layer = _layer(bundle_path, device)
    H, I, E, K = layer.hidden, layer.intermediate, layer.experts, layer.top_k
    o = oracle("fhmoe", H, I, E, K, M, SEED, interleave=0)
    assert routed_ids_naming_e(o.arrays["topk_ids"], E) == SEED52_ROUTES_NAMING_E
    assert o.compare(fhmoe_forward(bundle_path, device, o, layer)) < 4e-3

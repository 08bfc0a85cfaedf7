"""moec.fused_moe serving AITER's A16W4 call (q_dtype_a torch.bfloat16).

AITER's fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, ...,
activation=ActivationType.Situv2, quant_type=QuantType.per_1x32) with BF16
hidden states and MXFP4 weights keeps the tokens in BF16 (a16w4) unless
AITER_SITUV2_A8W4=1 or AITER_SITUV2_A4W4=1 (_fused_moe_impl,
aiter/fused_moe.py). moec's layer of AITER's Kimi K3 A16W4 table
(kimik3_fp4_tuned_fmoe.csv; two of its rows, compiled --small in a few
seconds) serves that call on the emulated device: BF16 rows straight into
W13, no quant kernel, a BF16 intermediate, weights prepared by
moec.prepare_expert_weights exactly as for A4W4. The output, poisoned
first, is compared with `moec reference --a-format bf16 --mid-format bf16`
and the table's SiTUv2 betas on seeded random data, within
conftest.TOLERANCE = 2^-7 relative L2 (the layer bound of every layer
test; twice BF16's unit roundoff, docs/numerics.md "A16W4 layers": the
A16W4 kernel test measures 2.36e-3) and every element within the
oracle's own bound; the FP8-token and MXFP4-token oracles of the same
inputs are farther than that bound. The calls AITER would run in another
format are refused by name with nothing launched, and so is an A16W4 call
to the A4W4 table of the same model. A call without beta / linear_beta
means AITER's 1 and 1: the table compiled with 4 and 25 refuses it, the
same rows compiled with 1 and 1 serve it.
"""

import csv
import os
import re
import sys

import numpy as np
import pytest

import moec
import moec.aiter_compat
from conftest import ROOT, TABLES, TOLERANCE, Oracle, reference_oracle, run, torch_on_device

AITER = os.path.join(TABLES, "aiter")
SWITCHES = ("AITER_SITUV2_A4W4", "AITER_SITUV2_A8W4")


class QuantType:  # aiter.QuantType (aiter/ops/enum.py)
    def __init__(self, name, value):
        self.name, self.value = name, value


class ActivationType:
    def __init__(self, name, value):
        self.name, self.value = name, value


PER_1X32, QUANT_NO = QuantType("per_1x32", 3), QuantType("No", 0)
SILU, SWIGLU, SITUV2 = (ActivationType("Silu", 0), ActivationType("Swiglu", 2),
                        ActivationType("Situv2", 3))


def rows_of(csv_name, path, tokens, inter_dim=384):
    """The shipped AITER CSV's rows at `tokens` (one inter_dim) -> path."""
    with open(os.path.join(AITER, csv_name)) as source:
        reader = csv.DictReader(source)
        rows = [r for r in reader
                if int(r["token"]) in tokens and int(r["inter_dim"]) == inter_dim]
        fields = reader.fieldnames
    assert len(rows) == len(tokens), (csv_name, tokens)
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return rows


@pytest.fixture(scope="module")
def kimi(workdir, device):
    """Kimi K3's A16W4 table and its A4W4 one (rows at token 4 and 32 of
    inter_dim 384, compiled --small to one shape: H = I = 512, 4 experts,
    top_k 4): name -> (layer, the CSV rows)."""
    out = {}
    for name, csv_name in (("a16w4", "kimik3_fp4_tuned_fmoe.csv"),
                           ("a4w4", "kimik3_a4w4_tuned_fmoe.csv")):
        source = os.path.join(workdir, "kimik3-%s.csv" % name)
        rows = rows_of(csv_name, source, (4, 32))
        path = os.path.join(workdir, "kimik3-%s.moeb" % name)
        status, text = run("compile", source, "--skip-unsupported", "--small",
                           "--allow-spills", "-q", "-o", path)
        assert status == 0, text
        bundle = moec.Bundle(path)
        (network, ep, workspace, _), = bundle.tables()
        out[name] = (moec.Layer(bundle, device, network, ep, workspace), rows)
    return out


def situ_betas(layer):
    """The SiTUv2 betas the layer's W13 kernels were compiled with."""
    manifest = layer.bundle.manifest()
    betas = {(k["attributes"]["situ_beta"], k["attributes"]["situ_linear_beta"])
             for k in manifest["kernels"] if k["stage"] == "w13"}
    assert len(betas) == 1, betas
    return tuple(float(v.split(":")[0]) for v in betas.pop())


def kimi_oracle(workdir, layer, m, seed, a_format):
    """`moec reference` of the layer's problem, SiTUv2 with the table's
    betas, tokens and intermediate in `a_format` (bf16: A16W4)."""
    beta, linear_beta = situ_betas(layer)
    directory = os.path.join(workdir, "a16w4-m%d-s%d-%s" % (m, seed, a_format))
    flags = ["--interleave", layer.gate_up_interleave, "--swiglu-limit", layer.swiglu_limit,
             "--activation", "situ-v2", "--situ-beta", beta, "--situ-linear-beta",
             linear_beta, "--a-format", a_format, "--mid-format", a_format]
    return reference_oracle(directory, "tp", layer.hidden, layer.intermediate, layer.experts,
                            layer.top_k, m, seed, flags)


def rel_l2_against(oracle, bits, a_format):
    """`bits` against the oracle of the same inputs with tokens and
    intermediate in `a_format` (no bound asserted: another format's)."""
    flags = list(oracle.flags)
    flags[flags.index("--a-format") + 1] = a_format
    flags[flags.index("--mid-format") + 1] = a_format
    out_dir = os.path.join(oracle.directory, "vs-" + a_format)
    os.makedirs(out_dir, exist_ok=True)
    moec.npy.save(os.path.join(out_dir, "output.npy"), np.ascontiguousarray(bits))
    status, text = run("reference", "--family", "tp", *flags, "--inputs",
                       os.path.join(oracle.directory, "in"), "--compare", out_dir, "-o",
                       os.path.join(oracle.directory, "oracle-" + a_format))
    match = re.search(r"relative L2 ([0-9.eE+-]+)", text)
    assert match, text
    return float(match.group(1))


def engine_tensors(torch, device, layer, arrays):
    """What an engine passes AITER: BF16 hidden states, MXFP4 w1 / w2 (uint8
    where this torch has no float4_e2m1fn_x2) with E8M0 scales, prepared by
    moec.prepare_expert_weights from the oracle's checkpoint-layout
    weights, FP32 routing weights, int32 ids; torch tensors over emulated
    device memory."""
    H, I, E = layer.hidden, layer.intermediate, layer.local_experts
    packed = getattr(torch, "float4_e2m1fn_x2", torch.uint8)
    prepared = dict(moec.prepare_expert_weights(layer, arrays["w13"], arrays["w13_scale"],
                                                arrays["w2"], arrays["w2_scale"]))
    shapes = {"w13": (E, 2 * I, H // 2), "w13_scale": (E, 2 * I, H // 32),
              "w2": (E, H, I // 2), "w2_scale": (E, H, I // 32)}
    t = {n: torch_on_device(device, np.frombuffer(bytes(getattr(v, "data", v)),
                                                  np.uint8).reshape(shapes[n]),
                            packed if n in ("w13", "w2") else torch.uint8)
         for n, v in prepared.items()}
    t["hidden"] = torch_on_device(device, arrays["hidden_states"], torch.bfloat16)
    t["ids"] = torch_on_device(device, arrays["topk_ids"], torch.int32)
    t["weights"] = torch_on_device(device, arrays["topk_weights"], torch.float32)
    return t


def poisoned_out(torch, device, m, H):
    return torch_on_device(device, np.full((m, H), 0xFFFF, np.uint16), torch.bfloat16)


def read_out(device, out, m, H):
    device.synchronize()
    bits = np.frombuffer(out._moec_buffer.download(), np.uint16).reshape(m, H)
    assert not np.any(bits == 0xFFFF), "output elements left unwritten"
    return bits


def forwards(layer):
    return layer.read_status()[1]


@pytest.fixture
def no_switches(monkeypatch):
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("m,seed,explicit", [(3, 61, False), (29, 62, True)])
def test_a16w4_situv2_matches_the_a16w4_oracle(kimi, device, workdir, torch, no_switches, m,
                                               seed, explicit):
    """AITER's SiTUv2 per_1x32 call without either switch is a16w4, and so
    is moec's: the BF16 rows go straight into W13 (the selected
    configuration has no quant kernel). `explicit`: the call passes the
    table's betas and no clamp as AITER's beta=, linear_beta=,
    swiglu_limit= (the betas are passed in both: AITER's are 1 and 1
    when absent, test_absent_betas_mean_aiters_one_and_one)."""
    layer, rows = kimi["a16w4"]
    assert (layer.a_format, layer.facts.mid_format, layer.activation) == \
        ("bf16", "bf16", "situ-v2")
    beta, linear_beta = situ_betas(layer)
    assert (layer.facts.situ_beta, layer.facts.situ_linear_beta) == (beta, linear_beta)
    assert all(r["q_dtype_a"] == "torch.bfloat16" for r in rows)
    # m = 3 takes the token-4 row, m = 29 the token-32 row: two configurations.
    selection = layer.bundle.selection(layer.network, layer.ep, layer.workspace_class, m)
    assert selection.row_m == (4 if m <= 4 else 32)
    manifest = layer.bundle.manifest()
    stages = [manifest["kernels"][k]["stage"]
              for k in manifest["configs"][selection.config]["kernels"]]
    assert stages == ["sort", "w13", "w2", "combine"], stages

    o = kimi_oracle(workdir, layer, m, seed, "bf16")
    t = engine_tensors(torch, device, layer, o.arrays)
    out = poisoned_out(torch, device, m, layer.hidden)
    before = forwards(layer)
    constants = dict(beta=beta, linear_beta=linear_beta)
    if explicit:
        constants["swiglu_limit"] = 0
    result = moec.fused_moe(t["hidden"], t["w13"], t["w2"], t["weights"], t["ids"],
                            activation=SITUV2, quant_type=PER_1X32, w1_scale=t["w13_scale"],
                            w2_scale=t["w2_scale"], layer=layer, out=out, **constants)
    assert result is out
    bits = read_out(device, out, m, layer.hidden)
    assert forwards(layer) - before == 1
    ids = o.arrays["topk_ids"]
    no_route = ~np.any((ids >= 0) & (ids < layer.experts), axis=1)
    assert np.all(bits[no_route] == 0)
    rel = o.compare(bits)  # asserts rel <= TOLERANCE and every element's bound
    print("A16W4 m=%d rel L2 %.3g against the A16W4 oracle" % (m, rel))
    # The oracles that quantise the same tokens (FP8: A8W4, MXFP4: A4W4) are
    # farther than the bound: the comparison tells BF16 tokens from them.
    for wrong in ("fp8", "fp4"):
        other = rel_l2_against(o, bits, wrong)
        print("A16W4 m=%d rel L2 %.3g against the %s oracle" % (m, other, wrong))
        assert other > TOLERANCE, wrong


def refused(call):
    with pytest.raises(moec.MoecError) as error:
        call()
    assert error.value.status_name == "MOEC_STATUS_INVALID_ARGUMENT"
    assert "\n" not in str(error.value)
    return error.value


def test_a16w4_layer_refuses_what_aiter_runs_otherwise(kimi, device, workdir, torch,
                                                        no_switches):
    """Every call AITER would not run as a16w4, and every quantised or
    scaled input, is refused naming the argument and the reason, before
    anything is launched."""
    layer, _ = kimi["a16w4"]
    m = 5
    o = kimi_oracle(workdir, layer, m, 63, "bf16")
    t = engine_tensors(torch, device, layer, o.arrays)
    out = poisoned_out(torch, device, m, layer.hidden)

    def call(**kw):
        args = dict(activation=SITUV2, quant_type=PER_1X32, w1_scale=t["w13_scale"],
                    w2_scale=t["w2_scale"], layer=layer, out=out)
        args.update(kw)
        hidden = args.pop("hidden", t["hidden"])
        return lambda: moec.fused_moe(hidden, t["w13"], t["w2"], t["weights"], t["ids"], **args)

    before = forwards(layer)
    no_switches.setenv("AITER_SITUV2_A4W4", "1")
    error = refused(call())
    assert error.what == "activation"
    assert "ActivationType.Situv2 with AITER_SITUV2_A4W4=1: aiter.fused_moe quantises the " \
        "tokens to FP4 (q_dtype_a torch.float4_e2m1fn_x2)" in error.message
    assert "is an A16W4 table (BF16 tokens, no quant kernel, q_dtype_a torch.bfloat16)" in \
        error.message
    assert "unset AITER_SITUV2_A4W4 and AITER_SITUV2_A8W4" in error.message
    no_switches.setenv("AITER_SITUV2_A8W4", "1")  # AITER tests A8W4 first
    error = refused(call())
    assert error.what == "activation"
    assert "to FP8 (q_dtype_a torch.float8_e4m3fn)" in error.message
    no_switches.delenv("AITER_SITUV2_A4W4")
    error = refused(call())
    assert "with AITER_SITUV2_A8W4=1" in error.message and "an A16W4 table" in error.message
    no_switches.delenv("AITER_SITUV2_A8W4")

    # Not the table's activation: SiLU (also AITER's default) and SwiGLU.
    for activation in (SILU, None, SWIGLU):
        error = refused(call(activation=activation))
        assert error.what == "activation"
        assert "is not what the layer serves" in error.message
        assert "ActivationType.Situv2 (situ-v2)" in error.message
    # BF16 weights, and quantised or scaled inputs.
    error = refused(call(quant_type=QUANT_NO))
    assert error.what == "quant_type" and "A16W4 tables read them as BF16" in error.message
    error = refused(call(a1_scale=t["w13_scale"]))
    assert error.what == "a1_scale"
    # Run-time constants of AITER's kernels that differ from the table's:
    # The table has 4, 25; AITER's FlyDSL stage 1 takes an absent beta as 1.0.
    beta, linear_beta = situ_betas(layer)
    error = refused(call())
    assert error.what == "beta" and "absent" in error.message
    assert "pass beta=4, linear_beta=25" in error.message
    for name, value, served in (("beta", 1.0, beta), ("linear_beta", 1.0, linear_beta)):
        given = dict(beta=beta, linear_beta=linear_beta)
        given[name] = value
        error = refused(call(**given))
        assert error.what == name and "absent" not in error.message
        assert "compiled with %s = %g" % ({"beta": "situ_beta"}.get(
            name, "situ_linear_beta"), served) in error.message
    error = refused(call(swiglu_limit=7.0))
    assert error.what == "swiglu_limit" and "compiled with no clamp" in error.message

    class Fp8Rows:  # AITER's pre-quantised rows (this torch may lack the dtype)
        dtype, shape = "torch.float8_e4m3fn", (m, layer.hidden)

        def data_ptr(self):
            return t["hidden"].data_ptr()
    error = refused(call(hidden=Fp8Rows()))
    assert error.what == "hidden_states"
    assert "pre-quantised" in error.message and "as they are (A16W4)" in error.message
    device.synchronize()
    assert forwards(layer) == before  # nothing launched
    assert np.all(np.frombuffer(out._moec_buffer.download(), np.uint16) == 0xFFFF)


def test_aiters_switch_picks_between_the_a16w4_and_a4w4_tables(kimi, device, workdir, torch,
                                                              no_switches):
    """Kimi K3's two tables of one shape behind aiter.fused_moe
    (moec.aiter_compat's stand-in: no AITER here): the call without a
    switch reaches the A16W4 layer, with AITER_SITUV2_A4W4=1 the A4W4
    layer, each matching its own oracle with one set of prepared weights
    (one MXFP4 layout for both). The A4W4 layer alone refuses the a16w4
    call by name."""
    a16, _ = kimi["a16w4"]
    a4, _ = kimi["a4w4"]
    assert (a16.hidden, a16.intermediate, a16.local_experts, a16.top_k) == \
        (a4.hidden, a4.intermediate, a4.local_experts, a4.top_k)
    assert repr(a16.weight_layout()) == repr(a4.weight_layout())
    m, seed = 13, 64
    o16 = kimi_oracle(workdir, a16, m, seed, "bf16")
    t = engine_tensors(torch, device, a16, o16.arrays)
    installation = moec.aiter_compat.install([a4, a16])
    try:
        aiter_fused_moe = sys.modules["aiter.fused_moe"].fused_moe
        Activation, Quant = moec.aiter_compat.ActivationType, moec.aiter_compat.QuantType
        results = {}
        for switch in (None, "AITER_SITUV2_A4W4"):
            if switch:
                no_switches.setenv(switch, "1")
            counts = forwards(a16), forwards(a4)
            # Each call passes its table's betas as AITER's keywords.
            betas = dict(zip(("beta", "linear_beta"),
                             situ_betas(a16 if switch is None else a4)))
            out = aiter_fused_moe(t["hidden"], t["w13"], t["w2"], t["weights"], t["ids"],
                                  activation=Activation.Situv2, quant_type=Quant.per_1x32,
                                  w1_scale=t["w13_scale"], w2_scale=t["w2_scale"], **betas)
            results[switch] = read_out(device, out, m, a16.hidden)
            ran = (forwards(a16) - counts[0], forwards(a4) - counts[1])
            assert ran == ((1, 0) if switch is None else (0, 1)), (switch, ran)
        assert installation.calls == {"moec": 2, "aiter": 0}
    finally:
        installation.uninstall()
    rel16 = o16.compare(results[None], "a16w4")
    o4 = Oracle(o16.directory, "tp", [f if f != "bf16" else "fp4" for f in o16.flags])
    rel4 = o4.compare(results["AITER_SITUV2_A4W4"], "a4w4")
    print("A16W4 rel L2 %.3g, A4W4 rel L2 %.3g" % (rel16, rel4))

    no_switches.delenv("AITER_SITUV2_A4W4")
    out = poisoned_out(torch, device, m, a4.hidden)
    error = refused(lambda: moec.fused_moe(
        t["hidden"], t["w13"], t["w2"], t["weights"], t["ids"], activation=SITUV2,
        quant_type=PER_1X32, w1_scale=t["w13_scale"], w2_scale=t["w2_scale"], layer=a4,
        out=out))
    assert error.what == "activation"
    assert "quantises the tokens to BF16 (q_dtype_a torch.bfloat16)" in error.message
    assert "is an A4W4 table (MXFP4 tokens, q_dtype_a torch.float4_e2m1fn_x2)" in error.message


def test_absent_betas_mean_aiters_one_and_one(kimi, device, workdir, torch, no_switches):
    """A call without beta / linear_beta is AITER's betas 1 and 1
    (fused_moe_2stages, aiter/fused_moe.py at e4048607a5, for its FlyDSL
    stage 1): the table compiled with 4 and 25 refuses it naming both
    values and the fixes, with nothing launched; the same rows compiled
    `--situ-beta 1 --situ-linear-beta 1` serve it, matching the oracle
    with betas 1 and 1 and not the one with 4 and 25."""
    layer, _ = kimi["a16w4"]
    m, seed = 7, 65
    o = kimi_oracle(workdir, layer, m, seed, "bf16")
    t = engine_tensors(torch, device, layer, o.arrays)
    out = poisoned_out(torch, device, m, layer.hidden)

    def call(target):
        return moec.fused_moe(t["hidden"], t["w13"], t["w2"], t["weights"], t["ids"],
                              activation=SITUV2, quant_type=PER_1X32, w1_scale=t["w13_scale"],
                              w2_scale=t["w2_scale"], layer=target, out=out)

    before = forwards(layer)
    error = refused(lambda: call(layer))
    assert error.what == "beta"
    assert "absent, which AITER's fused_moe passes its FlyDSL stage 1 as 1" in error.message
    assert "compiled with situ_beta = 4, situ_linear_beta = 25" in error.message
    assert "pass beta=4, linear_beta=25 as the model does" in error.message
    assert "compile the table with --situ-beta 1 --situ-linear-beta 1" in error.message
    device.synchronize()
    assert forwards(layer) == before
    assert np.all(np.frombuffer(out._moec_buffer.download(), np.uint16) == 0xFFFF)

    path = os.path.join(workdir, "kimik3-a16w4-b1.moeb")
    status, text = run("compile", os.path.join(workdir, "kimik3-a16w4.csv"),
                       "--skip-unsupported", "--small", "--allow-spills", "-q",
                       "--situ-beta", 1, "--situ-linear-beta", 1, "-o", path)
    assert status == 0, text
    bundle = moec.Bundle(path)
    (network, ep, workspace, _), = bundle.tables()
    ones = moec.Layer(bundle, device, network, ep, workspace)
    assert situ_betas(ones) == (1.0, 1.0) == (ones.facts.situ_beta, ones.facts.situ_linear_beta)
    os.makedirs(os.path.join(workdir, "b1"), exist_ok=True)
    o1 = kimi_oracle(os.path.join(workdir, "b1"), ones, m, seed, "bf16")
    for name, array in o.arrays.items():  # the same seeded inputs
        assert np.array_equal(array, o1.arrays[name]), name
    assert call(ones) is out
    bits = read_out(device, out, m, ones.hidden)
    rel = o1.compare(bits)
    far = rel_l2_against_betas(o, bits)
    print("A16W4 betas 1, 1: rel L2 %.3g against their oracle, %.3g against 4, 25's" %
          (rel, far))
    assert far > TOLERANCE


def rel_l2_against_betas(oracle, bits):
    """`bits` against `oracle` (its own betas) with no bound asserted."""
    out_dir = os.path.join(oracle.directory, "vs-betas")
    os.makedirs(out_dir, exist_ok=True)
    moec.npy.save(os.path.join(out_dir, "output.npy"), np.ascontiguousarray(bits))
    status, text = run("reference", "--family", "tp", *oracle.flags, "--inputs",
                       os.path.join(oracle.directory, "in"), "--compare", out_dir, "-o",
                       os.path.join(oracle.directory, "oracle-vs-betas"))
    match = re.search(r"relative L2 ([0-9.eE+-]+)", text)
    assert match, text
    return float(match.group(1))


def test_a_silu_a16w4_table_is_refused_for_aiters_silu_call(workdir, device, no_switches):
    """AITER quantises the tokens of a SiLU per_1x32 call with FP4 weights
    to MXFP4 whatever M, so an A16W4 table computing SiLU (lit's
    a16w4-layer.table) is no drop-in for it: refused by name, before
    anything is launched (raw pointers: nothing is read)."""
    path = os.path.join(workdir, "a16w4-silu.moeb")
    status, text = run("compile", "-q", os.path.join(ROOT, "test", "lit", "Tools", "Inputs",
                                                     "a16w4-layer.table"), "-o", path)
    assert status == 0, text
    layer = moec.Layer(moec.Bundle(path), device, "a16")
    assert (layer.a_format, layer.activation) == ("bf16", "silu")
    pointer = 1 << 20
    for activation in (SILU, None):
        error = refused(lambda: moec.fused_moe(
            pointer, pointer, pointer, pointer, pointer, activation=activation,
            quant_type=PER_1X32, w1_scale=pointer, w2_scale=pointer, layer=layer, m=4))
        assert error.what == "activation"
        assert "aiter.fused_moe quantises the tokens to FP4" in error.message
        assert "is an A16W4 table (BF16 tokens" in error.message
    assert forwards(layer) == 0

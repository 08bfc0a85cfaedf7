"""moec.select_aiter: AITER's lookup through the C API (docs/aiter-tables.md).

The bundle is compiled from the lit fixtures aiter-fmoe.csv and
aiter-nogfx.csv (3 of their 7 rows compile). Expected rows are AITER's rules
applied by hand to those files; each hit is also checked against
`moec select --json`, the CLI's reading of the same bundle.
"""

import json
import os

import pytest

import moec
from conftest import ROOT, run

INPUTS = os.path.join(ROOT, "test", "lit", "Tools", "Inputs")

KEY = dict(gfx="gfx950", cu_num=256, model_dim=7168, inter_dim=512, expert=384, topk=6,
           act_type="ActivationType.Silu", dtype="torch.bfloat16",
           q_dtype_a="torch.float8_e4m3fn", q_dtype_w="torch.float4_e2m1fn_x2",
           q_type="QuantType.per_1x32", use_g1u1=1, doweight_stage1=0)


@pytest.fixture(scope="module")
def aiter_bundle(workdir):
    out = os.path.join(workdir, "aiter-select.moeb")
    status, text = run("compile", os.path.join(INPUTS, "aiter-fmoe.csv"),
                       os.path.join(INPUTS, "aiter-nogfx.csv"), "--skip-unsupported",
                       "--approximate-schedule", "-q", "-o", out)
    assert status == 0, text
    return out


def cli_select(path, m, key):
    args = ["select", path, "--m", m, "--json"]
    for column, value in key.items():
        args += ["--where", "%s=%s" % (column, value)]
    status, text = run(*args)
    assert status == 0, text
    return json.loads(text)


@pytest.mark.parametrize("m,line,rule,token", [
    (3, 3, "exact", 4), (4, 3, "exact", 4),
    (32768, 7, "exact", 32768), (100000, 7, "exact", 32768),
    (131072, 7, "tier_fallback", 131072), (500000, 7, "tier_fallback", 131072)])
def test_hits_match_aiter_and_the_cli(aiter_bundle, m, line, rule, token):
    with moec.Bundle(aiter_bundle) as bundle:
        s = bundle.select_aiter(m, **KEY)
    assert (s.source_row, s.rule, s.token, s.file) == (line, rule, token, "aiter-fmoe.csv")
    cli = cli_select(aiter_bundle, m, KEY)
    assert cli["source_row"] == s.source_row
    assert cli["kernelName1"] == s.kernelName1
    assert cli["kernelName2"] == s.kernelName2
    assert cli["block_m"] == s.block_m and cli["ksplit"] == s.ksplit
    assert cli["rule"] == s.rule and cli["config"] == s.config


def test_exact_row_fields(aiter_bundle):
    s = moec.select_aiter(aiter_bundle, 3, **KEY)
    assert s.kernelName1 == "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w3_gui_xcd4_fp8"
    assert s.kernelName2 == "flydsl_moe2_afp8_wfp4_bf16_t32x128x256_atomic"
    assert (s.block_m, s.ksplit, s.row_token) == (32, 0, 4)


def test_legacy_table_without_gfx(aiter_bundle):
    key = dict(KEY, model_dim=4096, inter_dim=256, expert=256)
    s = moec.select_aiter(aiter_bundle, 8, **key)
    assert (s.file, s.source_row) == ("aiter-nogfx.csv", 2)


def test_skipped_row_is_not_a_miss(aiter_bundle):
    with pytest.raises(moec.MoecError) as error:
        moec.select_aiter(aiter_bundle, 1, **KEY)
    assert error.value.status_name == "MOEC_STATUS_ROW_NOT_COMPILED"
    assert "aiter-fmoe.csv:2, which was not compiled" in error.value.message


def test_other_activation_is_refused(aiter_bundle):
    with pytest.raises(moec.MoecError) as error:
        moec.select_aiter(aiter_bundle, 4, **dict(KEY, act_type="ActivationType.Swiglu"))
    assert error.value.status_name == "MOEC_STATUS_ROW_NOT_COMPILED"
    assert "no kernel compiled for ActivationType.Swiglu" in error.value.message


def test_miss_names_the_nearest_keys(aiter_bundle):
    with pytest.raises(moec.MoecError) as error:
        moec.select_aiter(aiter_bundle, 4, **dict(KEY, topk=7))
    assert error.value.status_name == "MOEC_STATUS_SELECTION_MISS"
    assert "nearest keys that exist: topk=6 (key has 7)" in error.value.message
    with pytest.raises(moec.MoecError) as error:
        moec.select_aiter(aiter_bundle, 64, **KEY)
    assert "the key has rows for token 1,4,16,32768" in error.value.message


def test_bad_keys(aiter_bundle):
    partial = dict(KEY)
    del partial["doweight_stage1"]
    with pytest.raises(moec.MoecError) as error:
        moec.select_aiter(aiter_bundle, 4, **partial)
    assert error.value.status_name == "MOEC_STATUS_INVALID_ARGUMENT"
    assert "needs doweight_stage1" in error.value.message
    with pytest.raises(moec.MoecError) as error:
        moec.select_aiter(aiter_bundle, 4, token=4, **KEY)
    assert "key column token=4" in error.value.message
    with pytest.raises(moec.MoecError):
        moec.select_aiter(aiter_bundle, -1, **KEY)

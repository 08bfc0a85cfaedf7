"""Bundle.selection on the shipped EP8 tables (docs/selection.md).

flash_ep8.table and pro_ep8.table are compiled at their real shapes, as
engines get them. The expected outcome of each key is the rule applied here
to the table file itself, by brute force: the row with the smallest
|m - M|, the larger one on a tie; above the largest row a miss when M
exceeds a fused table's capacity (the smallest max_tokens of its kernels),
else the largest row as a flagged fallback (above_max=largest) or a miss
(above_max=error); the table of the smallest workspace class >= the request.
"""

import importlib.util
import os

import pytest

import moec
from conftest import TABLES, run

MAX_M = 16400


# The rule is applied by the same code as the `moec select` lit test's
# (test/lit/Tools/Inputs/ep8_select_check.py), so both paths are held to one
# statement of it.
_spec = importlib.util.spec_from_file_location(
    "ep8_select_check",
    os.path.join(os.path.dirname(__file__), "..", "lit", "Tools", "Inputs",
                 "ep8_select_check.py"))
_rule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rule)
read_table = _rule.parse_table
expected = _rule.expected


@pytest.fixture(scope="module")
def ep8(workdir):
    """name -> (path of the real-shape bundle, the table file's selections)."""
    out = {}
    for name in ("flash_ep8", "pro_ep8"):
        path = os.path.join(workdir, name + "-real.moeb")
        status, text = run("compile", "-q", os.path.join(TABLES, name + ".table"), "-o", path)
        assert status == 0, text
        out[name] = (path, read_table(os.path.join(TABLES, name + ".table")))
    return out


@pytest.mark.parametrize("name", ["flash_ep8", "pro_ep8"])
def test_every_m_of_every_table(ep8, name):
    path, tables = ep8[name]
    assert len(tables) == 6
    with moec.Bundle(path) as bundle:
        for table in tables:
            counts = {"hit": 0, "fallback": 0, "miss": 0}
            mismatches = []
            for m in range(MAX_M + 1):
                want = expected(table, m)
                counts[want[0]] += 1
                try:
                    s = bundle.selection(table["network"], table["ep"], table["workspace"], m)
                    got = ("fallback" if s.fallback else "hit", s.row_m, s.config_id)
                    if s.exact != (s.row_m == m):
                        got += ("exact flag %s" % s.exact,)
                except moec.MoecError as e:
                    got = ("miss", e.message) if e.status_name == "MOEC_STATUS_SELECTION_MISS" \
                        else (e.status_name, e.message)
                    if got[0] == "miss" and want[0] == "miss" and want[1] in got[1]:
                        got = want
                if got != want and len(mismatches) < 10:
                    mismatches.append("m %d: %r, expected %r" % (m, got, want))
            assert not mismatches, "%s %s ws%d:\n%s" % (
                name, table["network"], table["workspace"], "\n".join(mismatches))
            # What the headers promise: each class serves 0..workspace; above
            # it the unfused fixed-slot class falls back, everything else
            # refuses (the fused fixed-slot class at its 1024-token capacity).
            assert counts["hit"] == table["workspace"] + 1
            fused = table["network"].endswith("-fused")
            assert (table["capacity"] is not None) == fused
            above = MAX_M - table["workspace"]
            if table["above_max"] == "largest" and not fused:
                assert counts == {"hit": table["workspace"] + 1, "fallback": above, "miss": 0}
            else:
                assert counts == {"hit": table["workspace"] + 1, "fallback": 0, "miss": above}


@pytest.mark.parametrize("name,network", [
    ("flash_ep8", "flash"), ("flash_ep8", "flash-fused"),
    ("pro_ep8", "dsv4-pro"), ("pro_ep8", "dsv4-pro-fused")])
def test_workspace_picks_the_smallest_class_large_enough(ep8, name, network):
    path, tables = ep8[name]
    classes = sorted(t["workspace"] for t in tables if t["network"] == network)
    assert classes == [1024, 8192, 16384]
    with moec.Bundle(path) as bundle:
        for ask in [0, 1] + [c + d for c in classes for d in (-1, 0, 1)]:
            bigger = [c for c in classes if c >= ask]
            if not bigger:
                with pytest.raises(moec.MoecError) as error:
                    bundle.selection(network, 8, ask, 1)
                assert error.value.status_name == "MOEC_STATUS_NOT_FOUND"
                assert ("no selection table for network '%s' ep 8 with workspace class >= %d "
                        "(largest is 16384)" % (network, ask)) in error.value.message
                continue
            # The class's largest row is its workspace: exact there.
            s = bundle.selection(network, 8, ask, bigger[0])
            assert (s.row_m, s.exact, s.fallback) == (bigger[0], True, False), ask
            assert bundle.table_facts(network, 8, ask).workspace == bigger[0]


def test_keys_by_hand(ep8):
    """Keys spelled out from the table files."""
    flash, pro = ep8["flash_ep8"][0], ep8["pro_ep8"][0]
    with moec.Bundle(flash) as f, moec.Bundle(pro) as p:
        # Rows 64 and 66: 65 is a tie, to the larger.
        for bundle, network in ((f, "flash"), (f, "flash-fused"), (p, "dsv4-pro"),
                                (p, "dsv4-pro-fused")):
            s = bundle.selection(network, 8, 1024, 65)
            assert (s.row_m, s.exact, s.fallback) == (66, False, False)
        # Rows 1152 and 2048 of the compact classes: 1600 is a tie.
        assert f.selection("flash", 8, 8192, 1600).row_m == 2048
        assert p.selection("dsv4-pro-fused", 8, 16384, 3072).row_m == 4096
        # Above the fixed-slot class: unfused falls back, fused refuses.
        s = p.selection("dsv4-pro", 8, 1024, 5000)
        assert (s.row_m, s.fallback) == (1024, True)
        with pytest.raises(moec.MoecError) as error:
            p.selection("dsv4-pro-fused", 8, 1024, 1025)
        assert error.value.status_name == "MOEC_STATUS_SELECTION_MISS"
        assert "dsv4-pro-fused ep8 ws1024: m 1025 is above the table's capacity of 1024" \
            in error.value.message
        # select() keeps its (config id, row m) answer.
        assert f.select("flash", 8, 1024, 65) == (f.selection("flash", 8, 1024, 65).config_id, 66)

"""scripts/table_diff.py on two hand-written tables and a predictions CSV
whose answers are worked out by hand below."""
import importlib.util
import os
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts",
                      "table_diff.py")
spec = importlib.util.spec_from_file_location("table_diff", SCRIPT)
table_diff = importlib.util.module_from_spec(spec)
sys.dont_write_bytecode = True  # no __pycache__ in scripts/
spec.loader.exec_module(table_diff)

HEADER = """moec-table 1
# a comment: select network=ignored
problem p family=ep hidden=8 intermediate=8 experts=4 top_k=2
"""

OLD = HEADER + """
select network=flash family=ep ep=4 workspace=1024 transport=none above_max=largest
row m=1 config=a provenance=model-ranked model=moec-cost-2 predicted_us=10
row m=2 config=a provenance=model-ranked model=moec-cost-2 predicted_us=12
row m=4 config=b provenance=model-ranked model=moec-cost-2 predicted_us=20

select network=flash-tp4 family=tp ep=1 workspace=1024 transport=none above_max=largest
row m=8 config=t provenance=model-ranked model=moec-cost-2 predicted_us=30
"""

NEW = HEADER + """
select network=flash family=ep ep=4 workspace=1024 transport=none above_max=largest
row m=1 config=a provenance=model-ranked model=moec-cost-3 predicted_us=11
row m=2 config=b provenance=model-ranked model=moec-cost-3 predicted_us=13
row m=4 config=c provenance=model-ranked model=moec-cost-3 predicted_us=18

select network=flash-tp4 family=tp ep=1 workspace=1024 transport=none above_max=largest
row m=8 config=u provenance=model-ranked model=moec-cost-3 predicted_us=25
"""

# The old configurations' times under the new model at the changed keys:
# a at m=2 (16.0), b at m=4 (24.0); t is no candidate of the new search.
PREDICTIONS = """selection,m,candidate,predicted_us,chosen
flash ep4 ws1024,1,a,11.0,yes
flash ep4 ws1024,2,a,16.0,no
flash ep4 ws1024,2,b,13.0,yes
flash ep4 ws1024,4,b,24.0,no
flash ep4 ws1024,4,c,18.0,yes
flash-tp4 ep1 ws1024,8,u,25.0,yes
"""


@pytest.fixture
def files(tmp_path):
    paths = {}
    for name, text in (("old.table", OLD), ("new.table", NEW),
                       ("new.predictions.csv", PREDICTIONS)):
        path = tmp_path / name
        path.write_text(text)
        paths[name] = str(path)
    return paths


def test_changes_and_old_config_times(files):
    old = table_diff.read_table(files["old.table"])
    new = table_diff.read_table(files["new.table"])
    diff = table_diff.diff_tables(
        old, new, table_diff.read_predictions(files["new.predictions.csv"]))
    assert diff["flash ep4 ws1024"] == (3, [(2, "a", "b", 16.0, 13.0),
                                            (4, "b", "c", 24.0, 18.0)])
    assert diff["flash-tp4 ep1 ws1024"] == (1, [(8, "t", "u", None, 25.0)])


def test_report_counts_and_orders_by_gain(files, capsys):
    assert table_diff.main([files["old.table"], files["new.table"],
                            "--predictions", files["new.predictions.csv"],
                            "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 of 4 keys changed configuration (moec-cost-2 -> moec-cost-3)" in out
    assert "flash ep4 ws1024: 2 of 3 keys" in out
    # The largest gain is b -> c at m=4: 24 -> 18 us, -25 %; only it is
    # listed with --top 1.
    assert "flash ep4 ws1024 m=4: b 24.0 us -> c 18.0 us (-25.0%)" in out
    assert "m=2:" not in out
    # Gains at the two timed changes: -25 % and 13 / 16 - 1 = -18.75 %.
    assert "median -18.8%, largest -25.0%" in out
    assert "1 changed keys whose old configuration is no candidate" in out


def test_unchanged_table_and_missing_file(files, capsys):
    assert table_diff.main([files["old.table"], files["old.table"]]) == 0
    assert "0 of 4 keys changed" in capsys.readouterr().out
    assert table_diff.main([files["old.table"], files["old.table"] + ".x"]) == 2

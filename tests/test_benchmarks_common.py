"""benchmarks/common.py: where a benchmark's results go."""

import json

from benchmarks import common


def test_a_quick_run_never_replaces_the_full_runs_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.write_results("faults", {"quick": False, "rows": [1]})
    common.write_results("faults", {"quick": True, "rows": [2]})
    common.write_results("scale-quick", {"quick": True, "rows": [3]})
    assert json.loads((tmp_path / "faults.json").read_text())["rows"] == [1]
    assert json.loads((tmp_path / "faults-quick.json").read_text())["rows"] == [2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["faults-quick.json", "faults.json", "scale-quick.json"]

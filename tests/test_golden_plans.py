"""The planner picks the same plans as before: tests/golden_plans.py's cases, planned with fake
probers on a fake clock (deterministic, no probe trains), equal tests/data/golden_plans.json.

That file was produced at commit 52f1c9d (before issue 84's house-keeping: decision records,
imports of modules not through a package's face, long functions split; and before the in-run
tuner) by `python -m tests.golden_plans`, and the planner at each commit since gives it byte for
byte: on these inputs, which mirror benchmarks.plan_quality's and benchmarks.prediction's calls,
its choices did not change. It records, for each case, the chosen configuration (layout,
protocol, groups, batches, rate, momentum, weight decay), the prediction (seconds per iteration,
iterations and time to target), what planning spent and why, the probed candidates in their
ranked order, the unprobed ones counted by their reason, and every probe asked for.

Where a change to the planner means to change plans, regenerate it and read the diff (a line per
field, a line per candidate and probe):

    PYTHONPATH=. python -m tests.golden_plans > tests/data/golden_plans.json

and say in the commit which cases changed and why.
"""

import json
import math

from tests.conftest import DATA
from tests.golden_plans import plans

REL = 1e-9


def differences(want, got, where: str = "") -> list[str]:
    """Where `got` differs from `want`: floats within REL of each other are equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}/{k}: missing" for k in want if k not in got]
        out += [f"{where}/{k}: not in the golden file" for k in got if k not in want]
        return out + [d for k in want if k in got for d in differences(want[k], got[k], f"{where}/{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(got)} items, not {len(want)}"]
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in differences(w, g, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers) and not isinstance(want, bool) \
            and not isinstance(got, bool):
        return [] if want == got or math.isclose(want, got, rel_tol=REL) else [f"{where}: {got!r}, not {want!r}"]
    return [] if want == got else [f"{where}: {got!r}, not {want!r}"]


CHOSEN = ("layout", "protocol", "batch_size", "lr", "momentum", "weight_decay")


def headline(case) -> str:
    """A case's chosen configuration in a line."""
    return ", ".join(f"{k} {case.get(k)}" for k in CHOSEN) if isinstance(case, dict) else "a grid"


def test_plans_equal_the_golden_ones():
    want = json.loads((DATA / "golden_plans.json").read_text())
    got = json.loads(json.dumps(plans()))          # tuples as lists, as the file has them
    found = differences(want, got)
    changed = []
    for name in want:
        if n := len(differences(want[name], got.get(name))):
            was, now = headline(want[name]), headline(got.get(name, {}))
            changed.append(f"{name}: {was}{'' if now == was else f' -> {now}'} ({n} fields differ)")
    assert not found, (f"{len(found)} differences from tests/data/golden_plans.json in {len(changed)} cases:\n"
                       + "\n".join(changed) + "\nthe first:\n" + "\n".join(found[:20]))


def test_the_comparison_sees_a_change_and_forgives_rounding():
    golden = {"a/accuracy": {"lr": 0.005, "candidates": [["sync", 64, 2.33298596158, None]]}}
    assert differences(golden, {"a/accuracy": {"lr": 0.005 * (1 + 1e-12),
                                               "candidates": [["sync", 64, 2.33298596158, None]]}}) == []
    moved = {"a/accuracy": {"lr": 0.01, "candidates": [["sync", 32, 2.33298596158, None]]}}
    assert differences(golden, moved) == ["/a/accuracy/lr: 0.01, not 0.005",
                                          "/a/accuracy/candidates[0][1]: 32, not 64"]
    assert differences(golden, {}) == ["/a/accuracy: missing"]

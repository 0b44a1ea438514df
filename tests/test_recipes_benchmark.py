"""benchmarks/recipes.py --decays' glue, with the plan and the runs stubbed."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from benchmarks import recipes
from omnitune.core import plan as plan_mod
from tests.conftest import DATA


def test_each_decay_runs_the_same_plan_from_scratch_pinned_seed_by_seed(tmp_path, monkeypatch):
    """The sync plan, once; then seed by seed across the grid's decays (the recipe's 0.1 first),
    each run from scratch and without re-tuning, at its own decay and seed; a miss counts as the
    limit. Fails if the runs go decay by decay, re-tune, start from the plan's probe, or all run
    at the plan's decay."""
    plan = plan_mod.load(DATA / "plan-v1.json")
    plan = replace(plan, spec=replace(plan.spec, workload="charlm-stdlib", target_accuracy=None, target_loss=1.7))
    asked = []
    monkeypatch.setattr(recipes.api, "plan", lambda request: asked.append(request) or plan)
    order = []

    def run(path, out_dir, options):
        spec = plan_mod.load(path).spec
        order.append((spec.weight_decay, spec.seed, options.retune, options.from_scratch))
        reached = spec.weight_decay != 1.0
        return SimpleNamespace(reached_target=reached, time_to_target_s=100.0 * spec.seed if reached else None,
                               final_loss=1.6 if reached else 1.9)
    monkeypatch.setattr(recipes.api, "run", run)
    rows = recipes.decays(Path("profile.json"), 1.7, 300.0, 2, tmp_path)
    assert len(asked) == 1 and asked[0].protocol == "sync"
    assert order == [(wd, seed, False, True) for seed in (1, 2) for wd in (0.1, 0.01, 1.0)]
    assert [r["weight_decay"] for r in rows] == [0.1, 0.01, 1.0] and rows[0]["recipes"] and rows[0]["chosen"]
    assert rows[0]["median_s"] == 150.0 and rows[2]["times_s"] == [300.0, 300.0] and rows[2]["reached"] == "0 of 2"

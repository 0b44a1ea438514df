from omnitune import replan
from omnitune.optimizer import MU_STAR


def test_retuning_picks_the_lowest_loss_and_drops_groups_at_zero_momentum(tmp_path):
    from omnitune import plan as plan_mod
    from tests.conftest import make_plan

    p = plan_mod.load(make_plan(tmp_path / "p.json", "groups", [["cpu0"], ["cpu1"]], lr=0.1, momentum=0.4))
    grid = replan.retune_grid(p.lr, p.momentum)
    assert (0.1, 0.4) in grid and (0.05, 0.0) in grid and len(grid) == 10
    keep = replan.retuned_plan(p, [(lr, m, 1.0 if (lr, m) != (0.05, 0.3) else 0.5) for lr, m in grid])
    assert (keep.lr, keep.momentum, len(keep.groups)) == (0.05, 0.3, 2)
    fewer = replan.retuned_plan(p, [(lr, m, 0.1 if m == 0.0 else 1.0) for lr, m in grid])
    assert len(fewer.groups) == 1 and fewer.protocol == "sync" and fewer.momentum == MU_STAR

"""omnitune: find the fastest way to train a model on a set of CPUs and GPUs, then run it.

    omnitune.profile(workload, out=...)    -> Profile
    omnitune.plan(omnitune.PlanRequest(...)) -> Plan
    omnitune.run(plan_path, out_dir, omnitune.RunOptions(...)) -> RunSummary
    omnitune.train(workload, out_dir, target_accuracy, ...) -> RunSummary   (all three at once)

(api.py). The names load on first use, so that importing a part of the package, or
`omnitune --help`, does not wait for torch.
"""

from omnitune.core.version import VERSION as __version__

_API = ("PlanRequest", "RunOptions", "TrainSteps", "UserError", "plan", "profile", "run", "train")
__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    if name in _API:
        import omnitune.api as api
        return getattr(api, name)
    raise AttributeError(f"module 'omnitune' has no attribute {name!r}")

"""omnitune: find the fastest way to train a model on a set of CPUs and GPUs, then run it.

    omnitune.profile(workload, out=...)    -> Profile
    omnitune.plan(omnitune.PlanRequest(...)) -> Plan
    omnitune.run(plan_path, out_dir, omnitune.RunOptions(...)) -> RunSummary

(api.py). The names load on first use, so that importing a part of the package, or
`omnitune --help`, does not wait for torch.
"""

__version__ = "0.1.0"

_API = ("PlanRequest", "RunOptions", "UserError", "plan", "profile", "run")
__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    if name in _API:
        from omnitune import api
        return getattr(api, name)
    raise AttributeError(f"module 'omnitune' has no attribute {name!r}")

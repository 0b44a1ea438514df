"""Probes recorded in an optuna study (ask/tell): a trial per probe, so an interrupted search
resumes from what it stored, and the median pruner stops a probe that lags the others at the
same predicted training time. The optimizer never hands optuna its loop."""

from __future__ import annotations

from pathlib import Path

from omnitune.core.errors import UserError
from omnitune.core.files import from_dict, to_dict
from omnitune.efficiency.statmodel import ProbeConfig, ProbeResult, ProbeStatus

NOT_REACHED = 1e9     # the study's value for a probe that gives no estimate


def new_study(storage: str | Path | None = None, name: str = "omnitune"):
    """An optuna study for probes: minimise predicted time, median pruning at equal training time.
    `storage`: a file, optuna's journal of the study (a JSON line per change, cheap to open), from
    which an interrupted search reads its probes back; an optuna storage URL; or None, in memory."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = storage if isinstance(storage, Path) else None
    if path is not None:
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        complete_lines(path)
        storage = JournalStorage(JournalFileBackend(str(path)))
    pruner = optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2)
    try:
        return optuna.create_study(storage=storage, study_name=name, direction="minimize", pruner=pruner,
                                   load_if_exists=True)
    except ValueError as e:     # json's errors among them
        if path is None:
            raise
        raise UserError(f"{path}: the plan's study journal cannot be read ({e}); delete it to plan afresh") from None


def complete_lines(path: Path) -> None:
    """Drop a half-written last line from the journal at `path` (a `plan` killed as it wrote):
    the next change would be appended to it and make the whole file unreadable."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        if f.read(1) != b"\n":
            f.seek(0)
            f.truncate(f.read().rfind(b"\n") + 1)


def ask(study, pc: ProbeConfig):
    """A trial whose parameters are this probe's (enqueued, so the sampler draws nothing)."""
    from optuna.distributions import FloatDistribution

    params = {"samples_per_update": pc.samples_per_update, "lr": pc.lr, "momentum": pc.momentum}
    study.enqueue_trial(params)
    return study.ask({"samples_per_update": FloatDistribution(1, 1 << 24, log=True),
                      "lr": FloatDistribution(1e-9, 1e3, log=True), "momentum": FloatDistribution(-0.999, 0.999)})


def tell(study, trial, r: ProbeResult, sec_per_iter: float) -> None:
    """Record the probe; its value is the predicted time to target."""
    from optuna.trial import TrialState

    trial.set_user_attr("probe", to_dict(r))
    if r.status == ProbeStatus.PRUNED:
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, r.iters_to_target * sec_per_iter if r.iters_to_target is not None else NOT_REACHED)


def stored_results(study) -> dict[ProbeConfig, ProbeResult]:
    """Probe results an earlier (perhaps interrupted) search left in the study."""
    out = {}
    for t in study.get_trials(deepcopy=False):
        if "probe" in t.user_attrs:
            r = from_dict(ProbeResult, t.user_attrs["probe"], f"study trial {t.number}")
            out[r.config] = r
    return out

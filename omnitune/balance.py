"""Performance-aware batch sizes: the arithmetic, shared by the planner and the workers (pure)."""

from __future__ import annotations


def apportion(shares: list[float], total: int) -> list[int]:
    """Whole batch sizes of at least 1, in proportion to `shares`, adding up to `total`."""
    x = [max(s, 1.0) for s in shares]
    x = [v * total / sum(x) for v in x]
    out = [max(1, int(v)) for v in x]
    by_remainder = sorted(range(len(x)), key=lambda j: x[j] - int(x[j]), reverse=True)
    for j in by_remainder[:max(total - sum(out), 0)]:
        out[j] += 1
    return out


def step_time_line(history: dict[int, float], batch: int) -> tuple[float, float]:
    """(alpha, beta) of t(b) = alpha + beta * b through the two most recent batch sizes."""
    sizes = list(history)
    if len(sizes) >= 2:
        (b1, t1), (b2, t2) = [(b, history[b]) for b in sizes[-2:]]
        beta = (t2 - t1) / (b2 - b1)
        if beta > 0:
            return max(t2 - beta * b2, 0.0), beta
    return 0.0, history[batch] / batch


def equal_time_batches(alpha: list[float], beta: list[float], total: int) -> list[int]:
    """Batches b_i that make every member's step t_i(b) = alpha_i + beta_i * b take the same time T,
    adding up to `total`: b_i = (T - alpha_i) / beta_i with T = (total + sum alpha/beta) / sum 1/beta.

    Shares proportional to measured speed would instead starve a slow member: its small batch
    runs less efficiently, so it measures slower still, and the shares run away.
    """
    T = (total + sum(a / b for a, b in zip(alpha, beta))) / sum(1 / b for b in beta)
    return apportion([(T - a) / b for a, b in zip(alpha, beta)], total)


class GroupBalancer:
    """Performance-aware batches across asynchronous groups (Ji et al. 2019), as the parameter
    server sees them: it times each group between two of its gradients (a step and an exchange)
    and, every `period` gradients, gives each group the total batch that makes every group's step
    take as long, keeping the sum. Each group's line t(b) = alpha + beta * b comes from the last
    two totals it ran (step_time_line), as a synchronous group's members' do."""

    RECENT = 20     # intervals kept per group and batch: their median times the group

    def __init__(self, totals: dict[int, int], period: int):
        self.totals, self.period = dict(totals), period
        self.last: dict[int, float] = {}                           # when each group's last gradient came
        self.times: dict[int, dict[int, list[float]]] = {g: {} for g in totals}

    def heard(self, group: int, batch: int, now: float) -> None:
        if group in self.last:
            recent = self.times[group].setdefault(batch, [])
            recent.append(now - self.last[group])
            del recent[:-self.RECENT]
        self.last[group] = now

    def rebalance(self) -> dict[int, int]:
        """New totals per group, once every group has been timed at its current total."""
        history = {g: {b: sorted(ts)[len(ts) // 2] for b, ts in self.times[g].items()} for g in self.totals}
        if any(self.totals[g] not in history[g] for g in self.totals):
            return self.totals
        groups = list(self.totals)
        lines = [step_time_line(history[g], self.totals[g]) for g in groups]
        new = equal_time_batches([a for a, _ in lines], [b for _, b in lines], sum(self.totals.values()))
        self.totals = dict(zip(groups, new))
        return self.totals

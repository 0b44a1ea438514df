"""What a run trains to: a test accuracy to reach (higher is better) or a test loss to get under
(lower is better, as a language model's bits per character).

The search, the probes, their curve fits and the run's ETA all read one score, higher is better:
the accuracy, or 1 - loss. The error they model, 1 - score, is then 1 - accuracy or the loss
itself: both fall towards a floor as training goes on, which is the shape statmodel fits.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    value: float
    on_loss: bool = False

    @property
    def score(self) -> float:
        """The target as a score."""
        return 1.0 - self.value if self.on_loss else self.value

    def score_of(self, loss: float, accuracy: float) -> float:
        """A test reading's score."""
        return 1.0 - loss if self.on_loss else accuracy

    def reading(self, score: float) -> float:
        """A score as the metric the target is on (score_of's inverse)."""
        return 1.0 - score if self.on_loss else score

    @property
    def metric(self) -> str:
        return "test loss" if self.on_loss else "test accuracy"

    @property
    def option(self) -> str:
        return "--target-loss" if self.on_loss else "--target-accuracy"

    def __str__(self) -> str:
        return f"{self.metric} {'<=' if self.on_loss else '>='} {self.value:g}"


def from_fields(accuracy: float | None, loss: float | None) -> Target | None:
    """The target that a run spec's or a request's two fields name (a loss before an accuracy)."""
    if loss is not None:
        return Target(loss, on_loss=True)
    return Target(accuracy) if accuracy is not None else None


def spec_fields(target: "Target | float | None") -> dict:
    """A run spec's target fields (target_accuracy, target_loss) for a target, or for none."""
    t = None if target is None else of(target)
    return {"target_accuracy": t.value if t and not t.on_loss else None,
            "target_loss": t.value if t and t.on_loss else None}


def of(target: "Target | float") -> Target:
    """A Target from a Target or a plain accuracy (the older calling convention)."""
    return target if isinstance(target, Target) else Target(float(target))

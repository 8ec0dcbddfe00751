"""Budget checks and best-snapshot selection for the baseline learners.

Every baseline (SB3 in this process, RLlib in its own environment's worker) is
scored on the validation period every ``eval_every`` env steps and once at the end,
with the evaluator our runs use (`trader.agents.evaluator.market_evaluator`), and keeps
its best snapshot by the rule our runs' snapshots are chosen by
(`trader.agents.evaluator.BestSnapshot`): one `Selection` for all of them, so they are
selected exactly alike. The library saves the snapshot itself (the ``save`` callback):
SB3's zip, RLlib's exported MLP.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from trader.agents.evaluator import BestSnapshot
from trader.libraries.budget import Budget

RowFn = Callable[[dict[str, Any]], None]


class Selection:
    """A learner's budget clock, its validation history and its best snapshot
    (`BestSnapshot`: a NaN score ranks lowest, but the first snapshot is always saved so
    that a model file exists)."""

    def __init__(self, evaluator: Any, budget: Budget, eval_every: int, progress: RowFn | None = None) -> None:
        self.evaluator, self.budget, self.eval_every, self.progress = evaluator, budget, eval_every, progress
        self.start = time.perf_counter()
        self.last_eval = 0
        self.best = BestSnapshot()
        self.history: list[dict[str, float]] = []
        """One row per validation: step, seconds, score (and the evaluator's metrics)."""

    def restart_clock(self) -> None:
        self.start = time.perf_counter()

    @property
    def best_score(self) -> float | None:
        """The best snapshot's validation score; None while none, or when it was NaN."""
        score = self.best.metrics.get("score")
        return None if score is None or math.isnan(score) else score

    @property
    def best_step(self) -> int | None:
        return self.best.step

    @property
    def best_metrics(self) -> dict[str, float]:
        return self.best.metrics

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start

    def spent(self, steps: int) -> bool:
        """Whether the budget is used up after `steps` env steps."""
        if self.budget.steps is not None and steps >= self.budget.steps:
            return True
        return self.budget.seconds is not None and self.seconds >= self.budget.seconds

    def due(self, steps: int) -> bool:
        """Whether a validation is due at `steps` (every `eval_every` steps; 0: never before the end)."""
        return self.eval_every > 0 and steps - self.last_eval >= self.eval_every

    def validate(self, policy: Any, steps: int, save: Callable[[], None]) -> None:
        """Score `policy` (``act(obs, deterministic)``) now; `save` it if it is the best so far.
        A second call at the same step does nothing (the end of training after a due one)."""
        if steps == self.last_eval and self.history:
            return
        self.last_eval = steps
        metrics = self.evaluator.evaluate(policy)
        row = {"step": float(steps), "seconds": self.seconds, **metrics}
        self.history.append(row)
        if self.best.offer(steps, metrics):
            save()
        if self.progress is not None:
            self.progress(row)

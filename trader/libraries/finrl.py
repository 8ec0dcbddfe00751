"""FinRL's ensemble strategy (Yang, Liu, Zhong and Walid, ICAIF 2020) on our data and rules.

The procedure, as FinRL publishes it (``DRLEnsembleAgent.run_ensemble_strategy``):
the trading period is cut into consecutive windows (FinRL: 63 trading days each).
For each window, A2C, PPO and DDPG are trained from scratch on all data before the
validation window, the validation window being the same number of sessions right
before the trading window; the learner with the best validation Sharpe trades the
window. The account carries over from window to window: one strategy across the
trading period.

Two differences, both deliberate:

- the Sharpe ratio is annualised correctly: daily returns times sqrt(252), through
  `trader.metrics` as every score in the project (FinRL's code multiplies by
  sqrt(4)); the ranking of the three learners is the same either way within a
  window, the reported figures are not;
- FinRL's turbulence switch (sell everything when a turbulence index passes a
  threshold) is not part of it: the env rules are the run's, as for every row.

Here the trading period is the data set's test period, cut into ``windows`` parts
of whole sessions (the one knob instead of FinRL's 63 days: a minute data set's
test period is often shorter than 63 days).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from market_envs.data import DataError, MarketData
from trader.agents.evaluator import rank_score
from trader.errors import ConfigError

LEARNERS = ("a2c", "ppo", "ddpg")
"""FinRL's three learners, in FinRL's order (ties go to the first)."""


@dataclass(frozen=True)
class Window:
    """One step of the rolling procedure; every bound a bar timestamp, end excluded."""

    train: tuple[pd.Timestamp, pd.Timestamp]
    validation: tuple[pd.Timestamp, pd.Timestamp]
    trade: tuple[pd.Timestamp, pd.Timestamp | None]
    """The last window trades to the end of the data (None)."""

    def as_dict(self) -> dict[str, list[str | None]]:
        return {k: [None if t is None else str(t) for t in getattr(self, k)] for k in ("train", "validation", "trade")}


def rolling_windows(data: MarketData, trade_start: Any, windows: int) -> list[Window]:
    """Cut the sessions from `trade_start` on into `windows` trading windows, each with
    a validation window of as many sessions right before it and all earlier data to
    train on."""
    if windows < 1:
        raise ConfigError(f"the FinRL ensemble needs at least 1 window, got {windows}")
    stamps = data.timestamps
    dates = stamps.tz_localize(None).normalize() if stamps.tz is not None else stamps.normalize()
    first_bar_of = {}  # session date -> index of its first bar
    for i, d in enumerate(dates):
        first_bar_of.setdefault(d, i)
    sessions = list(first_bar_of)
    start = int(stamps.searchsorted(_exchange_time(trade_start, stamps.tz), "left"))
    if start >= len(stamps):
        raise DataError(f"data set {data.name!r} has no bar from {trade_start} on to trade")
    trade_sessions = [s for s in sessions if first_bar_of[s] >= start]
    if len(trade_sessions) < windows:
        raise DataError(f"{len(trade_sessions)} trading sessions cannot make {windows} windows")
    result = []
    for part in np.array_split(np.arange(len(trade_sessions)), windows):
        first = sessions.index(trade_sessions[part[0]])
        size = len(part)
        if first - size < 1:
            raise DataError(
                f"not enough sessions before {trade_sessions[part[0]].date()} for a training and "
                f"a validation window of {size} sessions"
            )
        val_start = stamps[first_bar_of[sessions[first - size]]]
        trade_start_bar = stamps[first_bar_of[sessions[first]]]
        end_index = part[-1] + 1
        trade_end = stamps[first_bar_of[trade_sessions[end_index]]] if end_index < len(trade_sessions) else None
        result.append(Window((stamps[0], val_start), (val_start, trade_start_bar), (trade_start_bar, trade_end)))
    return result


def _exchange_time(value: Any, tz: Any) -> pd.Timestamp:
    """A timestamp or date; naive ones are read as exchange time."""
    stamp = pd.Timestamp(value)
    return stamp.tz_localize(tz) if stamp.tz is None and tz is not None else stamp


def pick_learner(scores: dict[str, float], order: Sequence[str] = LEARNERS) -> str:
    """The learner with the best validation Sharpe, ranked as snapshots are
    (`trader.agents.evaluator.rank_score`: NaN lowest); ties go to the first in `order`
    (FinRL's A2C, PPO, DDPG)."""
    if not scores:
        raise ConfigError("no learner to pick from")
    ranked = [name for name in order if name in scores] + [name for name in scores if name not in order]
    return max(ranked, key=lambda name: rank_score(scores[name]))  # max keeps the first of equal keys


FitFn = Callable[[str, MarketData, MarketData, int], tuple[Any, float, dict[str, Any]]]
"""(learner, train panel, validation panel, window index) -> (policy, its validation
Sharpe, details); the policy has ``act(obs, deterministic=True)``; details: steps,
seconds, model file, ..."""


@dataclass
class WindowChoice:
    """What the ensemble did in one window."""

    window: Window
    scores: dict[str, float]
    chosen: str
    policy: Any
    details: dict[str, dict[str, Any]]


def run_ensemble(
    data: MarketData, windows: list[Window], fit: FitFn, learners: Sequence[str] = LEARNERS
) -> list[WindowChoice]:
    """Train every learner in every window, score each on the window's validation
    period and keep the best: FinRL's procedure, with the training and scoring given."""
    choices = []
    for k, window in enumerate(windows):
        train = data.slice(*window.train)
        validation = data.slice(*window.validation)
        policies, scores, details = {}, {}, {}
        for learner in learners:
            policies[learner], scores[learner], details[learner] = fit(learner, train, validation, k)
        chosen = pick_learner(scores, learners)
        choices.append(WindowChoice(window, scores, chosen, policies[chosen], details))
    return choices

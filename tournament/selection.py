"""The tournament's result: its best pod, or an ensemble of pods that earned a place.

After the last pod, the leaderboard's entries are the candidates. For each, its
**validation record** is the daily returns of its best snapshot's validation pass
(the pod's ``trials.parquet`` row at its ``best.json`` step: the pass that made it a
candidate).

1. **Membership.** A pod joins the ensemble only if its validation record shows a
   Sharpe ratio above zero at 95%: PSR(0) >= `MEMBERSHIP_PSR` (Bailey and López de
   Prado's probabilistic Sharpe ratio, with the record's own skew and kurtosis; the
   figure every report prints). Rank alone let a pod with a validation Sharpe of -5.6
   into the demo's ensemble, which then lost 31.7% while its best member made 61%.
   At most ``ensemble_k`` pods join, the best-scoring first. The deflation for having
   picked the best of many trials is not asked of each member (it would keep out every
   member of a small tournament); it is applied to the result, below.
2. **The ensemble** exists only with two members or more (one member is that pod).
   Its members' weights are equal or proportional to their validation Sharpe ratios
   (``ensemble_weighting``), and it trades as `trader.agents.ensemble.EnsemblePolicy`
   combines them.
3. **Scoring.** The ensemble is validated on the same period by the same evaluator as
   every pod (`trader.agents.evaluator.market_evaluator`), and that pass is one more trial: it is
   appended to the tournament's ``trials.parquet`` (``pod_id`` "ensemble"), so the
   report's trial count and every DSR include it.
4. **The result** is whichever of the best pod and the ensemble scores higher on
   validation; the best pod when there is no ensemble. ``selection.json`` records the
   candidates, the bar, the members, both scores and the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trader import rundir, stats

MEMBERSHIP_PSR = 0.95
"""A pod joins the ensemble only if PSR(0) of its validation record is at least this."""

WEIGHTINGS = ("equal", "score")
"""How the ensemble weights its members: equally, or in proportion to their validation Sharpe."""


@dataclass(frozen=True)
class Candidate:
    """A leaderboard entry with its validation record."""

    pod_id: str
    checkpoint: str
    """The pod's best checkpoint, relative to the run directory."""
    score: float
    """Its validation score (the leaderboard's: the annualised Sharpe ratio on a market)."""
    psr: float
    """P[true Sharpe > 0] of its validation record (NaN when it cannot be computed)."""
    daily: pd.Series | None = field(default=None, repr=False, compare=False)
    """The daily returns of its best validation pass (None when the pod recorded none)."""

    @property
    def qualified(self) -> bool:
        return not math.isnan(self.psr) and self.psr >= MEMBERSHIP_PSR


@dataclass(frozen=True)
class Selection:
    """What `select` decided (written as ``selection.json``)."""

    candidates: list[Candidate]
    members: list[Candidate]
    weights: list[float]
    weighting: str
    best_score: float
    ensemble_score: float | None
    """The ensemble's validation Sharpe ratio; None when there is no ensemble."""
    result: str
    """"best" or "ensemble"."""

    @property
    def has_ensemble(self) -> bool:
        return self.ensemble_score is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": rundir.SELECTION_VERSION,
            "bar": {"statistic": "psr", "threshold": MEMBERSHIP_PSR},
            "weighting": self.weighting,
            "candidates": [
                {"pod_id": c.pod_id, "score": _number(c.score), "psr": _number(c.psr), "qualified": c.qualified}
                for c in self.candidates
            ],
            "members": [c.pod_id for c in self.members],
            "member_checkpoints": [c.checkpoint for c in self.members],
            "weights": self.weights,
            "best_score": _number(self.best_score),
            "ensemble_score": None if self.ensemble_score is None else _number(self.ensemble_score),
            "result": self.result,
            "sentence": self.sentence(),
        }

    def sentence(self) -> str:
        """One line for the CLI, the demo and the report."""
        qualified = sum(c.qualified for c in self.candidates)
        bar = f"PSR(0) >= {MEMBERSHIP_PSR:g} on validation"
        if not self.has_ensemble:
            why = "no pod qualified" if qualified == 0 else "only one pod qualified"
            return (
                f"result: the best pod (validation Sharpe {self.best_score:.2f}); no ensemble: {why} "
                f"({bar}, {len(self.candidates)} candidates)"
            )
        chosen = "the ensemble" if self.result == "ensemble" else "the best pod"
        return (
            f"result: {chosen} (validation Sharpe: ensemble of {len(self.members)} "
            f"{self.ensemble_score:.2f}, best pod {self.best_score:.2f}; members: {bar})"
        )


def candidates(run_dir: str | Path, entries: list[Any]) -> list[Candidate]:
    """The leaderboard's entries (ranked, best first) with their validation records."""
    return [_candidate(Path(run_dir), entry) for entry in entries]


def _candidate(root: Path, entry: Any) -> Candidate:
    daily = validation_record(root / rundir.PODS_DIR / entry.pod_id)
    psr = math.nan
    if daily is not None:
        moments = stats.sharpe_moments(daily.to_numpy(dtype=float))
        if moments.reason is None:
            psr = float(
                stats.probabilistic_sharpe_ratio(moments.sharpe, 0.0, moments.days, moments.skew, moments.kurtosis)
            )
    return Candidate(entry.pod_id, entry.checkpoint, float(entry.score), psr, daily)


def validation_record(pod: Path) -> pd.Series | None:
    """The daily returns of a pod's best validation pass (its ``trials.parquet`` row at
    the step of ``checkpoints/best.json``); None when the pod recorded none."""
    trials, step = pod / rundir.TRIALS, rundir.best_step(pod)
    if not trials.is_file() or step is None:
        return None
    keys, returns = rundir.read_trials(trials)
    rows = np.flatnonzero((keys["step"] == step).to_numpy())
    return None if not len(rows) else returns.iloc[rows[0]].dropna()


def members(ranked: list[Candidate], k: int) -> list[Candidate]:
    """The qualified candidates, best first, at most ``k``."""
    return [c for c in ranked if c.qualified][:k]


def member_weights(chosen: list[Candidate], weighting: str) -> list[float]:
    """Equal weights, or weights proportional to the members' validation Sharpe ratios
    (all above zero, since each member's PSR(0) is at least 0.95); they sum to 1."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    raw = [1.0] * len(chosen) if weighting == "equal" else [max(c.score, 0.0) for c in chosen]
    total = sum(raw)
    if total <= 0:
        raw, total = [1.0] * len(chosen), float(len(chosen))
    return [w / total for w in raw]


def choose(best_score: float, ensemble_score: float | None) -> str:
    """ "ensemble" when it scored strictly higher on validation than the best pod, else "best"."""
    if ensemble_score is None or math.isnan(ensemble_score):
        return "best"
    return "ensemble" if math.isnan(best_score) or ensemble_score > best_score else "best"


def _number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)

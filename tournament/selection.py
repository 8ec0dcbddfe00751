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
4. **The result** is the ensemble unless the best pod beats it on validation by more than
   being the best of many explains; the best pod when there is no ensemble. The best pod's
   validation score is the highest of the N candidates', so it is biased upward (the winner's
   curse), and the ensemble's, one more trial, is not: comparing the two scores as they stand
   chose the best pod on 5 of 6 seeds of independent runs where the ensemble was better on the
   test period (benchmarks/RESULTS.md, "The result rule"). So the two validation records are
   compared by a paired test of their Sharpe ratios on the same days (`trader.stats.sharpe_difference`),
   and the best pod wins only at z >= the normal quantile of 1 - `RESULT_ALPHA` / N (Bonferroni over the
   N validation passes it was the best of: the tournament's trial count, as every DSR counts it; the
   leaderboard's candidates where there is no ``trials.parquet``). Where the test cannot be made (a record missing, or the two
   the same series) the scores decide as they stand, a tie to the best pod, the simpler strategy.
   ``selection.json`` records the candidates (each with the ``reason`` for its ensemble weight:
   `Selection.reason`), the bar, the members, both scores, the test and the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from trader import rundir, stats

MEMBERSHIP_PSR = 0.95
"""A pod joins the ensemble only if PSR(0) of its validation record is at least this."""

RESULT_ALPHA = 0.05
"""The best pod is the result over the ensemble only when its lead on validation is significant at
this level, shared among the N validation passes it was the best of."""

WEIGHTINGS = ("equal", "score")
"""How the ensemble weights its members: equally, or in proportion to their validation scores."""


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
class Choice:
    """Which of the best pod and the ensemble is the tournament's result, and the evidence."""

    result: str
    """"best" or "ensemble"."""
    z: float = math.nan
    """The paired test's z of the best pod's Sharpe ratio over the ensemble's (NaN: not tested)."""
    critical: float = math.nan
    """The z the best pod needed: the normal quantile of 1 - `RESULT_ALPHA` / N (NaN: not tested)."""
    best_of: int = 0
    """N, the validation passes the best pod was the best of (`best_of`)."""
    reason: str | None = None
    """Why the scores decided as they stand, without the test (None when tested, or no ensemble)."""

    @property
    def tested(self) -> bool:
        return not math.isnan(self.z)

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": "sharpe_difference",
            "alpha": RESULT_ALPHA,
            "best_of": self.best_of,
            "z": _number(self.z),
            "critical": _number(self.critical),
            "reason": self.reason,
        }

    def clause(self) -> str:
        """The evidence, in words: what the best pod needed over the ensemble and what it had."""
        if not self.tested:
            return f"decided by score: {self.reason}"
        return (
            f"the best pod, best of {self.best_of}, needs z >= {self.critical:.2f} over the ensemble, has {self.z:.2f}"
        )


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
    choice: Choice

    @property
    def result(self) -> str:
        """ "best" or "ensemble"."""
        return self.choice.result

    @property
    def has_ensemble(self) -> bool:
        return self.ensemble_score is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": rundir.SELECTION_VERSION,
            "bar": {"statistic": "psr", "threshold": MEMBERSHIP_PSR},
            "weighting": self.weighting,
            "candidates": [
                {
                    "pod_id": c.pod_id,
                    "score": _number(c.score),
                    "psr": _number(c.psr),
                    "qualified": c.qualified,
                    "reason": self.reason(c),
                }
                for c in self.candidates
            ],
            "members": [c.pod_id for c in self.members],
            "member_checkpoints": [c.checkpoint for c in self.members],
            "weights": self.weights,
            "best_score": _number(self.best_score),
            "ensemble_score": None if self.ensemble_score is None else _number(self.ensemble_score),
            "result": self.result,
            "comparison": self.choice.to_dict() if self.has_ensemble else None,
            "sentence": self.sentence(),
        }

    def reason(self, candidate: Candidate) -> str:
        """Why `candidate` has its weight in the ensemble, in words: a member's weight, or what
        kept it out (the bar; no second pod to make an ensemble with; the ensemble's ``k``)."""
        weights = dict(zip((c.pod_id for c in self.members), self.weights))
        if candidate.pod_id in weights:
            weight = weights[candidate.pod_id]
            if weight > 0:
                return f"member of the ensemble, weight {weight:.2f} ({self.weighting} weighting)"
            return (
                f"member with weight 0: the weights follow the validation scores and its score "
                f"{candidate.score:.2f} is not above 0"
            )
        if not candidate.qualified:
            if math.isnan(candidate.psr):
                return "not qualified: no PSR(0), its validation record is missing or too short to give one"
            return f"not qualified: PSR(0) {candidate.psr:.2f} on validation, below the bar of {MEMBERSHIP_PSR:g}"
        if not self.members:
            return "qualified, but no other pod did: an ensemble needs two members, so there is none"
        return (
            f"qualified, but the ensemble takes the {len(self.members)} best-scoring qualified pods "
            "(ensemble_k) and this one scored below them"
        )

    def sentence(self) -> str:
        """One line for the CLI, the demo and the report."""
        qualified = sum(c.qualified for c in self.candidates)
        bar = f"PSR(0) >= {MEMBERSHIP_PSR:g} on validation"
        if not self.has_ensemble:
            why = "no pod qualified" if qualified == 0 else "only one pod qualified"
            return (
                f"result: the best pod (validation score {self.best_score:.2f}); no ensemble: {why} "
                f"({bar}, {len(self.candidates)} candidates)"
            )
        chosen = "the ensemble" if self.result == "ensemble" else "the best pod"
        return (
            f"result: {chosen} (validation score: ensemble of {len(self.members)} "
            f"{self.ensemble_score:.2f}, best pod {self.best_score:.2f}; {self.choice.clause()}; members: {bar})"
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


def ensemble_record(root: str | Path) -> tuple[float, pd.Series] | None:
    """The ensemble's validation pass as the tournament recorded it (its ``trials.parquet`` row
    `rundir.ENSEMBLE_TRIAL`): (score, daily returns); None where it recorded none."""
    path = Path(root) / rundir.TRIALS
    if not path.is_file():
        return None
    keys, returns = rundir.read_trials(path)
    rows = np.flatnonzero((keys["pod_id"] == rundir.ENSEMBLE_TRIAL).to_numpy())
    return None if not len(rows) else (float(keys["score"].iloc[rows[0]]), returns.iloc[rows[0]].dropna())


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


def choose(best: Candidate, ensemble_score: float | None, ensemble_daily: pd.Series | None, n: int) -> Choice:
    """The result: the ensemble, unless the best pod of ``n`` candidates beats it on validation by
    more than the best of ``n`` explains (the module's rule 4); the best pod without an ensemble."""
    if ensemble_score is None or math.isnan(ensemble_score):
        return Choice("best", best_of=n)
    if best.daily is None or ensemble_daily is None:
        missing = "the best pod" if best.daily is None else "the ensemble"
        return _by_score(best.score, ensemble_score, n, f"{missing} has no validation record")
    first, second = best.daily.align(ensemble_daily, join="inner")
    difference = stats.sharpe_difference(first.to_numpy(dtype=float), second.to_numpy(dtype=float))
    if difference.reason is not None:
        return _by_score(best.score, ensemble_score, n, difference.reason)
    critical = float(scipy_stats.norm.isf(RESULT_ALPHA / n))
    return Choice("best" if difference.z >= critical else "ensemble", difference.z, critical, n)


def _by_score(best_score: float, ensemble_score: float, n: int, reason: str) -> Choice:
    """The choice where the records cannot be tested: the higher score as it stands, a tie to the best pod."""
    better = math.isnan(best_score) or ensemble_score > best_score
    return Choice("ensemble" if better else "best", best_of=n, reason=reason)


def select(
    root: str | Path,
    entries: list[Any],
    k: int,
    weighting: str,
    validate: Callable[[list[Candidate], list[float]], tuple[float, pd.Series | None]],
) -> tuple[Selection, pd.Series | None] | None:
    """The tournament's result from its leaderboard's entries (ranked, best first), and the
    ensemble's validation record (None without an ensemble); None without entries.

    ``validate(members, weights)`` scores the ensemble on the validation period: (score, daily
    returns). Nothing is written: the tournament records the selection and the ensemble's trial
    (`tournament.orchestrator.select_result`); a benchmark may replay the rule on a finished run."""
    if not entries:
        return None
    found = candidates(root, entries)
    qualified = members(found, k)
    chosen, weights, ensemble_score, daily = [], [], None, None
    if len(qualified) >= 2:
        chosen, weights = qualified, member_weights(qualified, weighting)
        ensemble_score, daily = validate(chosen, weights)
    choice = choose(found[0], ensemble_score, daily, best_of(root, len(found)))
    return Selection(found, chosen, weights, weighting, found[0].score, ensemble_score, choice), daily


def best_of(root: str | Path, candidates: int) -> int:
    """N of the rule: the validation passes the best pod was the best of, the rows of the tournament's
    ``trials.parquet`` but the ensemble's (every pass of every pod; the count every DSR uses); the
    leaderboard's ``candidates`` where there is no ``trials.parquet``."""
    path = Path(root) / rundir.TRIALS
    if not path.is_file():
        return candidates
    return int((rundir.read_parquet(path)["pod_id"] != rundir.ENSEMBLE_TRIAL).sum())


def _number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)

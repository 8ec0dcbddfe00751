"""Results across runs and tasks, read as RL results are read: numbers in, numbers out.

A suite's scores are a matrix ``[runs, tasks]``: one column per task (a market, an env), one row
per run (a seed) of one arm (the library's defaults, random search, the tournament). Scores are
usually normalised first (a test Sharpe ratio over the oracle's under costs), so that tasks can be
pooled. The estimates, from the papers' formulas:

- `iqm`: the interquartile mean of every run of every task pooled, the mean of the middle 50%
  (a 25% trimmed mean; Agarwal et al., NeurIPS 2021, "Deep RL at the Edge of the Statistical
  Precipice"). Robust to a few outlying runs, unlike the mean, and less noisy than the median.
- `cvar`: the conditional value at risk of the lowest ``alpha`` share of runs, the mean of the
  ``ceil(alpha * n)`` lowest pooled scores (Chan et al., ICLR 2020, "Measuring the Reliability of
  Reinforcement Learning Algorithms": risk across runs as the lower tail).
- `failure_rate`: the share of runs below a threshold (a failure, for a market with a planted
  edge, is a test Sharpe ratio below half the oracle's under costs).
- `score_distribution`: the performance profile, the share of runs whose score exceeds each
  threshold ``tau`` (Agarwal et al., section 4.2).
- `probability_of_improvement`: P(X > Y), the chance that a run of arm X beats a run of arm Y on
  the same task, averaged over tasks; each task's is the Mann-Whitney U statistic over all pairs,
  ties counted one half (Agarwal et al., section 4.3).
- `standing`: where one score stands among the runs of one task: its rank, its percentile and the
  runs' median, IQM, CVaR of the lowest 10% and best (a tournament's result among its own pods,
  each pod a draw of its search: `trader.backtesting.spread`).

Their uncertainty comes from the **stratified bootstrap** (`stratified_interval`): runs are drawn
with replacement within each task, every task keeping its number of runs, and the percentile
interval of the statistic over the resamples is reported. Two arms are resampled independently
(`difference_interval`); `non_inferior` reads the difference's lower end against a margin that
the caller fixed before the runs.

Bad input (not a 2-D matrix, NaN, fewer than one run) raises `ConfigError`: a suite's scores are
made by our own benchmark, so a NaN is a bug upstream, never a missing value to skip.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from trader.errors import ConfigError

Statistic = Callable[..., float]
"""A function of one or more score matrices [runs, tasks] to one number."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its stratified-bootstrap percentile interval."""

    value: float
    low: float
    high: float
    confidence: float
    resamples: int

    def as_dict(self) -> dict[str, float]:
        """``value``, ``low``, ``high``: the JSON form of a suite's results."""
        return {"value": self.value, "low": self.low, "high": self.high}


def scores_matrix(scores: object) -> np.ndarray:
    """`scores` as a float64 matrix [runs, tasks]; a 1-D array is one task."""
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ConfigError(f"scores must be a matrix [runs, tasks] with at least one of each; got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ConfigError("scores must be finite: a NaN or infinite score is a failed run to fix, not to skip")
    return array


def iqm(scores: object) -> float:
    """The interquartile mean of all runs of all tasks pooled: the 25% trimmed mean, cutting
    ``int(n / 4)`` scores from each end as `scipy.stats.trim_mean` does (written out: the
    bootstrap calls it thousands of times)."""
    pooled = np.sort(scores_matrix(scores).ravel())
    cut = int(0.25 * pooled.size)
    return float(pooled[cut : pooled.size - cut].mean())


def cvar(scores: object, alpha: float = 0.1) -> float:
    """The mean of the ``ceil(alpha * n)`` lowest of the n pooled scores (at least one)."""
    if not 0.0 < alpha <= 1.0:
        raise ConfigError(f"alpha must be in (0, 1]; got {alpha}")
    pooled = np.sort(scores_matrix(scores).ravel())
    count = max(1, math.ceil(alpha * pooled.size - 1e-9))
    return float(pooled[:count].mean())


def failure_rate(scores: object, threshold: float) -> float:
    """The share of pooled runs whose score is below `threshold`."""
    return float((scores_matrix(scores) < threshold).mean())


def score_distribution(scores: object, taus: object) -> np.ndarray:
    """The performance profile: for each threshold in `taus`, the share of pooled runs above it."""
    pooled = scores_matrix(scores).ravel()
    thresholds = np.asarray(taus, dtype=np.float64)
    return (pooled[None, :] > thresholds.reshape(-1, 1)).mean(axis=1).reshape(thresholds.shape)


def probability_of_improvement(first: object, second: object) -> float:
    """P(X > Y) of a run of `first` over a run of `second` on the same task, averaged over the
    tasks: per task the U statistic of every pair, a tie counting one half."""
    x, y = scores_matrix(first), scores_matrix(second)
    if x.shape[1] != y.shape[1]:
        raise ConfigError(f"both arms need the same tasks; got {x.shape[1]} and {y.shape[1]}")
    wins = (x[:, None, :] > y[None, :, :]).mean(axis=(0, 1))
    ties = (x[:, None, :] == y[None, :, :]).mean(axis=(0, 1))
    return float((wins + 0.5 * ties).mean())


@dataclass(frozen=True)
class Standing:
    """Where one score stands among ``n`` draws (`standing`)."""

    value: float
    """The score placed (a tournament's result)."""
    n: int
    """The draws it is placed among (the draw it is, when it is one of them, included)."""
    rank: int
    """1 + the draws strictly above ``value``: 1 is at the top, ties share the better rank."""
    percentile: float
    """100 x the share of draws at or below ``value`` (`scipy.stats.percentileofscore`'s "weak"):
    100 at or above the best draw, 0 below the worst."""
    median: float
    iqm: float
    """The draws' interquartile mean (`iqm`)."""
    cvar10: float
    """The mean of the draws' lowest 10%, at least one draw (`cvar` at 0.1)."""
    best: float
    worst: float

    def as_dict(self) -> dict[str, float | int]:
        """The JSON form: every field, by its name."""
        return {
            "value": self.value,
            "n": self.n,
            "rank": self.rank,
            "percentile": self.percentile,
            "median": self.median,
            "iqm": self.iqm,
            "cvar10": self.cvar10,
            "best": self.best,
            "worst": self.worst,
        }


def standing(value: float, draws: object) -> Standing:
    """Where ``value`` stands among ``draws`` (a 1-D array of finite scores, at least one; a
    ``value`` that is one of the draws counts among them): its rank, its percentile and the draws'
    median, IQM, CVaR of the lowest 10% and best."""
    pooled = scores_matrix(draws).ravel()
    if not math.isfinite(value):
        raise ConfigError(f"the score to place must be finite; got {value}")
    return Standing(
        value=float(value),
        n=int(pooled.size),
        rank=1 + int((pooled > value).sum()),
        percentile=float(100.0 * (pooled <= value).mean()),
        median=float(np.median(pooled)),
        iqm=iqm(pooled),
        cvar10=cvar(pooled, 0.1),
        best=float(pooled.max()),
        worst=float(pooled.min()),
    )


def _resample(scores: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """One stratified resample: each task's runs drawn with replacement, as many as it has."""
    runs, tasks = scores.shape
    rows = generator.integers(0, runs, size=(runs, tasks))
    return np.take_along_axis(scores, rows, axis=0)


def _interval(point: float, draws: np.ndarray, confidence: float) -> Estimate:
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(draws, [tail, 100.0 - tail])
    return Estimate(float(point), float(low), float(high), confidence, int(draws.size))


def _check(confidence: float, resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be in (0, 1); got {confidence}")
    if resamples < 100:
        raise ConfigError(f"resamples must be at least 100; got {resamples}")


def stratified_interval(
    statistic: Statistic, *arms: object, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """`statistic` of the score matrices `arms` with its stratified-bootstrap percentile
    interval: each resample draws every arm's runs with replacement within each task (the arms
    independently, as their runs are)."""
    _check(confidence, resamples)
    matrices = [scores_matrix(arm) for arm in arms]
    generator = np.random.default_rng(seed)
    draws = np.array([statistic(*(_resample(m, generator) for m in matrices)) for _ in range(resamples)])
    return _interval(statistic(*matrices), draws, confidence)


def difference_interval(
    statistic: Statistic,
    first: object,
    second: object,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """``statistic(first) - statistic(second)`` with its stratified-bootstrap interval."""
    return stratified_interval(
        lambda x, y: statistic(x) - statistic(y), first, second, confidence=confidence, resamples=resamples, seed=seed
    )


def non_inferior(
    first: object, second: object, margin: float, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[bool, Estimate]:
    """Whether `first` is not worse than `second` by more than `margin` (in score units, fixed
    before the runs): the lower end of the one-sided interval of ``IQM(first) - IQM(second)`` at
    `confidence` lies above ``-margin``. Returns the verdict and the two-sided interval at
    ``2 * confidence - 1``, whose lower end is that one-sided bound."""
    if margin < 0:
        raise ConfigError(f"margin must be >= 0; got {margin}")
    two_sided = 2.0 * confidence - 1.0
    estimate = difference_interval(iqm, first, second, confidence=two_sided, resamples=resamples, seed=seed)
    return estimate.low > -margin, estimate

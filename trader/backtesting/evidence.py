"""Is the edge real? The statistics every backtest report carries (docs/reading-results.md).

Two parts, both built on `trader.stats` (numbers only); the JSON and the sentences are
this module's (`series_evidence`, `verdict`, `pbo_json`, `spa_json`):

- **Per strategy**, on the report's period: the Sharpe ratio's 95% interval
  (stationary bootstrap and analytic), its PSR (probability that the true Sharpe is
  above 0), and, for a strategy that was *selected* among trials (a training run's
  ``best`` snapshot, a tournament's ``best`` pod and ``ensemble``, a baseline
  library's kept snapshot), the deflated Sharpe ratio with the real number of
  trials. On the test period, which played no part in the choice, that DSR is a
  conservative figure; the PSR is the honest one.
- **The selection itself**, on the validation period where it was made (from the
  run's ``trials.parquet``): the winner's validation Sharpe with its DSR after all
  trials, the probability of backtest overfitting of the trial set (CSCV), and
  Hansen's SPA test of whether any trial beat equal-weight or the benchmark at all.

The test period is never read to build a trial: trials come from validation passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trader import metrics, rundir, stats
from trader.errors import ConfigError
from trader.names import counted
from trader.stats import (
    TRADING_DAYS,
    Moments,
    PBOResult,
    SPAResult,
    expected_max_sharpe,
    min_track_record_length,
    null_sharpe_variance,
    probabilistic_sharpe_ratio,
    sharpe_interval_analytic,
    sharpe_interval_bootstrap,
    sharpe_moments,
)

SELECTED = ("best", "ensemble")
"""Strategy names of a run directory chosen by validation among its trials."""


@dataclass(frozen=True)
class Trials:
    """The trials a strategy was selected from."""

    sharpes: np.ndarray
    """Each trial's annualised validation Sharpe ratio (NaN where it had none)."""
    returns: pd.DataFrame | None = None
    """[trials x days] daily validation returns (None: not recorded, e.g. a baseline library)."""
    winner: int | None = None
    """Row of the selected trial in ``returns`` (None: unknown)."""

    @property
    def count(self) -> int:
        return len(self.sharpes)


def run_trials(run_dir: str | Path, kind: str, best_pod: str | None, baselines: list[Path]) -> dict[str, Trials]:
    """Strategy name -> the trials it was selected from, as a run directory records them.

    A tournament's ``best`` and ``ensemble`` share its trials (every pod's validation
    passes and the ensemble's, `tournament.selection`); each is its own winner among them.

    :param kind: "train" or "tournament" (`trader.backtesting.runs.RunContents.kind`).
    :param best_pod: a tournament's leaderboard leader (its winner among the trials).
    :param baselines: the run's baseline folders (their sidecars list every validation).
    """
    root = Path(run_dir)
    found: dict[str, Trials] = {}
    if (root / rundir.TRIALS).is_file():
        keys, returns = rundir.read_trials(root / rundir.TRIALS)
        sharpes = trial_sharpes(returns)
        found["best"] = Trials(sharpes, returns, _winner(root, kind, keys, best_pod))
        if kind == "tournament":
            rows = np.flatnonzero((keys["pod_id"] == rundir.ENSEMBLE_TRIAL).to_numpy()) if "pod_id" in keys else []
            found["ensemble"] = Trials(sharpes, returns, int(rows[0]) if len(rows) else None)
    for folder in baselines:
        sidecar = rundir.read_baseline(folder)
        # each pass's daily Sharpe ratio, recorded beside its score (the sidecar keeps no daily returns)
        sharpes = [row.get("sharpe") for row in sidecar.get("validation") or []]
        if sharpes:
            found[folder.name] = Trials(np.array([np.nan if s is None else s for s in sharpes], dtype=float))
    return found


def trial_sharpes(returns: pd.DataFrame) -> np.ndarray:
    """Each trial's annualised Sharpe ratio of its daily validation returns (rows: trials; NaN where
    it has fewer than two days). Not the trials' recorded ``score``: validation ranks by the Sharpe ratio
    of the bar returns (`trader.agents.evaluator.market_evaluator`), while every DSR is of daily returns,
    and the spread of the trials' Sharpe ratios it deflates by must be of the same returns."""
    return np.asarray(metrics.sharpe_ratio(returns.to_numpy(dtype=float).T), dtype=float).reshape(len(returns))


def _winner(root: Path, kind: str, keys: pd.DataFrame, best_pod: str | None) -> int | None:
    """The row of the selected pass: the best snapshot's step (of the leader's pod)."""
    folder = root if kind == "train" else (root / rundir.PODS_DIR / best_pod if best_pod else None)
    step = None if folder is None else rundir.best_step(folder)
    if step is None:
        return None
    rows = keys["step"] == step
    if "pod_id" in keys.columns:
        rows &= keys["pod_id"] == best_pod
    hits = np.flatnonzero(rows.to_numpy())
    return int(hits[0]) if len(hits) else None


def strategy_evidence(
    daily_returns: pd.DataFrame, trials: Mapping[str, Trials] | None = None, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """Strategy -> `series_evidence` of its daily returns on the report's
    period, deflated by its trials when it was selected among some."""
    trials = trials or {}
    out = {}
    for name in daily_returns.columns:
        chosen = trials.get(str(name))
        out[str(name)] = series_evidence(
            daily_returns[name].to_numpy(dtype=float),
            n_trials=None if chosen is None else chosen.count,
            trial_sharpes=None if chosen is None else chosen.sharpes,
            seed=seed,
        )
    return out


def selection_evidence(
    trials: Trials, yardsticks: Mapping[str, pd.Series], seed: int = 0, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The run's selection on its validation period: the winner's evidence after all
    trials, PBO by CSCV, and SPA against each yardstick (e.g. equal-weight, the
    benchmark: their daily validation returns, indexed by date), keyed by the
    yardstick's name and named in its sentence by its label (`labels`, name -> label;
    the name where it has none)."""
    labels = labels or {}
    out: dict[str, Any] = {"n_trials": trials.count}
    if trials.returns is None:
        return out
    days = trials.returns.columns
    matrix = trials.returns.to_numpy(dtype=float)
    if trials.winner is not None:
        out["winner"] = series_evidence(
            matrix[trials.winner], n_trials=trials.count, trial_sharpes=trials.sharpes, seed=seed
        )
    out["pbo"] = pbo_json(stats.pbo_cscv(matrix))
    out["spa"] = {}
    for name, series in yardsticks.items():
        aligned = pd.Series(series).reindex(days).to_numpy(dtype=float)
        out["spa"][name] = spa_json(stats.spa_test(aligned, matrix, seed=seed), name, label=labels.get(name))
    return out


def sentences(
    evidence: Mapping[str, Mapping[str, Any]], selection: Mapping[str, Any] | None, labels: Mapping[str, str]
) -> list[str]:
    """The report's plain sentences: one per strategy, then the selection's."""
    lines = [f"{labels.get(name, name)}: {row['sentence']}" for name, row in evidence.items()]
    if selection and selection.get("tournament"):
        lines.append(selection["tournament"]["sentence"])
    if selection:
        winner = selection.get("winner")
        if winner is not None:
            lines.append(
                f"Selection on validation ({counted(selection['n_trials'], 'trial')}): the winner's validation "
                f"Sharpe {_number(winner['sharpe'])}: {winner['sentence']}"
            )
        if "pbo" in selection:
            lines.append(selection["pbo"]["sentence"])
        lines.extend(spa["sentence"] for spa in selection.get("spa", {}).values())
    return lines


def _number(value: Any) -> str:
    return "n/a" if value is None else f"{value:.2f}"


# --------------------------------------------------------------------------- one series


def series_evidence(
    returns: Any,
    timestamps: Any = None,
    *,
    n_trials: int | None = None,
    trial_sharpes: Any = None,
    confidence: float = 0.95,
    reps: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Everything the report says about one strategy's Sharpe ratio, JSON-ready.

    Keys (annualised Sharpe figures; None where a number cannot be given, with the
    reason under ``reasons[key]``): ``days``, ``sharpe``, ``skew``, ``kurtosis`` (raw),
    ``confidence``, ``interval_analytic`` and ``interval_bootstrap`` ([low, high]),
    ``bootstrap_block_length``, ``psr`` (P[true Sharpe > 0]),
    ``min_track_record_days`` (days needed for PSR(0) to reach ``confidence``),
    ``n_trials``, ``expected_max_sharpe`` (annualised, of ``n_trials`` edge-free
    trials, V[SR_n] from the trials' Sharpe ratios), ``dsr``, ``expected_max_sharpe_null``
    and ``dsr_null`` (the same against ``n_trials`` zero-Sharpe trials:
    `null_sharpe_variance`), ``reasons`` and ``sentence`` (`verdict`).

    :param n_trials: trials the strategy was selected from (the DSR needs it and,
        above 1, ``trial_sharpes``); default len(trial_sharpes). One trial: no
        selection, the DSR is the PSR.
    :param trial_sharpes: the trials' annualised Sharpe ratios on the selection
        period; their variance, de-annualised, is the DSR's V[SR_n].

    The deflation is for the selection: the DSR belongs to the returns the strategy
    was selected on (validation). On a period that played no part in the choice
    (test), the PSR is the honest figure and the DSR a conservative one.
    """
    moments = sharpe_moments(returns, timestamps)
    reasons: dict[str, str] = {}
    analytic = sharpe_interval_analytic(returns, timestamps, confidence)
    bootstrap = sharpe_interval_bootstrap(returns, timestamps, confidence, reps=reps, seed=seed)
    evidence: dict[str, Any] = {
        "days": moments.days,
        "sharpe": moments.annual_sharpe,
        "skew": moments.skew,
        "kurtosis": moments.kurtosis,
        "confidence": confidence,
        "interval_analytic": [analytic.low, analytic.high],
        "interval_bootstrap": [bootstrap.low, bootstrap.high],
        "bootstrap_block_length": bootstrap.block_length,
        "psr": math.nan,
        "min_track_record_days": math.nan,
        "n_trials": n_trials,
        "expected_max_sharpe": math.nan,
        "dsr": math.nan,
        "expected_max_sharpe_null": math.nan,
        "dsr_null": math.nan,
    }
    if moments.reason is not None:
        for key in (
            "sharpe",
            "skew",
            "kurtosis",
            "interval_analytic",
            "interval_bootstrap",
            "bootstrap_block_length",
            "psr",
            "min_track_record_days",
            "expected_max_sharpe",
            "dsr",
            "expected_max_sharpe_null",
            "dsr_null",
        ):
            reasons[key] = moments.reason
    else:
        evidence["psr"] = probabilistic_sharpe_ratio(moments.sharpe, 0.0, moments.days, moments.skew, moments.kurtosis)
        evidence["min_track_record_days"] = min_track_record_length(
            moments.sharpe, 0.0, moments.skew, moments.kurtosis, confidence
        )
        if math.isinf(evidence["min_track_record_days"]):
            reasons["min_track_record_days"] = "the Sharpe ratio is not above 0: no track record is long enough"
        _deflate(evidence, moments, n_trials, trial_sharpes, reasons)
    ready = _json_ready(evidence, reasons)
    ready["sentence"] = verdict(ready)
    return ready


def _deflate(
    evidence: dict[str, Any], moments: Moments, n_trials: int | None, trial_sharpes: Any, reasons: dict[str, str]
) -> None:
    """Fill ``n_trials`` and both deflations when the trials are known: ``dsr`` with
    V[SR_n] estimated from the trials (Bailey and López de Prado), ``dsr_null`` with the
    sampling variance of a zero-Sharpe trial (`null_sharpe_variance`)."""
    sharpes = np.array([]) if trial_sharpes is None else np.asarray(trial_sharpes, dtype=float).ravel()
    sharpes = sharpes[np.isfinite(sharpes)]
    if n_trials is None and len(sharpes):
        n_trials = len(sharpes)
    evidence["n_trials"] = n_trials
    if n_trials is None:
        for key in ("expected_max_sharpe", "dsr", "expected_max_sharpe_null", "dsr_null"):
            reasons[key] = "no trial count given"
        return
    if n_trials < len(sharpes):
        raise ConfigError(f"n_trials ({n_trials}) is fewer than the {len(sharpes)} trial Sharpe ratios given")
    variances = {"_null": null_sharpe_variance(moments.days)}
    if n_trials == 1 or len(sharpes) >= 2:
        variances[""] = float(np.var(sharpes, ddof=1)) / TRADING_DAYS if len(sharpes) > 1 else 0.0
    else:
        reasons["expected_max_sharpe"] = reasons["dsr"] = (
            "fewer than 2 finite trial Sharpe ratios: no variance to deflate by"
        )
    for suffix, variance in variances.items():
        threshold = expected_max_sharpe(n_trials, variance)
        evidence[f"expected_max_sharpe{suffix}"] = threshold * math.sqrt(TRADING_DAYS)
        evidence[f"dsr{suffix}"] = probabilistic_sharpe_ratio(
            moments.sharpe, threshold, moments.days, moments.skew, moments.kurtosis
        )


def _json_ready(evidence: dict[str, Any], reasons: dict[str, str]) -> dict[str, Any]:
    """NaN and infinities become None (with a reason kept); numpy scalars become floats."""

    def clean(key: str, value: Any) -> Any:
        if isinstance(value, list):
            return None if any(clean(key, item) is None for item in value) else [float(item) for item in value]
        if isinstance(value, (float, np.floating)):
            if not math.isfinite(value):
                reasons.setdefault(key, "not a finite number")
                return None
            return float(value)
        return value

    ready = {key: clean(key, value) for key, value in evidence.items()}
    ready["reasons"] = dict(reasons)
    return ready


def verdict(evidence: dict[str, Any]) -> str:
    """The plain sentence a report prints for one strategy's `strategy_evidence`.

    "above zero at 95% after 14 trials (DSR 0.99 against 14 zero-Sharpe trials; 0.12
    from the trials' own spread)" when the deflated Sharpe is at least the confidence;
    "above zero at 95%, but not after 14 trials (...)" when it is not; "above zero at
    95%" (PSR, no trial count); "below zero at 95%" (PSR <= 1 - confidence); otherwise
    "not distinguishable from zero"; "no evidence: <reason>" when the PSR cannot be
    computed.

    The trial count's judgement follows ``dsr_null`` (the best of N zero-Sharpe
    trials) when the evidence has it, else ``dsr``: on tournaments,
    benchmarks/significance.py finds that both keep false discoveries down on an
    edge-free market, and that only ``dsr_null`` finds a planted edge, because the
    spread of learning pods' Sharpe ratios is skill as much as luck
    (docs/reading-results.md).
    """
    level = f"{100 * evidence['confidence']:g}%"
    psr, dsr, trials = evidence.get("psr"), evidence.get("dsr"), evidence.get("n_trials")
    if psr is None or (isinstance(psr, float) and math.isnan(psr)):
        reason = evidence.get("reasons", {}).get("psr", "the PSR could not be computed")
        return f"no evidence: {reason}"
    if psr >= evidence["confidence"]:
        if not _is_number(dsr):
            return f"above zero at {level}"
        null = evidence.get("dsr_null")
        deflated = null if _is_number(null) else dsr
        detail = (
            f"DSR {null:.2f} against {counted(trials, 'zero-Sharpe trial')}; {dsr:.2f} from the trials' own spread"
            if _is_number(null)
            else f"DSR {dsr:.2f}"
        )
        if deflated >= evidence["confidence"]:
            return f"above zero at {level} after {counted(trials, 'trial')} ({detail})"
        return f"above zero at {level}, but not after {counted(trials, 'trial')} ({detail})"
    if psr <= 1.0 - evidence["confidence"]:
        return f"below zero at {level}"
    return "not distinguishable from zero"


def _is_number(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def spa_verdict(result: SPAResult, benchmark: str, alpha: float = 0.05) -> str:
    """ "beats equal-weight: p = 0.03 (SPA)" or "does not beat equal-weight: p = 0.41 (SPA)"."""
    if result.reason is not None:
        return f"SPA against {benchmark} not computed: {result.reason}"
    beats = "beats" if result.consistent < alpha else "does not beat"
    return f"{beats} {benchmark}: p = {result.consistent:.2f} (SPA, {counted(result.n_trials, 'trial')})"


def pbo_verdict(result: PBOResult) -> str:
    """ "PBO 0.48: the validation winner falls to the median or below out of sample in 48% of splits"."""
    if result.reason is not None:
        return f"PBO not computed: {result.reason}"
    return (
        f"PBO {result.pbo:.2f}: the in-sample winner of {counted(result.n_trials, 'trial')} is at or below the "
        f"out-of-sample median in {100 * result.pbo:.0f}% of {counted(len(result.logits), 'split')}"
    )


def pbo_json(result: PBOResult) -> dict[str, Any]:
    """A `PBOResult` as a JSON-ready dict (None with a reason instead of NaN)."""
    return {
        "pbo": None if result.reason else result.pbo,
        "logits": [float(x) for x in result.logits],
        "n_blocks": result.n_blocks,
        "n_trials": result.n_trials,
        "days": result.days,
        "reason": result.reason,
        "sentence": pbo_verdict(result),
    }


def spa_json(result: SPAResult, benchmark: str, alpha: float = 0.05, label: str | None = None) -> dict[str, Any]:
    """An `SPAResult` as a JSON-ready dict (None with a reason instead of NaN).

    :param benchmark: the benchmark's key (``"equal_weight"``), kept as ``benchmark``.
    :param label: its name for people (``"Equal-weight buy-and-hold"``), in the sentence;
        None: the key."""
    nan_free = {key: (None if result.reason else getattr(result, key)) for key in ("consistent", "lower", "upper")}
    return {
        **{f"pvalue_{key}": value for key, value in nan_free.items()},
        "benchmark": benchmark,
        "n_trials": result.n_trials,
        "days": result.days,
        "block_length": result.block_length,
        "reps": result.reps,
        "reason": result.reason,
        "sentence": spa_verdict(result, benchmark if label is None else label, alpha),
    }


# --------------------------------------------------------------------------- against the market


def benchmark_evidence(
    daily_returns: pd.DataFrame, benchmark: pd.Series, confidence: float = 0.95
) -> dict[str, dict[str, Any]]:
    """Strategy -> its daily returns against the benchmark's (`trader.stats.benchmark_fit`), JSON-ready:
    ``beta``, ``alpha`` (annualised) and ``alpha_interval`` ([low, high] at `confidence`),
    ``tracking_error``, ``information_ratio``, ``correlation``, ``days``, ``confidence`` and
    ``reason`` (None, or why there are no figures). `benchmark`: the benchmark's daily returns on
    the same dates (the index's own: `trader.backtesting.assembly.benchmark_daily_returns`)."""
    market = benchmark.reindex(daily_returns.index).to_numpy(dtype=float)
    out = {}
    for name in daily_returns.columns:
        fit = stats.benchmark_fit(daily_returns[name].to_numpy(dtype=float), market, confidence=confidence)
        out[str(name)] = {
            "beta": _finite(fit.beta),
            "alpha": _finite(fit.alpha),
            "alpha_interval": None if fit.reason else [_finite(fit.alpha_low), _finite(fit.alpha_high)],
            "tracking_error": _finite(fit.tracking_error),
            "information_ratio": _finite(fit.information_ratio),
            "correlation": _finite(fit.correlation),
            "days": fit.days,
            "confidence": confidence,
            "reason": fit.reason,
        }
    return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


NEUTRAL_EXPOSURE = 0.5
"""A book whose net exposure averages less than this share of its value (in absolute value) is
dollar-neutral; one above it, long (`book_exposure`)."""


def book_exposure(series: pd.DataFrame) -> float | None:
    """A strategy's mean net exposure, ``(value - cash) / value``, over the bars it holds a
    position (gross value above 0); None when it never holds one."""
    held = series["gross_value"] > 0
    if not held.any():
        return None
    invested = (series["value"] - series["cash"]) / series["value"]
    return float(invested[held].mean())


def yardstick_verdicts(
    daily_returns: pd.DataFrame,
    series: Mapping[str, pd.DataFrame],
    agents: list[str],
    yardsticks: Mapping[str, bool],
    labels: Mapping[str, str],
    alpha: float = 0.05,
) -> dict[str, dict[str, Any]]:
    """Agent -> its verdict against the yardstick of its own kind, JSON-ready.

    An agent whose book is dollar-neutral (`book_exposure` below `NEUTRAL_EXPOSURE` in absolute
    value) is set against the dollar-neutral yardsticks of this backtest, a long one against the
    long-only ones (`yardsticks`: name -> True for dollar-neutral); of those, the one with the best
    Sharpe ratio here. The difference of the two Sharpe ratios is tested on the same days
    (`trader.stats.sharpe_difference`, one-sided p). Keys: ``book``, ``net_exposure``,
    ``matched`` (the yardsticks of its kind), ``yardstick`` (the best of them), ``yardstick_sharpe``,
    ``difference``, ``p_value``, ``reason`` and ``sentence``.
    """
    sharpes = metrics.sharpe_ratio(daily_returns)
    out: dict[str, dict[str, Any]] = {}
    for name in agents:
        exposure = book_exposure(series[name])
        row: dict[str, Any] = {"net_exposure": exposure, "book": None, "matched": [], "yardstick": None}
        if exposure is None:
            out[name] = {**row, "reason": "it never holds a position", "sentence": "no yardstick: it never trades"}
            continue
        neutral = abs(exposure) < NEUTRAL_EXPOSURE
        row["book"] = "dollar-neutral" if neutral else "long-only"
        matched = [y for y, kind in yardsticks.items() if kind == neutral and y in daily_returns.columns]
        row["matched"] = matched
        where = f"{row['book']} book (net exposure {round(100 * exposure)}% of its value on average)"
        if not matched:
            out[name] = {
                **row,
                "reason": f"no {row['book']} yardstick was run",
                "sentence": f"{where}: no {row['book']} yardstick was run",
            }
            continue
        best = max(matched, key=lambda y: -math.inf if not math.isfinite(sharpes[y]) else sharpes[y])
        test = stats.sharpe_difference(daily_returns[name].to_numpy(float), daily_returns[best].to_numpy(float))
        row.update(yardstick=best, yardstick_sharpe=_finite(float(sharpes[best])))
        row.update(
            difference=_finite(test.difference), p_value=None if test.reason else test.p_value, reason=test.reason
        )
        against = f"{where}, set against the {row['book']} yardsticks; the best of them here is {labels.get(best, best)} (Sharpe {sharpes[best]:.2f})"
        if test.reason is not None:
            judged = f"no test: {test.reason}"
        elif test.p_value < alpha:
            judged = f"beats it at {100 * (1 - alpha):g}% (Sharpe {test.difference:+.2f}, p = {test.p_value:.3f})"
        elif test.p_value > 1 - alpha:
            judged = f"below it at {100 * (1 - alpha):g}% (Sharpe {test.difference:+.2f}, p = {test.p_value:.3f})"
        else:
            judged = f"not distinguishable from it (Sharpe {test.difference:+.2f}, p = {test.p_value:.3f})"
        out[name] = {**row, "sentence": f"{against}: {judged}"}
    return out


__all__ = [
    "NEUTRAL_EXPOSURE",
    "SELECTED",
    "Trials",
    "benchmark_evidence",
    "book_exposure",
    "pbo_json",
    "run_trials",
    "selection_evidence",
    "sentences",
    "series_evidence",
    "spa_json",
    "strategy_evidence",
    "verdict",
    "yardstick_verdicts",
]

"""Is the edge real? The statistics every backtest report carries (docs/reading-results.md).

Two parts, both built on `trader.stats`:

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

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trader import rundir, stats

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

    :param kind: "train" or "tournament" (`trader.backtest.runs.RunContents.kind`).
    :param best_pod: a tournament's leaderboard leader (its winner among the trials).
    :param baselines: the run's baseline folders (their sidecars list every validation).
    """
    root = Path(run_dir)
    found: dict[str, Trials] = {}
    if (root / rundir.TRIALS).is_file():
        keys, returns = rundir.read_trials(root / rundir.TRIALS)
        sharpes = keys["score"].to_numpy(dtype=float)
        found["best"] = Trials(sharpes, returns, _winner(root, kind, keys, best_pod))
        if kind == "tournament":
            rows = np.flatnonzero((keys["pod_id"] == "ensemble").to_numpy()) if "pod_id" in keys else []
            found["ensemble"] = Trials(sharpes, returns, int(rows[0]) if len(rows) else None)
    for folder in baselines:
        sidecar = rundir.read_json(folder / rundir.BASELINE_SIDECAR)
        scores = [row.get("score") for row in sidecar.get("validation") or []]
        if scores:
            found[folder.name] = Trials(np.array([np.nan if s is None else s for s in scores], dtype=float))
    return found


def _winner(root: Path, kind: str, keys: pd.DataFrame, best_pod: str | None) -> int | None:
    """The row of the selected pass: the best snapshot's step (of the leader's pod)."""
    folder = root if kind == "train" else (root / rundir.PODS_DIR / best_pod if best_pod else None)
    sidecar = None if folder is None else folder / rundir.CHECKPOINTS / "best.json"
    if sidecar is None or not sidecar.is_file():
        return None
    step = rundir.read_json(sidecar).get("info", {}).get("step")
    rows = keys["step"] == step
    if "pod_id" in keys.columns:
        rows &= keys["pod_id"] == best_pod
    hits = np.flatnonzero(rows.to_numpy())
    return int(hits[0]) if len(hits) else None


def strategy_evidence(daily_returns: pd.DataFrame, trials: Mapping[str, Trials] | None = None,
                      seed: int = 0) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Strategy -> `trader.stats.strategy_evidence` of its daily returns on the report's
    period, deflated by its trials when it was selected among some."""
    trials = trials or {}
    out = {}
    for name in daily_returns.columns:
        chosen = trials.get(str(name))
        out[str(name)] = stats.strategy_evidence(
            daily_returns[name].to_numpy(dtype=float), n_trials=None if chosen is None else chosen.count,
            trial_sharpes=None if chosen is None else chosen.sharpes, seed=seed,
        )  # fmt: skip
    return out


def selection_evidence(trials: Trials, yardsticks: Mapping[str, pd.Series], seed: int = 0,
                       labels: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
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
        out["winner"] = stats.strategy_evidence(matrix[trials.winner], n_trials=trials.count,
                                                trial_sharpes=trials.sharpes, seed=seed)  # fmt: skip
    out["pbo"] = stats.pbo_json(stats.pbo_cscv(matrix))
    out["spa"] = {}
    for name, series in yardsticks.items():
        aligned = pd.Series(series).reindex(days).to_numpy(dtype=float)
        out["spa"][name] = stats.spa_json(stats.spa_test(aligned, matrix, seed=seed), name, label=labels.get(name))
    return out


def sentences(evidence: Mapping[str, Mapping[str, Any]], selection: Mapping[str, Any] | None,
              labels: Mapping[str, str]) -> list[str]:  # fmt: skip
    """The report's plain sentences: one per strategy, then the selection's."""
    lines = [f"{labels.get(name, name)}: {row['sentence']}" for name, row in evidence.items()]
    if selection and selection.get("tournament"):
        lines.append(selection["tournament"]["sentence"])
    if selection:
        winner = selection.get("winner")
        if winner is not None:
            lines.append(f"Selection on validation ({selection['n_trials']} trials): the winner's validation "
                         f"Sharpe {_number(winner['sharpe'])}: {winner['sentence']}")  # fmt: skip
        if "pbo" in selection:
            lines.append(selection["pbo"]["sentence"])
        lines.extend(spa["sentence"] for spa in selection.get("spa", {}).values())
    return lines


def _number(value: Any) -> str:
    return "n/a" if value is None else f"{value:.2f}"


__all__ = ["SELECTED", "Trials", "run_trials", "selection_evidence", "sentences", "strategy_evidence"]

"""The spread of a tournament's own pods: where its result stands among the pods it drew.

Every finished pod of a tournament is one draw of its search: its own seed and hyperparameters,
trained on the same budget. The result (the best pod, or an ensemble of pods: `tournament.selection`)
is worth what it is against those draws, not against zero: a result at the top of a tight spread
is the search working; one below the pods' median on the test period is the selection failing.

Two periods, one rule (`trader.aggregate.standing`: the rank, the percentile, and the pods'
median, IQM, CVaR of the lowest 10% and best):

- **validation**: every finished pod's validation score, as ``pods.parquet`` records it (the
  leaderboard's score: the annualised Sharpe ratio on a market), against the result's, as
  ``selection.json`` records it (the best pod's own score, or the ensemble's pass). The best pod is
  the top of this spread by construction (it was chosen there); the ensemble need not be. A pod
  without a finite score (a validation pass without a trade) is counted, not placed.
- **the backtest's period** (the test period, for the run's own report): every finished pod whose
  best checkpoint is still on disk, backtested in one pass beside the result (`pods_backtest`), by
  its net Sharpe ratio (after the backtest's costs). A tournament deletes the weights of pods that
  left the leaderboard and have no descendant on it (``keep_checkpoints`` keeps them), so by default
  the pods placed on test are the leaderboard and its ancestors: the spread of the pods that
  validation kept, not of all the search drew. The counts say how many were left out.

The pass holds every pod as one more strategy of one backtest (one time loop for all), without the
breakeven multiples, the tear sheets and the per-bar positions of the report's own pass; the engine
is deterministic, so the result's figure here is the report's own row (tests/test_spread.py).

With fewer than two pods placed there is no spread to stand against, and the section says so in
words; nothing here is NaN in a table. `spread` builds the record (``report.json``'s ``spread``,
and ``selection.json``'s, validation only, written when the tournament stops); `lines` says it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from trader import rundir
from trader.aggregate import standing
from trader.backtesting.engine import run_backtest

RESULTS = {"best": "the best pod", "ensemble": "the ensemble"}
"""A tournament's result (``selection.json``'s ``result``) in words."""

METRIC = "sharpe_ratio"
"""The backtest's figure each pod is placed by: the net Sharpe ratio (`trader.metrics.summary`)."""


def finished_pods(root: str | Path) -> pd.DataFrame:
    """A tournament's finished pods, in pod order: ``pod_id``, ``algo``, ``validation`` (the score
    ``pods.parquet`` records, NaN where none is finite) and ``checkpoint`` (the best checkpoint's path
    without suffix, None where its weights were deleted); no rows where ``pods.parquet`` is missing."""
    path = Path(root) / rundir.PODS
    columns = ["pod_id", "algo", "validation", "checkpoint"]
    if not path.is_file():
        return pd.DataFrame(columns=columns)
    pods = rundir.read_parquet(path)
    pods = pods[pods["status"] == "finished"].sort_values("index")
    best = [Path(root) / rundir.PODS_DIR / pod / rundir.CHECKPOINTS / "best" for pod in pods["pod_id"]]
    return pd.DataFrame(
        {
            "pod_id": pods["pod_id"].astype(str).to_list(),
            "algo": pods["algo"].astype(str).to_list(),
            "validation": pods["score"].astype(float).to_list(),
            "checkpoint": [p if p.with_suffix(".safetensors").is_file() else None for p in best],
        },
        columns=columns,
    )


def recorded_result(root: str | Path) -> tuple[str, str | None, float]:
    """The tournament's result as its files record it: (``"best"`` or ``"ensemble"``, the best pod's
    id, the result's validation score); the leaderboard's first pod where there is no
    ``selection.json``, (``"best"``, None, NaN) where there is no leaderboard either."""
    root = Path(root)
    board = root / rundir.LEADERBOARD
    entries = rundir.read_json(board, version=rundir.LEADERBOARD_VERSION)["entries"] if board.is_file() else []
    best = entries[0] if entries else None
    best_id = best["pod_id"] if best else None
    best_score = _float(best["score"]) if best else math.nan
    if not (root / rundir.SELECTION).is_file():
        return "best", best_id, best_score
    chosen = rundir.read_json(root / rundir.SELECTION, version=rundir.SELECTION_VERSION)
    if chosen["result"] == "ensemble":
        return "ensemble", best_id, _float(chosen["ensemble_score"])
    return "best", best_id, _float(chosen["best_score"])


def pods_backtest(
    data: Any, pods: pd.DataFrame, ensemble: Any, period: str, config: Any, device: str = "cpu"
) -> dict[str, float]:
    """Pod id -> its net Sharpe ratio over ``period``, for every pod of ``pods`` whose weights were
    kept, and ``"ensemble"`` -> the ensemble's where one is given (the tournament's result): one
    backtest, under ``config``'s capital, costs and rules, without its breakeven multiples, tear
    sheets or per-bar positions (how the report is drawn, not what it trades)."""
    strategies: dict[str, Any] = {p: str(c) for p, c in zip(pods["pod_id"], pods["checkpoint"]) if c is not None}
    if ensemble is not None:
        strategies["ensemble"] = ensemble
    if not strategies:
        return {}
    plain = replace(config, tear_sheet=False, cost_multiples=(), record_positions="day")
    found = run_backtest(data, strategies, baselines=[], period=period, config=plain, device=device)
    return {name: float(found.metrics.loc[name, METRIC]) for name in strategies}


def spread(
    root: str | Path,
    backtest: dict[str, float] | None = None,
    period: str | None = None,
    result: tuple[str, str | None, float] | None = None,
) -> dict[str, Any]:
    """The record of where the tournament's result stands among its finished pods (the module
    docstring): on validation always, and on ``period`` where ``backtest`` (`pods_backtest`'s figures)
    is given. JSON-able: no NaN, a figure that is not finite is null.

    :param result: (``"best"`` or ``"ensemble"``, the best pod's id, the result's validation score),
        as the caller holds it (the tournament, before it writes ``selection.json``); None: as the
        run's files record it (`recorded_result`)."""
    pods = finished_pods(root)
    result, best_id, result_validation = recorded_result(root) if result is None else result
    record: dict[str, Any] = {
        "result": result,
        "best_pod": best_id,
        "finished": len(pods),
        "metric": {"validation": "score", "backtest": METRIC},
        "pods": [
            {
                "pod_id": pod,
                "algo": algo,
                "validation": _json(score),
                "backtest": None if backtest is None else _json(backtest.get(pod, math.nan)),
                "kept": checkpoint is not None,
            }
            for pod, algo, score, checkpoint in pods.itertuples(index=False)
        ],
        "validation": _part(result_validation, pods["validation"].to_list(), len(pods)),
        "backtest": None,
    }
    if backtest is not None:
        value = backtest.get("ensemble" if result == "ensemble" else best_id or "", math.nan)
        kept = pods[pods["checkpoint"].notna()]
        part = _part(value, [backtest.get(p, math.nan) for p in kept["pod_id"]], len(pods))
        record["backtest"] = {"period": period, **part, "not_kept": int(len(pods) - len(kept))}
    record["sentences"] = lines(record)
    return record


def _part(value: float, scores: list[float], finished: int) -> dict[str, Any]:
    """One period's standing: the result's figure, the pods placed (those with a finite figure), the
    standing among them (None, with the reason, where the result has no figure or fewer than two pods
    have one)."""
    placed = [s for s in scores if math.isfinite(s)]
    reason = None
    if not math.isfinite(value):
        reason = "the result has no finite figure here"
    elif finished < 2:
        reason = "one finished pod, the result itself: no spread of pods to stand against"
    elif len(placed) < 2:
        reason = f"{len(placed)} of the {finished} finished pods placed: no spread to stand against"
    return {
        "value": _json(value),
        "placed": len(placed),
        "unplaced": len(scores) - len(placed),
        "standing": None if reason else standing(value, placed).as_dict(),
        "reason": reason,
    }


def lines(record: dict[str, Any]) -> list[str]:
    """The record in words: one line per period (the report's section, the dashboard's caption)."""
    finished = record["finished"]
    if finished == 0:
        return ["No pod finished: there is no result and no spread of pods."]
    name = RESULTS[record["result"]]
    said = [_line("On validation (each pod's leaderboard score)", name, record["validation"], finished)]
    part = record["backtest"]
    if part is not None:
        said.append(_line(f"On the {part['period']} period (net Sharpe ratio)", name, part, finished))
        if part["not_kept"]:
            said.append(
                f"{part['not_kept']} of the {finished} finished pods were not backtested: their weights were "
                "deleted when they left the leaderboard (keep_checkpoints keeps them), so the pods placed here "
                "are those validation kept (the leaderboard and its ancestors)."
            )
    return said


def _line(where: str, name: str, part: dict[str, Any], finished: int) -> str:
    unplaced = f"; {part['unplaced']} without a finite figure" if part["unplaced"] else ""
    found = part["standing"]
    if found is None:
        return f"{where}: {part['reason']}{unplaced}."
    above = found["rank"] - 1
    return (
        f"{where}: {name} ({found['value']:.2f}) ranks {found['rank']} ({above} of the {found['n']} pods placed "
        f"above it), at or above {found['percentile']:.0f}% of them; the pods' median {found['median']:.2f}, IQM "
        f"{found['iqm']:.2f}, lowest 10% (CVaR) {found['cvar10']:.2f}, best {found['best']:.2f}{unplaced}."
    )


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def _json(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None

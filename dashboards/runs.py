"""Reading run directories for the dashboard: plain files in, pandas out.

The dashboard reads only what docs/contracts.md lists: JSON and Parquet files
(and PNGs it shows as they are), through `trader.rundir`, the module that owns the
run directory's files. It never unpickles and never imports torch.

A run directory is recognised by any of its files:

- a training run: ``config.toml`` and ``metrics.parquet`` (`trader.train`);
- a backtest: ``report.json`` and ``backtests/<strategy>.parquet`` (`trader backtest`);
- a tournament: ``tournament.toml``, ``leaderboard.json``, ``pods.parquet`` and
  ``pods/<pod_id>/`` (each pod a training run);
- paper trading: ``paper/session.json`` and ``paper/journal.jsonl`` (`trader paper`) in
  a training run or a tournament;
- a walk-forward: ``walkforward.toml`` (`podracer.walkforward`); each of its folds
  (``folds/<k>/``, a training or tournament run with its test backtest) is listed
  too, as ``<walk-forward>/folds/<k>``, at any depth the walk-forward is found;
- the seed paper's experiment: ``experiment.toml`` (`podracer.experiment`), then its Table 2
  (``experiment.json``) and Figure 7 (``figure7.parquet``); its learners' folders
  (``tournament/``, ``ppo/``) are runs of their own;
- ``dataset.json``: the data set's card (`MarketData.describe`).

What a folder records (`RunDir.kind`: a training run, a tournament, a walk-forward, ...)
is `trader.rundir.run_kind`'s decision, the one the backtest's reader takes too.

A file that is missing, half-written or corrupt raises `RunFileError` with one line
naming the file and what is wrong; the pages show that line and go on with the other
runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from trader import rundir
from trader.rundir import MARKERS, RunFileError, read_json, read_parquet
from trader.rundir import require_keys as require

SERIES_OPTIONAL = ("gross_value",)
"""Series columns that files written by older versions lack; read where present."""

SERIES_COLUMNS = ("timestamp", *(c for c in rundir.SERIES_COLUMNS if c not in SERIES_OPTIONAL))
"""The columns of ``backtests/<strategy>.parquet`` the dashboard needs (not positions)."""
STITCHED_COLUMNS = ("timestamp", "strategy", "fold", *SERIES_COLUMNS[1:])
"""The columns of a walk-forward's ``stitched.parquet`` the dashboard reads."""
RUN_MARKERS = (*MARKERS, rundir.WF_CONFIG, rundir.EXPERIMENT)
"""The files that make a folder a run: `trader.rundir.MARKERS`, a walk-forward's config and an
experiment's (both are written first, so a walk-forward or an experiment still running is listed)."""
SKIPPED = ("pods", "backtests", "checkpoints", "baselines", rundir.REPORTS_DIR, rundir.WF_FOLDS_DIR)
"""Folders inside a run that are never runs of their own listing (a run's other
reports, ``reports/<name>/``, belong to it: `trader.rundir.reports` lists them)."""


@dataclass(frozen=True)
class RunDir:
    """One run directory found under the runs folder."""

    name: str
    """Its path relative to the runs folder (the folder's own name for the root)."""
    path: Path

    @property
    def kind(self) -> str | None:
        """What the folder records (`trader.rundir.run_kind`): "train", "tournament",
        "baselines", "walkforward", "experiment", or None (a folder with a report only)."""
        return rundir.run_kind(self.path)

    @property
    def has_report(self) -> bool:
        return (self.path / rundir.REPORT_JSON).exists()

    @property
    def has_training(self) -> bool:
        return (self.path / rundir.METRICS).exists()

    @property
    def has_tournament(self) -> bool:
        return self.kind == "tournament"

    @property
    def has_walkforward(self) -> bool:
        return self.kind == "walkforward"

    @property
    def has_paper(self) -> bool:
        return (self.path / rundir.PAPER_SESSION).exists()

    @property
    def has_experiment(self) -> bool:
        """The seed paper's experiment (`trader experiment podracer`), finished or not."""
        return self.kind == "experiment"


def find_runs(runs_dir: str | os.PathLike[str]) -> list[RunDir]:
    """Run directories in `runs_dir` (itself, its children and grandchildren), by name.

    A tournament's pods (``pods/<id>``) belong to their tournament and are not listed;
    a walk-forward's folds are listed after it, in fold order, whatever their depth.
    """
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    candidates = [root, *sorted(p for p in root.iterdir() if p.is_dir())]
    candidates += [q for p in candidates[1:] if p.name != "pods" for q in sorted(p.iterdir()) if q.is_dir()]
    runs = []
    for path in candidates:
        if path != root and (
            path.name in SKIPPED or path.parent.name in ("pods", rundir.REPORTS_DIR, rundir.WF_FOLDS_DIR)
        ):
            continue  # pods belong to their tournament, folds are listed with their walk-forward
        if any((path / marker).exists() for marker in RUN_MARKERS):
            name = root.name if path == root else str(path.relative_to(root))
            runs.append(RunDir(name, path))
            runs += walkforward_folds(RunDir(name, path))
    return runs


def report_views(found: list[RunDir]) -> list[RunDir]:
    """Every backtest report of the runs `found` lists, as a folder a page reads like a run:
    a run's own report under the run's name, then each of its other reports
    (``reports/<name>/``: another period, strategies, costs or data; `trader.rundir.reports`)
    as ``<run>/reports/<name>``."""
    views = []
    for run in found:
        for report in rundir.reports(run.path):
            views.append(run if report.own else RunDir(f"{run.name}/{rundir.REPORTS_DIR}/{report.name}", report.path))
    return views


def walkforward_folds(walk: RunDir) -> list[RunDir]:
    """The run directories of a walk-forward's folds (``folds/<k>/`` holding a run), by fold."""
    if not walk.has_walkforward:
        return []
    return [
        RunDir(f"{walk.name}/{rundir.WF_FOLDS_DIR}/{p.name}", p)
        for p in rundir.fold_folders(walk.path)
        if any((p / marker).exists() for marker in MARKERS)
    ]


def modified(path: Path) -> float:
    """Modification time of the file `path`, 0 if missing.

    The cache key of every loader: a file rewritten by a running job changes it.
    """
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


# --------------------------------------------------------------------- backtests


def load_report(run: Path) -> dict[str, Any]:
    """``report.json`` (`trader.backtesting.report.report_dict`), checked for the keys the pages use."""
    path = run / rundir.REPORT_JSON
    report = read_json(path)
    if not isinstance(report, dict):
        raise RunFileError(f"{path}: expected a JSON object")
    require(report, ("strategies", "metrics", "order", "period"), path)
    if not isinstance(report["period"], dict) or not {"start", "end"} <= set(report["period"]):
        raise RunFileError(f"{path}: 'period' needs 'start' and 'end'")
    return report


def load_series(run: Path, series_file: str) -> pd.DataFrame:
    """One strategy's bar series (``backtests/<name>.parquet``) indexed by timestamp, without
    positions; ``gross_value`` only where the file has it."""
    path = run / series_file
    frame = read_parquet(path, SERIES_COLUMNS, optional=SERIES_OPTIONAL)
    return frame.set_index("timestamp")


def load_trades(run: Path, trades_file: str) -> pd.DataFrame:
    """One strategy's trade list (``backtests/trades/<name>.parquet``: `trader.backtesting.trades`)."""
    return read_parquet(
        run / trades_file, ("timestamp", "ticker", "side", "shares", "price", "value", "commission", "spread", "impact")
    )


def trade_files(report: dict[str, Any]) -> dict[str, str]:
    """Strategy -> its trade list's path in the report's folder (report.json's ``files``; none
    for a report written with positions per session, or by an older version)."""
    files = report.get("files") or {}
    return {key.removeprefix("trades:"): path for key, path in files.items() if key.startswith("trades:")}


def strategy_labels(report: dict[str, Any]) -> dict[str, str]:
    """Strategy -> the name every page shows for it: report.json's ``label`` (the backtest's own,
    "PPO best", "Equal-weight buy-and-hold"), its name where the report has none; a label two
    strategies share gets its name after it, "(best)", so no two rows read the same."""
    labels = {s["name"]: str(s.get("label") or s["name"]) for s in report.get("strategies", [])}
    shared = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {name: f"{label} ({name})" if label in shared else label for name, label in labels.items()}


# --------------------------------------------------------------------- training and tournaments


def load_training(run: Path) -> pd.DataFrame:
    """``metrics.parquet`` of a training run, checked for ``step`` and ``wall_time``."""
    path = run / rundir.METRICS
    frame = read_parquet(path)
    for column in ("step", "wall_time"):
        if column not in frame.columns:
            raise RunFileError(f"{path}: no {column!r} column")
    return frame


def load_leaderboard(run: Path) -> dict[str, Any]:
    """``leaderboard.json`` of a tournament."""
    path = run / rundir.LEADERBOARD
    board = read_json(path)
    if not isinstance(board, dict):
        raise RunFileError(f"{path}: expected a JSON object")
    require(board, ("entries",), path)
    return board


def load_selection(run: Path) -> dict[str, Any]:
    """``selection.json`` of a tournament (`tournament.selection`): the candidates, the
    ensemble's members and the result, with the sentence that states it."""
    path = run / rundir.SELECTION
    values = read_json(path, version=rundir.SELECTION_VERSION)
    require(values, ("candidates", "members", "weights", "result", "sentence"), path)
    return values


def load_pods(run: Path) -> pd.DataFrame:
    """``pods.parquet`` of a tournament: one row per pod."""
    path = run / rundir.PODS
    frame = read_parquet(path)
    for column in ("pod_id", "algo", "worker", "start", "status", "score"):
        if column not in frame.columns:
            raise RunFileError(f"{path}: no {column!r} column")
    return frame


# --------------------------------------------------------------------- walk-forwards


def load_walkforward(run: Path) -> dict[str, Any]:
    """``walkforward.json`` (`podracer.walkforward`), checked for the keys the page uses."""
    path = run / rundir.WF_REPORT_JSON
    summary = read_json(path, version=rundir.WF_REPORT_VERSION)
    require(summary, ("config", "folds", "stitched"), path)
    require(summary["stitched"], ("metrics", "evidence", "reference"), path)
    for row in summary["folds"]:
        require(row, ("fold", "windows", "algo", "validation_sharpe", "test_sharpe"), path)
    return summary


def load_finished_folds(run: Path) -> list[dict[str, Any]]:
    """Each finished fold's ``fold.json`` (``folds/<k>/fold.json``), by fold: what a
    walk-forward still running (no ``walkforward.json`` yet) has to show."""
    records = []
    for folder in rundir.fold_folders(run):
        record = rundir.read_fold(run, int(folder.name))
        if record is not None:
            require(record, ("fold", "windows", "algo", "validation_sharpe", "test_sharpe"), folder / rundir.WF_FOLD)
            records.append(record)
    return records


def load_stitched(run: Path) -> pd.DataFrame:
    """``stitched.parquet``: the stitched record, one row per (bar, strategy)."""
    return read_parquet(run / rundir.WF_STITCHED, STITCHED_COLUMNS)


# --------------------------------------------------------------------- the seed paper's experiment

EXPERIMENT_ROW_KEYS = ("strategy", "source", *rundir.EXPERIMENT_COLUMNS)
"""The keys of a Table 2 row of ``experiment.json`` the page needs (the evidence columns
are read where a row has them: the paper's rows have none)."""
FIGURE_COLUMNS = ("learner", "seconds", "cum_return")
"""The columns of ``figure7.parquet`` (`podracer.experiment`)."""


def load_experiment(run: Path) -> dict[str, Any]:
    """``experiment.json`` (`podracer.experiment.write_outputs`): the config and Table 2's rows,
    checked for the keys the page uses."""
    path = run / rundir.EXPERIMENT_JSON
    values = read_json(path, version=rundir.EXPERIMENT_VERSION)
    require(values, ("config", "table"), path)
    if not isinstance(values["table"], list):
        raise RunFileError(f"{path}: 'table' is not a list of rows")
    for row in values["table"]:
        require(row, EXPERIMENT_ROW_KEYS, path)
    return values


def load_experiment_config(run: Path) -> dict[str, Any]:
    """``experiment.toml``: the experiment's settings (`podracer.experiment.ExperimentConfig`)."""
    path = run / rundir.EXPERIMENT
    config = rundir.read_toml(path)
    require(config, ("dataset", "cost", "preset"), path)
    return config


def load_experiment_dataset(run: Path) -> dict[str, Any]:
    """The experiment's data set recipe (``dataset.toml``: its window and split); {} until
    the experiment has written it."""
    return rundir.read_toml(run / rundir.EXPERIMENT_DATASET, missing_ok=True)


def load_experiment_figure(run: Path) -> pd.DataFrame:
    """``figure7.parquet``: one row per snapshot (learner, training seconds, test-period return)."""
    return read_parquet(run / rundir.EXPERIMENT_FIGURE, FIGURE_COLUMNS)


# --------------------------------------------------------------------- paper trading

PAPER_RECORD_KEYS = ("kind", "bar", "fills_at", "orders", "before", "after", "expected", "slippage_bp", "risk")
"""The keys of a journal record the paper trading page reads."""


def load_paper(run: Path) -> dict[str, Any]:
    """``paper/session.json`` and every complete line of ``paper/journal.jsonl`` (`podracer.paper`):
    ``{"session": ..., "records": [...]}``, checked for the keys the page uses."""
    path = run / rundir.PAPER_SESSION
    session = read_json(path, version=rundir.PAPER_VERSION)
    require(session, ("session", "strategy", "broker", "tickers", "config"), path)
    records = rundir.read_json_lines(run / rundir.PAPER_JOURNAL)
    for record in records:
        require(record, PAPER_RECORD_KEYS, run / rundir.PAPER_JOURNAL)
    return {"session": session, "records": records}


def load_dataset_card(run: Path) -> dict[str, Any]:
    """``dataset.json``: the data set's `MarketData.describe()`."""
    path = run / rundir.DATASET
    card = read_json(path)
    if not isinstance(card, dict):
        raise RunFileError(f"{path}: expected a JSON object")
    require(card, ("name", "tickers"), path)
    return card

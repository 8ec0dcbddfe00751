"""What every page shares: the runs folder and the cached loaders.

Every loader goes through one `st.cache_data` function keyed on the loader, the path
and the file's modification time, so a file rewritten by a running training or tournament
is read again on the next refresh and an unchanged one is not. Errors are not cached:
a page catches `RunFileError` and shows its one line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dashboards import figures, runs
from dashboards.runs import RunDir, RunFileError
from trader import rundir

RUNS_DIR_ENV = "PODRACER_RUNS_DIR"
"""Environment variable naming the runs folder (`trader dashboard` sets it); default ``runs``."""


def runs_dir() -> Path:
    """The folder the dashboard reads (``PODRACER_RUNS_DIR``, default ``runs``)."""
    return Path(os.environ.get(RUNS_DIR_ENV, "runs"))


def all_runs() -> list[RunDir]:
    """Run directories under the runs folder (listed afresh on every rerun: cheap)."""
    return runs.find_runs(runs_dir())


def all_reports() -> list[RunDir]:
    """Every backtest report under the runs folder: each run's own, then its other
    reports (``<run>/reports/<name>``; `dashboards.runs.report_views`)."""
    return runs.report_views(all_runs())


def problem(message: str | Exception) -> None:
    """Show one line about a file that could not be used; the page goes on."""
    st.warning(str(message), icon="⚠️")


@st.cache_data(show_spinner=False, max_entries=1024)
def _cached(loader: str, path: str, name: str, mtime: float) -> Any:
    """``LOADERS[loader](path, ...)``, cached on (loader, path, file name, modification time)."""
    return LOADERS[loader](Path(path), name)


def _load(loader: str, folder: Path, name: str) -> Any:
    return _cached(loader, str(folder), name, runs.modified(folder / name))


LOADERS = {
    "report": lambda folder, name: runs.load_report(folder),
    "series": runs.load_series,
    "trades": runs.load_trades,
    "daily": lambda folder, name: figures.daily_frame(_load("series", folder, name)),
    "training": lambda folder, name: runs.load_training(folder),
    "leaderboard": lambda folder, name: runs.load_leaderboard(folder),
    "pods": lambda folder, name: runs.load_pods(folder),
    "selection": lambda folder, name: runs.load_selection(folder),
    "dataset_card": lambda folder, name: runs.load_dataset_card(folder),
    "trials": lambda folder, name: rundir.read_trials(folder / name),
    "walkforward": lambda folder, name: runs.load_walkforward(folder),
    "stitched": lambda folder, name: runs.load_stitched(folder),
    "paper": lambda folder, name: runs.load_paper(folder),
    "experiment": lambda folder, name: runs.load_experiment(folder),
    "experiment_config": lambda folder, name: runs.load_experiment_config(folder),
    "experiment_dataset": lambda folder, name: runs.load_experiment_dataset(folder),
    "experiment_figure": lambda folder, name: runs.load_experiment_figure(folder),
}
"""Loader name -> function of (run folder, file name), as `_cached` calls it."""


def report(run: RunDir) -> dict[str, Any]:
    return _load("report", run.path, rundir.REPORT_JSON)


def series(run: RunDir, series_file: str) -> pd.DataFrame:
    """One strategy's bar series (without positions)."""
    return _load("series", run.path, series_file)


def trades(run: RunDir, trades_file: str) -> pd.DataFrame:
    """One strategy's trade list."""
    return _load("trades", run.path, trades_file)


def daily(run: RunDir, series_file: str) -> pd.DataFrame:
    """One strategy's series reduced to one row per session (from the cached series)."""
    return _load("daily", run.path, series_file)


def training(path: Path) -> pd.DataFrame:
    return _load("training", path, rundir.METRICS)


def leaderboard(run: RunDir) -> dict[str, Any]:
    return _load("leaderboard", run.path, rundir.LEADERBOARD)


def pods(run: RunDir) -> pd.DataFrame:
    return _load("pods", run.path, rundir.PODS)


def selection(run: RunDir) -> dict[str, Any] | None:
    """A tournament's ``selection.json``; None when it has none (still running, or older)."""
    if not (run.path / rundir.SELECTION).is_file():
        return None
    return _load("selection", run.path, rundir.SELECTION)


def trials(run: RunDir) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``trials.parquet``: (trial keys, daily validation returns [trials x days])."""
    return _load("trials", run.path, rundir.TRIALS)


def walkforward(run: RunDir) -> dict[str, Any]:
    """``walkforward.json`` of a finished walk-forward."""
    return _load("walkforward", run.path, rundir.WF_REPORT_JSON)


def stitched(run: RunDir) -> pd.DataFrame:
    """``stitched.parquet`` of a finished walk-forward."""
    return _load("stitched", run.path, rundir.WF_STITCHED)


def finished_folds(run: RunDir) -> list[dict[str, Any]]:
    """The ``fold.json`` of each finished fold (read afresh: a running walk-forward adds them)."""
    return runs.load_finished_folds(run.path)


def paper(run: RunDir) -> dict[str, Any]:
    """``paper/``'s session and journal records (read again when the journal grows)."""
    return _load("paper", run.path, rundir.PAPER_JOURNAL)


def experiment(run: RunDir) -> dict[str, Any]:
    """``experiment.json`` of a finished experiment: its config and Table 2's rows."""
    return _load("experiment", run.path, rundir.EXPERIMENT_JSON)


def experiment_settings(run: RunDir) -> tuple[dict[str, Any], dict[str, Any]]:
    """An experiment's ``experiment.toml`` and its data set recipe (``dataset.toml``; {} until written)."""
    return (
        _load("experiment_config", run.path, rundir.EXPERIMENT),
        _load("experiment_dataset", run.path, rundir.EXPERIMENT_DATASET),
    )


def experiment_figure(run: RunDir) -> pd.DataFrame:
    """``figure7.parquet``: Figure 7's points."""
    return _load("experiment_figure", run.path, rundir.EXPERIMENT_FIGURE)


def dataset_card(run: RunDir) -> dict[str, Any]:
    return _load("dataset_card", run.path, rundir.DATASET)


__all__ = [
    "RunFileError",
    "all_reports",
    "all_runs",
    "runs_dir",
    "problem",
    "report",
    "series",
    "trades",
    "daily",
    "training",
    "leaderboard",
    "pods",
    "selection",
    "dataset_card",
    "walkforward",
    "stitched",
    "finished_folds",
    "paper",
    "experiment",
    "experiment_settings",
    "experiment_figure",
]

"""What every page shares: the runs folder and the cached loaders.

Each loader is `st.cache_data`-wrapped and keyed on the path and the file's (or
folder's) modification time, so a file rewritten by a running training or tournament
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

RUNS_DIR_ENV = "PODRACER_RUNS_DIR"
"""Environment variable naming the runs folder (`trader dashboard` sets it); default ``runs``."""


def runs_dir() -> Path:
    """The folder the dashboard reads (``PODRACER_RUNS_DIR``, default ``runs``)."""
    return Path(os.environ.get(RUNS_DIR_ENV, "runs"))


def all_runs() -> list[RunDir]:
    """Run directories under the runs folder (listed afresh on every rerun: cheap)."""
    return runs.find_runs(runs_dir())


def problem(message: str | Exception) -> None:
    """Show one line about a file that could not be used; the page goes on."""
    st.warning(str(message), icon="⚠️")


@st.cache_data(show_spinner=False, max_entries=64)
def _report(path: str, mtime: float) -> dict[str, Any]:
    return runs.load_report(Path(path))


def report(run: RunDir) -> dict[str, Any]:
    return _report(str(run.path), runs.modified(run.path / "report.json"))


@st.cache_data(show_spinner=False, max_entries=512)
def _series(path: str, series_file: str, mtime: float) -> pd.DataFrame:
    return runs.load_series(Path(path), series_file)


def series(run: RunDir, series_file: str) -> pd.DataFrame:
    """One strategy's bar series (without positions)."""
    return _series(str(run.path), series_file, runs.modified(run.path / series_file))


@st.cache_data(show_spinner=False, max_entries=512)
def _daily(path: str, series_file: str, mtime: float) -> pd.DataFrame:
    return figures.daily_frame(runs.load_series(Path(path), series_file))


def daily(run: RunDir, series_file: str) -> pd.DataFrame:
    """One strategy's series reduced to one row per session."""
    return _daily(str(run.path), series_file, runs.modified(run.path / series_file))


@st.cache_data(show_spinner=False, max_entries=128)
def _training(path: str, mtime: float) -> pd.DataFrame:
    return runs.load_training(Path(path))


def training(path: Path) -> pd.DataFrame:
    return _training(str(path), runs.modified(path / "metrics.parquet"))


@st.cache_data(show_spinner=False, max_entries=32)
def _leaderboard(path: str, mtime: float) -> dict[str, Any]:
    return runs.load_leaderboard(Path(path))


def leaderboard(run: RunDir) -> dict[str, Any]:
    return _leaderboard(str(run.path), runs.modified(run.path / "leaderboard.json"))


@st.cache_data(show_spinner=False, max_entries=32)
def _pods(path: str, mtime: float) -> pd.DataFrame:
    return runs.load_pods(Path(path))


def pods(run: RunDir) -> pd.DataFrame:
    return _pods(str(run.path), runs.modified(run.path / "pods.parquet"))


@st.cache_data(show_spinner=False, max_entries=64)
def _dataset_card(path: str, mtime: float) -> dict[str, Any]:
    return runs.load_dataset_card(Path(path))


def dataset_card(run: RunDir) -> dict[str, Any]:
    return _dataset_card(str(run.path), runs.modified(run.path / "dataset.json"))


__all__ = ["RunFileError", "all_runs", "runs_dir", "problem", "report", "series", "daily", "training",
           "leaderboard", "pods", "dataset_card"]  # fmt: skip

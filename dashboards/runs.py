"""Reading run directories for the dashboard: plain files in, pandas out.

The dashboard reads only what docs/contracts.md lists: JSON and Parquet files
(and PNGs it shows as they are). It never unpickles and never imports torch: every
loader here uses the standard library, pandas and pyarrow only.

A run directory is recognised by any of its files:

- a training run: ``config.toml`` and ``metrics.parquet`` (`trader.train`);
- a backtest: ``report.json`` and ``backtests/<strategy>.parquet`` (`trader backtest`);
- a tournament: ``tournament.toml``, ``leaderboard.json``, ``pods.parquet`` and
  ``pods/<pod_id>/`` (each pod a training run);
- ``dataset.json``: the data set's card (`MarketData.describe`).

A file that is missing, half-written or corrupt raises `RunFileError` with one line
naming the file and what is wrong; the pages show that line and go on with the other
runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

MARKERS = ("report.json", "config.toml", "metrics.parquet", "tournament.toml", "leaderboard.json")
"""Files whose presence makes a folder a run directory."""

SERIES_COLUMNS = ("timestamp", "value", "return", "cash", "turnover", "traded_value", "costs")
"""The columns of ``backtests/<strategy>.parquet`` the dashboard reads (not positions):
`trader.backtest.result.SERIES_COLUMNS` plus the timestamp, repeated here because
importing `trader.backtest` loads torch."""


class RunFileError(Exception):
    """A run file that is missing, unreadable or not in the documented format."""


@dataclass(frozen=True)
class RunDir:
    """One run directory found under the runs folder."""

    name: str
    """Its path relative to the runs folder (the folder's own name for the root)."""
    path: Path

    @property
    def has_report(self) -> bool:
        return (self.path / "report.json").exists()

    @property
    def has_training(self) -> bool:
        return (self.path / "metrics.parquet").exists()

    @property
    def has_tournament(self) -> bool:
        return (self.path / "tournament.toml").exists() or (self.path / "leaderboard.json").exists()


def find_runs(runs_dir: str | os.PathLike[str]) -> list[RunDir]:
    """Run directories in `runs_dir` (itself, its children and grandchildren), by name.

    A tournament's pods (``pods/<id>``) belong to their tournament and are not listed.
    """
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    candidates = [root, *sorted(p for p in root.iterdir() if p.is_dir())]
    candidates += [q for p in candidates[1:] if p.name != "pods" for q in sorted(p.iterdir()) if q.is_dir()]
    runs = []
    for path in candidates:
        if path.name in ("pods", "backtests", "checkpoints", "baselines") or path.parent.name == "pods":
            continue
        if any((path / marker).exists() for marker in MARKERS):
            name = root.name if path == root else str(path.relative_to(root))
            runs.append(RunDir(name, path))
    return runs


def modified(path: Path) -> float:
    """Modification time of the file `path`, 0 if missing.

    The cache key of every loader: a file rewritten by a running job changes it.
    """
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


# --------------------------------------------------------------------- plain files


def read_json(path: Path) -> Any:
    """A JSON file, or `RunFileError` naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunFileError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunFileError(f"{path}: not valid JSON ({err})") from None


def read_parquet(path: Path, columns: tuple[str, ...] | None = None) -> pd.DataFrame:
    """A Parquet file (optionally some columns), or `RunFileError` naming the file."""
    if not path.exists():
        raise RunFileError(f"{path}: missing")
    try:
        return pq.read_table(path, columns=list(columns) if columns else None).to_pandas()
    except Exception as err:  # pyarrow raises several types for truncated or foreign files
        raise RunFileError(f"{path}: not a readable Parquet file ({type(err).__name__}: {err})") from None


def require(mapping: dict[str, Any], keys: tuple[str, ...], path: Path) -> None:
    """`RunFileError` naming the first of `keys` missing from `mapping` (read from `path`)."""
    for key in keys:
        if key not in mapping:
            raise RunFileError(f"{path}: no {key!r} entry")


# --------------------------------------------------------------------- backtests


def load_report(run: Path) -> dict[str, Any]:
    """``report.json`` (`trader.backtest.report.report_dict`), checked for the keys the pages use."""
    path = run / "report.json"
    report = read_json(path)
    if not isinstance(report, dict):
        raise RunFileError(f"{path}: expected a JSON object")
    require(report, ("strategies", "metrics", "order", "period"), path)
    if not isinstance(report["period"], dict) or not {"start", "end"} <= set(report["period"]):
        raise RunFileError(f"{path}: 'period' needs 'start' and 'end'")
    return report


def load_series(run: Path, series_file: str) -> pd.DataFrame:
    """One strategy's bar series (``backtests/<name>.parquet``) indexed by timestamp, without positions."""
    path = run / series_file
    frame = read_parquet(path, SERIES_COLUMNS)
    return frame.set_index("timestamp")


# --------------------------------------------------------------------- training and tournaments


def load_training(run: Path) -> pd.DataFrame:
    """``metrics.parquet`` of a training run, checked for ``step`` and ``wall_time``."""
    path = run / "metrics.parquet"
    frame = read_parquet(path)
    for column in ("step", "wall_time"):
        if column not in frame.columns:
            raise RunFileError(f"{path}: no {column!r} column")
    return frame


def load_leaderboard(run: Path) -> dict[str, Any]:
    """``leaderboard.json`` of a tournament."""
    path = run / "leaderboard.json"
    board = read_json(path)
    if not isinstance(board, dict):
        raise RunFileError(f"{path}: expected a JSON object")
    require(board, ("entries",), path)
    return board


def load_pods(run: Path) -> pd.DataFrame:
    """``pods.parquet`` of a tournament: one row per pod."""
    path = run / "pods.parquet"
    frame = read_parquet(path)
    for column in ("pod_id", "algo", "worker", "start", "status", "score"):
        if column not in frame.columns:
            raise RunFileError(f"{path}: no {column!r} column")
    return frame


def load_dataset_card(run: Path) -> dict[str, Any]:
    """``dataset.json``: the data set's `MarketData.describe()`."""
    path = run / "dataset.json"
    card = read_json(path)
    if not isinstance(card, dict):
        raise RunFileError(f"{path}: expected a JSON object")
    require(card, ("name", "tickers"), path)
    return card

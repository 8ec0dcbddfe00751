"""A run's backtest reports: its own at the top, any other in ``reports/<name>/``; `reports` lists
them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from trader.rundir.files import REPORTS_DIR, REPORT_JSON, is_temporary


@dataclass(frozen=True)
class Report:
    """One backtest report of a run: the run's own, or one of ``reports/<name>/``."""

    name: str
    """"" for the run's own report; else the folder's name (what differs from the run's
    own backtest: ``validation``, ``costs-retail``, ``strategies-oracle``, ...)."""
    path: Path
    """The folder holding its ``report.json``, ``report.md``, ``backtests/`` and tear sheets
    (the run directory itself for the run's own)."""

    @property
    def own(self) -> bool:
        """The run backtested as it was configured (its test period, strategies, data and costs)."""
        return self.name == ""


def reports(run_dir: str | os.PathLike[str]) -> list[Report]:
    """Every backtest report of a run directory that has a ``report.json``: the run's own
    first (when there is one), then ``reports/<name>/`` by name."""
    root = Path(run_dir)
    found = [Report("", root)] if (root / REPORT_JSON).is_file() else []
    folder = root / REPORTS_DIR
    if folder.is_dir():
        found += [
            Report(p.name, p)
            for p in sorted(folder.iterdir())
            if p.is_dir() and not is_temporary(p) and (p / REPORT_JSON).is_file()
        ]
    return found


def report_folder(run_dir: str | os.PathLike[str], name: str) -> Path:
    """Where report ``name`` of a run lives: the run directory for "" (its own report),
    else ``RUN_DIR/reports/<name>/``."""
    return Path(run_dir) if name == "" else Path(run_dir) / REPORTS_DIR / name

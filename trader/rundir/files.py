"""The run directory's file names: the constants every stage spells them by, their schema
versions, `FILES` (each file's format, version, writer and readers: the table of
docs/contracts.md, `files_table`) and `RunFileError`, the one error of a run file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from trader.errors import UserError


CONFIG = "config.toml"
METRICS = "metrics.parquet"
CHECKPOINTS = "checkpoints"
SNAPSHOTS = "snapshots"
RESUME_DIR = "resume"
RESUME_POINT = f"{RESUME_DIR}/last"
"""The checkpoint (without suffix) a training run keeps of where it is while it runs (written
at each evaluation and when a signal stops it; removed once ``final`` is written): what
``trader train RUN --resume`` continues from."""
RESUME_RUNNER = f"{RESUME_DIR}/runner.safetensors"
"""Beside `RESUME_POINT` when a signal stopped the run: its runner's state (an off-policy
replay buffer), too big to write at every evaluation."""
DATASET = "dataset.json"
TOURNAMENT = "tournament.toml"
EVENTS = "events.jsonl"
LEADERBOARD = "leaderboard.json"
PODS = "pods.parquet"
PODS_DIR = "pods"
BASELINES_DIR = "baselines"
BASELINE_SIDECAR = "baseline.json"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
BACKTESTS_DIR = "backtests"
TRADES_DIR = f"{BACKTESTS_DIR}/trades"
REPORTS_DIR = "reports"
ERROR = "error.txt"
POD_RESULT = "pod.json"
TRIALS = "trials.parquet"
ENSEMBLE_TRIAL = "ensemble"
"""The ``pod_id`` of a tournament's ensemble's validation pass in its ``trials.parquet`` (one row at most)."""
SELECTION = "selection.json"
WF_CONFIG = "walkforward.toml"
WF_FOLDS_DIR = "folds"
WF_FOLD = "fold.json"
WF_STITCHED = "stitched.parquet"
WF_REPORT_JSON = "walkforward.json"
WF_REPORT_MD = "walkforward.md"
PAPER_DIR = "paper"
PAPER_SESSION = "paper/session.json"
PAPER_JOURNAL = "paper/journal.jsonl"
PAPER_PENDING = "paper/pending.json"
EXPERIMENT = "experiment.toml"
EXPERIMENT_DATASET = "dataset.toml"
EXPERIMENT_JSON = "experiment.json"
EXPERIMENT_TABLE = "table2.md"
EXPERIMENT_FIGURE = "figure7.parquet"
EXPERIMENT_PLOT = "figure7.png"
EXPERIMENT_COLUMNS = ("cum_returns_final", "annual_return", "annual_volatility", "max_drawdown", "sharpe_ratio")
"""The experiment's Table 2 columns (``experiment.json`` rows), as `trader.metrics.summary` names them."""

LEADERBOARD_VERSION = 1
CHECKPOINT_VERSION = 1
BASELINE_VERSION = 1
POD_RESULT_VERSION = 1
WF_FOLD_VERSION = 1
WF_REPORT_VERSION = 1
SELECTION_VERSION = 1
PAPER_VERSION = 1
EXPERIMENT_VERSION = 1

SERIES_COLUMNS = ("value", "return", "cash", "gross_value", "turnover", "traded_value", "costs")
"""Per-bar columns of ``backtests/<strategy>.parquet`` besides ``timestamp`` and
``positions`` (`trader.backtesting.BacktestResult.series` holds the same columns)."""

MARKERS = (REPORT_JSON, CONFIG, METRICS, TOURNAMENT, LEADERBOARD)
"""Files whose presence makes a folder a run directory (for the dashboard)."""


@dataclass(frozen=True)
class RunFile:
    """One kind of file in a run directory."""

    pattern: str
    """Its path inside the run directory; ``*`` stands for a name (glob syntax)."""
    format: str
    """``toml``, ``json``, ``jsonl``, ``parquet``, ``safetensors``, ``png``, ``markdown``, ``text`` or ``zip``."""
    writer: str
    """The one module that writes it."""
    readers: str
    """Who reads it."""
    version: int | None = None
    """Schema version carried in the file as ``format_version`` (None: unversioned)."""


FILES: tuple[RunFile, ...] = (
    RunFile(CONFIG, "toml", "trader.train", "trader backtest, trader baselines, trader train --config, the dashboard"),
    RunFile(METRICS, "parquet", "trader.train", "the dashboard (training curves), benchmarks/"),
    RunFile(
        f"{CHECKPOINTS}/*.safetensors",
        "safetensors",
        "trader.agents.checkpoint",
        "trader backtest, the tournament (children, the ensemble), init_from",
        CHECKPOINT_VERSION,
    ),
    RunFile(
        f"{CHECKPOINTS}/*.json",
        "json",
        "trader.agents.checkpoint",
        "trader backtest, the tournament, init_from",
        CHECKPOINT_VERSION,
    ),
    RunFile(
        f"{SNAPSHOTS}/*.safetensors",
        "safetensors",
        "trader.agents.checkpoint (trader.train's snapshot_every)",
        "podracer.experiment (Figure 7: test return against training wall-clock)",
        CHECKPOINT_VERSION,
    ),
    RunFile(
        f"{SNAPSHOTS}/*.json",
        "json",
        "trader.agents.checkpoint (trader.train's snapshot_every)",
        "podracer.experiment",
        CHECKPOINT_VERSION,
    ),
    RunFile(
        f"{RESUME_DIR}/*.safetensors",
        "safetensors",
        "trader.agents.checkpoint (trader.train, while it runs)",
        "trader train --resume",
        CHECKPOINT_VERSION,
    ),
    RunFile(
        f"{RESUME_DIR}/*.json",
        "json",
        "trader.agents.checkpoint (trader.train, while it runs)",
        "trader train --resume",
        CHECKPOINT_VERSION,
    ),
    RunFile(DATASET, "json", "trader.train, trader.backtesting.report", "the dashboard (data set panel)"),
    RunFile(
        TRIALS,
        "parquet",
        "trader.train; tournament.orchestrator (every pod's, gathered)",
        "the report's selection statistics (trader.backtesting.runs), the dashboard",
    ),
    RunFile(
        TOURNAMENT,
        "toml",
        "tournament.orchestrator",
        "trader tournament --resume, trader backtest, trader baselines, the dashboard",
    ),
    RunFile(EVENTS, "jsonl", "tournament.events", "trader tournament --resume (replay)"),
    RunFile(
        LEADERBOARD,
        "json",
        "tournament.leaderboard",
        "trader backtest (best, ensemble), the dashboard",
        LEADERBOARD_VERSION,
    ),
    RunFile(PODS, "parquet", "tournament.orchestrator", "the dashboard"),
    RunFile(
        SELECTION,
        "json",
        "tournament.orchestrator (tournament.selection)",
        "trader backtest (the ensemble, the result), trader act, the demo, the dashboard",
        SELECTION_VERSION,
    ),
    RunFile(f"{PODS_DIR}/*/{ERROR}", "text", "tournament.pod", "a person reading a failed pod"),
    RunFile(
        f"{PODS_DIR}/*/{POD_RESULT}",
        "json",
        "tournament.pod",
        "tournament.pod (a second run of the pod returns it instead of training again)",
        POD_RESULT_VERSION,
    ),
    RunFile(
        f"{BASELINES_DIR}/*/{BASELINE_SIDECAR}",
        "json",
        "trader.backtesting.baseline_folder",
        "trader backtest, the dashboard",
        BASELINE_VERSION,
    ),
    RunFile(f"{BASELINES_DIR}/*/*.zip", "zip", "trader.baselines (SB3's model files)", "trader backtest"),
    RunFile(f"{BASELINES_DIR}/*/policy.safetensors", "safetensors", "trader.libraries.rllib_worker", "trader backtest"),
    RunFile(
        f"{BASELINES_DIR}/*/*.json",
        "json",
        "trader.libraries.rllib (the RLlib worker's exchange files)",
        "trader.libraries.rllib",
    ),
    RunFile(f"{BASELINES_DIR}/*/worker.log", "text", "trader.libraries.rllib", "a person"),
    RunFile(REPORT_JSON, "json", "trader.backtesting.report", "the dashboard, benchmarks/"),
    RunFile(REPORT_MD, "markdown", "trader.backtesting.report", "a person"),
    RunFile(f"{BACKTESTS_DIR}/*.parquet", "parquet", "trader.backtesting.report", "the dashboard"),
    RunFile(
        f"{TRADES_DIR}/*.parquet",
        "parquet",
        "trader.backtesting.report (trader.backtesting.trades)",
        "the dashboard (download), a person",
    ),
    RunFile("tearsheet_*.png", "png", "trader.backtesting.report", "the dashboard"),
    RunFile(
        f"{REPORTS_DIR}/*/{REPORT_JSON}",
        "json",
        "trader.backtesting.report",
        "the dashboard (`trader.rundir.reports` lists them)",
    ),
    RunFile(f"{REPORTS_DIR}/*/{REPORT_MD}", "markdown", "trader.backtesting.report", "a person"),
    RunFile(f"{REPORTS_DIR}/*/{BACKTESTS_DIR}/*.parquet", "parquet", "trader.backtesting.report", "the dashboard"),
    RunFile(
        f"{REPORTS_DIR}/*/{TRADES_DIR}/*.parquet",
        "parquet",
        "trader.backtesting.report (trader.backtesting.trades)",
        "the dashboard (download), a person",
    ),
    RunFile(f"{REPORTS_DIR}/*/tearsheet_*.png", "png", "trader.backtesting.report", "the dashboard"),
    RunFile(f"{REPORTS_DIR}/*/{DATASET}", "json", "trader.backtesting.report", "the dashboard (data set panel)"),
    RunFile(WF_CONFIG, "toml", "podracer.walkforward", "trader walkforward (a resume must match it)"),
    RunFile(
        f"{WF_FOLDS_DIR}/*/{WF_FOLD}",
        "json",
        "podracer.walkforward",
        "podracer.walkforward (the marker of a finished fold; the next fold's starting book)",
        WF_FOLD_VERSION,
    ),
    RunFile(WF_STITCHED, "parquet", "podracer.walkforward", "the dashboard (stitched equity)"),
    RunFile(WF_REPORT_JSON, "json", "podracer.walkforward", "the dashboard, benchmarks/", WF_REPORT_VERSION),
    RunFile(WF_REPORT_MD, "markdown", "podracer.walkforward", "a person"),
    RunFile(
        PAPER_SESSION,
        "json",
        "podracer.paper.journal",
        "trader paper (a restart must match it), the dashboard",
        PAPER_VERSION,
    ),
    RunFile(
        PAPER_JOURNAL, "jsonl", "podracer.paper.journal", "trader paper (a restart resumes from it), the dashboard"
    ),
    RunFile(
        PAPER_PENDING,
        "json",
        "podracer.paper.journal",
        "trader paper (a restart finishes the bar it names)",
        PAPER_VERSION,
    ),
    RunFile(
        EXPERIMENT,
        "toml",
        "podracer.experiment",
        "trader experiment podracer (a resume must match it), the dashboard",
    ),
    RunFile(
        EXPERIMENT_DATASET,
        "toml",
        "podracer.experiment",
        "every learner of the experiment (its data set recipe), the dashboard (its split)",
    ),
    RunFile(EXPERIMENT_JSON, "json", "podracer.experiment", "a person, benchmarks/, the dashboard", EXPERIMENT_VERSION),
    RunFile(EXPERIMENT_TABLE, "markdown", "podracer.experiment", "a person"),
    RunFile(EXPERIMENT_FIGURE, "parquet", "podracer.experiment", "a person (Figure 7's points), the dashboard"),
    RunFile(EXPERIMENT_PLOT, "png", "podracer.experiment", "a person"),
)
"""Every file a stage writes into a run directory. A training run's files also stand
under ``pods/<id>/`` of a tournament (each pod is a training run), and a training run's
or a tournament's (with its test backtest's report) under ``folds/<k>/`` of a
walk-forward (each fold is such a run)."""


def files_table() -> str:
    """`FILES` as the Markdown table of docs/contracts.md (tests/test_rundir.py keeps
    the two equal; paste this function's output there after changing `FILES`)."""
    rows = ["| file | format | version | written by (the only writer) | read by |", "|---|---|---|---|---|"]
    for f in FILES:
        version = "-" if f.version is None else str(f.version)
        rows.append(f"| `{f.pattern}` | {f.format} | {version} | `{f.writer}` | {f.readers} |")
    return "\n".join(rows)


def is_temporary(path: str | os.PathLike[str]) -> bool:
    """A writer's temporary (``.<name>.<random>.tmp`` from `write_atomic`,
    ``.tmp-<name>`` / ``.old-<name>`` from `stage_folder`), which a process killed
    mid-write leaves behind: never a run file, ignored by every reader."""
    name = Path(path).name
    return (name.startswith(".") and name.endswith(".tmp")) or name.startswith((".tmp-", ".old-"))


def file_kind(relative: str | os.PathLike[str]) -> RunFile | None:
    """The `FILES` entry a path inside a run directory belongs to (None: not a run file).

    A tournament pod's files (``pods/<id>/...``) are matched as a training run's, and a
    walk-forward fold's (``folds/<k>/...``, but its ``fold.json``) as a run's."""
    parts = Path(relative).parts
    if len(parts) > 2 and parts[0] == WF_FOLDS_DIR and Path(*parts[2:]).as_posix() != WF_FOLD:
        parts = parts[2:]
    if len(parts) > 2 and parts[0] == PODS_DIR and Path(*parts[2:]).as_posix() not in (ERROR, POD_RESULT):
        parts = parts[2:]
    path = Path(*parts)
    return next((f for f in FILES if path.match(f.pattern) and len(path.parts) == len(Path(f.pattern).parts)), None)


class RunFileError(UserError):
    """A run file that is missing, half-written, corrupt or not in its documented format."""

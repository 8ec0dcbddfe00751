"""The run directory: every file of a run, how it is written, and how it is read.

A run directory (``runs/<name>/``) is the contract between the stages: training,
the tournament, the backtest, the baselines and the dashboard meet only through its
files. This module is that contract in code; docs/contracts.md describes each file's
fields and points here.

- **Names and versions.** `FILES` lists every file a stage writes, its format, its
  schema version, its writer and its readers. The constants below are the names every
  stage uses; nothing else spells them.
- **Writes, whole or not at all.** `write_text`, `write_json`, `write_toml`,
  `write_parquet` and `write_atomic` write under a temporary name in the same folder,
  flush it to disk, then rename it into place; `stage_folder` and `commit_folder` do
  the same for a folder, and `commit_folder_once` commits only where no folder is yet
  (the first of several writers wins). A reader (or a killed writer) never leaves or
  sees half a file.
- **Logs.** `append_json_line` appends one synced line to ``events.jsonl``;
  `read_json_lines` reads the complete ones back.
- **Reads that name the file.** `read_text`, `read_json`, `read_toml` and
  `read_parquet` turn a missing, half-written or corrupt file into one
  `RunFileError` naming the file and what is wrong.
- **Claiming a folder.** `check_new_run` is the one check every command that starts a
  run calls: a folder that holds anything is refused with one line naming the option
  that resumes or writes elsewhere; `clear_run` (``--overwrite``) removes a run whole,
  and never a file that no stage writes (`foreign_files`).
- **Reading a run.** `run_kind` decides what a folder records (a training run, a
  tournament, baselines only, a walk-forward, an experiment), once for the backtest and
  the dashboard; `check_one_run` refuses a folder of several runs where one is read; `checkpoints`, `best_step`, `baseline_folders`, `read_baseline`,
  `recorded_env`, `recorded_rules`, `fold_dir`, `fold_folders` and `read_fold` read its
  parts (`trader.backtesting.runs.read_run` gathers what a backtest needs from them).
- **Reports.** A run's own backtest report lies at its top; any other in
  ``reports/<name>/``; `reports` lists them (`trader.backtesting.runs` decides which).
- **The config codec.** `config_to_dict` / `config_from_dict` turn a frozen
  dataclass config into a JSON/TOML-able dict and back (nested dataclasses
  included); `toml_ready` makes such a dict writable as TOML.

Torch-free on purpose: the dashboard imports it to read runs.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import shutil
import tempfile
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trader.errors import CheckpointError, ConfigError, UserError, writing

# ------------------------------------------------------------------------ file names

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


# ------------------------------------------------------------------------ claiming a run directory


def run_entries(root: str | os.PathLike[str]) -> list[str]:
    """What ``root`` holds at its top level, sorted, folders with a trailing ``/``; a
    killed writer's temporaries are left out ([] when ``root`` is missing)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(
        p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in root.iterdir() if not is_temporary(p)
    )


def foreign_files(root: str | os.PathLike[str]) -> list[str]:
    """Paths under ``root`` (relative, sorted) that no stage of this library writes:
    files outside `FILES`, and links (never followed). A killed writer's temporaries
    are the library's own."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(is_temporary(part) for part in relative.parts):
            continue
        if path.is_symlink() or (path.is_file() and file_kind(relative) is None):
            found.append(relative.as_posix())
        elif not path.is_dir() and not path.is_file():
            found.append(relative.as_posix())  # a socket, a fifo: not ours
    return found


def check_new_run(root: str | os.PathLike[str], *, remedy: str, overwrite: bool = False, what: str = "a run") -> None:
    """The one check of every command that starts a run in ``root`` (`trader train`,
    `tournament`, `walkforward`, `demo`): one `UserError` line, before any work, when
    ``root`` is a file or already holds something, naming the folder and ``remedy``
    (the option that resumes, replaces or writes elsewhere); ``what``: what it holds, in
    the message ("a run", "a tournament").

    With ``overwrite`` a folder that holds only files the library writes passes (the
    caller then calls `clear_run` once its inputs are checked); a file no stage writes
    is refused, named: the library never deletes what it did not create."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise UserError(f"{root} is a file, not a run directory")
    held = run_entries(root)
    if not held:
        return
    if not overwrite:
        listing = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise UserError(f"{root} holds {what} already ({listing}): {remedy}")
    foreign = foreign_files(root)
    if foreign:
        listing = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise UserError(
            f"--overwrite: {root} holds files that no run writes ({listing}); "
            "remove them yourself, or choose another run directory"
        )


def claim_run(root: str | os.PathLike[str], name: str, config: Mapping[str, Any], what: str) -> bool:
    """Start or resume the run whose config file ``name`` (TOML) is in ``root``: a folder
    without it must be new (`check_new_run`), and the config is written first; a folder with
    it resumes only under the same config (``run_dir`` aside: the same folder, by any path),
    else one `UserError` naming the keys that differ. Returns True for a resume.

    :param what: the run's kind in the messages ("a walk-forward", "an experiment")."""
    root = Path(root)
    path = root / name
    wanted = {k: v for k, v in toml_ready(dict(config)).items() if k != "run_dir"}
    if path.is_file():
        saved = {k: v for k, v in read_toml(path).items() if k != "run_dir"}
        if saved != wanted:
            changed = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
            raise UserError(
                f"{root} holds {what} with another config (differs in {', '.join(changed)}): "
                "give the same options to resume it, or another run directory"
            )
        return True
    check_new_run(root, remedy="give another run directory")
    write_toml(path, dict(config))
    return False


def clear_run(root: str | os.PathLike[str]) -> None:
    """Remove every file of the run in ``root`` (``--overwrite``: the new run replaces
    the old one whole: no stale report, series, checkpoint or baseline is left beside
    it). Refuses, removing nothing, when ``root`` holds a file no stage writes
    (`check_new_run`)."""
    root = Path(root)
    check_new_run(root, remedy="", overwrite=True)
    if not root.is_dir():  # nothing there yet: a new run
        return
    for path in root.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


# ------------------------------------------------------------------------ reports


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


# ------------------------------------------------------------------------ reading a run

RUN_KINDS = ("walkforward", "experiment", "tournament", "train", "baselines")
"""What a folder can record, in the order `run_kind` asks (the first found decides)."""


def run_kind(root: str | os.PathLike[str]) -> str | None:
    """What the folder ``root`` records, by the file its writer puts there first: the one
    place a run's kind is decided (the backtest's `trader.backtesting.runs.read_run` and the
    dashboard's `dashboards.runs.RunDir` both ask here).

    "walkforward" (``walkforward.toml``), "experiment" (``experiment.toml``),
    "tournament" (``tournament.toml``), "train" (``config.toml``, or checkpoints whose
    config is gone), "baselines" (only ``baselines/<name>/`` folders); None: no run."""
    root = Path(root)
    if (root / WF_CONFIG).is_file():
        return "walkforward"
    if (root / EXPERIMENT).is_file():
        return "experiment"
    if (root / TOURNAMENT).is_file():
        return "tournament"
    if (root / CONFIG).is_file() or checkpoints(root):
        return "train"
    return "baselines" if baseline_folders(root) else None


def check_one_run(root: str | os.PathLike[str]) -> None:
    """One `UserError` line when ``root`` holds several runs, not one: a walk-forward (its
    folds are the runs) or an experiment (each learner's folder is). The commands that read
    one run (`trader backtest`, `baselines`, `act`, `paper`) would otherwise take such a
    folder for one that records no run, and write into it; the line names a run inside it
    and the report to read instead. Other folders pass."""
    root = Path(root)
    kind = run_kind(root)
    if kind == "walkforward":
        folds = fold_folders(root)
        fold = folds[-1] if folds else fold_dir(root, 0)
        raise UserError(
            f"{root} is a walk-forward ({WF_CONFIG}), not one run: point at one of its folds' run "
            f"directories (e.g. {fold}), or read its report ({root / WF_REPORT_MD})"
        )
    if kind == "experiment":
        runs = sorted(p for p in root.iterdir() if p.is_dir() and not is_temporary(p) and run_kind(p) is not None)
        named = ", ".join(str(p) for p in runs[:3]) or f"{root}/tournament"
        raise UserError(
            f"{root} is an experiment ({EXPERIMENT}), not one run: point at one of its runs ({named}), "
            f"or read its table ({root / EXPERIMENT_TABLE})"
        )


def recorded_env(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``[env]`` table of a training run's ``config.toml`` (its data set, ``env_config``,
    ``periods`` and ``kind``); {} when the folder holds no config or the config no table."""
    return env_table(read_toml(Path(root) / CONFIG, missing_ok=True))


def env_table(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[env]`` table of a config.toml already read (`recorded_env` reads it from a folder)."""
    env = config.get("env")
    return env if isinstance(env, dict) else {}


def recorded_rules(values: Any, source: str) -> Any:
    """The `market_envs.config.EnvConfig` of rules recorded in a run file (a full config, or
    overrides of the defaults). Keys this version does not know (a file from a newer
    version) are ignored; values it cannot use are one `CheckpointError` naming ``source``.
    (The env module, and torch, load on the first call: importing this module stays light.)"""
    from market_envs.config import EnvConfig

    if not isinstance(values, Mapping):
        raise CheckpointError(f"{source}: recorded env_config must be a table, got {type(values).__name__}")
    known = set(EnvConfig.__dataclass_fields__)
    try:
        return config_from_dict(EnvConfig, {k: v for k, v in values.items() if k in known})
    except (ConfigError, TypeError, ValueError) as err:
        raise CheckpointError(f"{source}: env_config cannot be used: {err}") from err


def checkpoints(root: str | os.PathLike[str]) -> dict[str, Path]:
    """Name -> checkpoint path (without suffix) for every sidecar in ``RUN_DIR/checkpoints/``, by name."""
    folder = Path(root) / CHECKPOINTS
    if not folder.is_dir():
        return {}
    return {p.stem: p.with_suffix("") for p in sorted(folder.glob("*.json"))}


def best_step(root: str | os.PathLike[str]) -> Any:
    """The training step of a run's (or a pod's) best snapshot (``checkpoints/best.json``'s
    ``info.step``, as `trader.agents.evaluator.Evaluator.save_best` writes it); None when
    there is no best snapshot or it records no step."""
    sidecar = Path(root) / CHECKPOINTS / "best.json"
    if not sidecar.is_file():
        return None
    return read_json(sidecar).get("info", {}).get("step")


def baseline_folders(root: str | os.PathLike[str]) -> list[Path]:
    """``RUN_DIR/baselines/<name>/`` folders that hold a ``baseline.json``, sorted by name."""
    folder = Path(root) / BASELINES_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if (p / BASELINE_SIDECAR).is_file())


def read_baseline(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """A baseline folder's ``baseline.json`` (`trader.backtesting.baseline_folder` writes it), checked
    for its format version (`RunFileError` naming it)."""
    return read_json(Path(folder) / BASELINE_SIDECAR, version=BASELINE_VERSION)


def fold_dir(root: str | os.PathLike[str], k: int) -> Path:
    """A walk-forward's fold ``k``: ``RUN_DIR/folds/<k>/``."""
    return Path(root) / WF_FOLDS_DIR / str(k)


def fold_folders(root: str | os.PathLike[str]) -> list[Path]:
    """A walk-forward's ``folds/<k>/`` folders (finished or not), by fold."""
    folder = Path(root) / WF_FOLDS_DIR
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def read_fold(root: str | os.PathLike[str], k: int) -> dict[str, Any] | None:
    """Fold k's record (``folds/<k>/fold.json``) when the fold finished (its marker
    exists), else None."""
    path = fold_dir(root, k) / WF_FOLD
    if not path.is_file():
        return None
    return read_json(path, version=WF_FOLD_VERSION)


# ------------------------------------------------------------------------ writes


def make_folder(path: str | os.PathLike[str]) -> Path:
    """``mkdir -p path``; a place that cannot be written is an `UnwritableError` naming it."""
    path = Path(path)
    with writing(path):
        path.mkdir(parents=True, exist_ok=True)
    return path


def file_mode() -> int:
    """The mode an ordinary ``open(path, "w")`` gives a new file now: 0o666 less the
    process's umask (0o644 under umask 022). Read from /proc where Linux has it, which
    leaves the umask untouched; elsewhere set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | os.PathLike[str], write: Callable[[Path], object], mode: int | None = None) -> Path:
    """Have ``write(tmp)`` write the whole file at ``tmp``, then move it to ``path``.

    ``tmp`` is a fresh name in the same folder (so the rename is atomic), given the mode
    an ordinary ``open()`` would give the file under the current umask (`file_mode`, not
    mkstemp's 0600: a shared run folder stays readable by a dashboard of another account),
    or ``mode`` when given (a private key's 0600), flushed to disk before the rename; on any error it is removed and ``path`` is
    untouched. Parent folders are created. A place that cannot be written (a full disk, a
    read-only folder: `trader.errors.writing`) is one `UnwritableError` naming ``path``."""
    path = Path(path)
    make_folder(path.parent)
    with writing(path):
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        try:
            write(tmp)
            os.chmod(tmp, file_mode() if mode is None else mode)
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """A text file (UTF-8), whole or not at all."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike[str], values: Any, *, indent: int = 2, sort_keys: bool = False) -> Path:
    """Strict JSON (non-finite floats become null), whole or not at all."""
    text = json.dumps(json_ready(values), indent=indent, sort_keys=sort_keys, allow_nan=False, default=str)
    return write_text(path, text + "\n")


def write_toml(path: str | os.PathLike[str], values: Mapping[str, Any]) -> Path:
    """A TOML file of `values` (through `toml_ready`), whole or not at all."""
    import tomli_w

    return write_text(path, tomli_w.dumps(toml_ready(dict(values))))


def write_parquet(path: str | os.PathLike[str], table: Any) -> Path:
    """A pandas DataFrame (without its index) or a pyarrow Table as Parquet, whole or not at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(table, pa.Table):
        return write_atomic(path, lambda tmp: pq.write_table(table, tmp))
    return write_atomic(path, lambda tmp: table.to_parquet(tmp, index=False))


def stage_folder(final: str | os.PathLike[str], *, unique: bool = False) -> Path:
    """A fresh, empty temporary folder beside ``final`` (``.tmp-<name>``) to fill
    before `commit_folder` moves it into place. A leftover of a killed writer is removed.

    ``unique``: a name of its own (``.tmp-<name>-<random>``) for each of several writers
    that may fill a folder for ``final`` at once (`commit_folder_once`); nothing is
    removed (`remove_staged` clears leftovers once no writer can be running)."""
    final = Path(final)
    if unique:
        final.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    staged = final.parent / f".tmp-{final.name}"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    return staged


def commit_folder_once(staged: Path, final: str | os.PathLike[str]) -> bool:
    """Move a complete staged folder to ``final`` unless ``final`` already holds a
    folder with files; True when this one was moved. The loser's staged folder is removed.

    One ``rename``: POSIX renames a folder onto an absent or empty one and refuses a
    non-empty one, atomically, so of writers racing for ``final`` exactly one wins, and
    a writer killed mid-commit leaves either its whole folder at ``final`` or none."""
    try:
        os.rename(staged, final)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        shutil.rmtree(staged, ignore_errors=True)
        return False
    return True


def remove_staged(parent: str | os.PathLike[str]) -> list[Path]:
    """Remove the staged folders (``.tmp-*``) that killed writers left in ``parent``;
    return them. Call it only when no writer can still be filling one."""
    gone = [path for path in Path(parent).glob(".tmp-*") if path.is_dir()]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone


def commit_folder(staged: Path, final: str | os.PathLike[str]) -> Path:
    """Move a complete staged folder to ``final``, replacing an older one of that name.

    The old folder is first renamed aside, so ``final`` is at every moment either the
    old complete folder, absent, or the new complete one."""
    final = Path(final)
    old = final.parent / f".old-{final.name}"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(staged, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def append_json_line(path: str | os.PathLike[str], values: Mapping[str, Any]) -> dict[str, Any]:
    """Append one strict-JSON line to a log (``events.jsonl``) and sync it to disk;
    return the values as written. A crash can tear only this last line, which
    `read_json_lines` skips."""
    path = Path(path)
    values = json_ready(dict(values))
    line = json.dumps(values, sort_keys=True, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    return values


def repair_json_lines(path: str | os.PathLike[str]) -> int:
    """Cut a JSON-lines log back to its last complete line (a crash mid-append leaves a
    torn tail that the next append would otherwise join); return the bytes removed."""
    path = Path(path)
    if not path.is_file():
        return 0
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep == len(data):
        return 0
    with path.open("r+b") as handle:
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return len(data) - keep


# ------------------------------------------------------------------------ reads


def read_json_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete line of a JSON-lines log, oldest first ([] when there is no log);
    a line torn by a crash is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = []
    for line in read_text(path).splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return lines


def read_text(path: str | os.PathLike[str]) -> str:
    """A UTF-8 text file, or `RunFileError` naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunFileError(f"{path}: not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunFileError(f"{path}: unreadable ({err})") from None


def read_json(path: str | os.PathLike[str], *, version: int | None = None) -> Any:
    """A JSON file, or `RunFileError` naming it. With ``version``, the file must be an
    object whose ``format_version`` is that version."""
    path = Path(path)
    try:
        values = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise RunFileError(f"{path}: not valid JSON ({err})") from None
    if version is not None:
        found = values.get("format_version") if isinstance(values, dict) else None
        if found != version:
            raise RunFileError(f"{path}: format_version {found!r}, this library reads {version}")
    return values


def read_toml(path: str | os.PathLike[str], *, missing_ok: bool = False) -> dict[str, Any]:
    """A TOML file as a dict, or `RunFileError` naming it ({} when missing and ``missing_ok``)."""
    path = Path(path)
    if missing_ok and not path.is_file():
        return {}
    try:
        return tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as err:
        raise RunFileError(f"{path}: not valid TOML ({err})") from None


def read_parquet(
    path: str | os.PathLike[str], columns: tuple[str, ...] | None = None, optional: tuple[str, ...] = ()
) -> Any:
    """A Parquet file (optionally some columns) as a pandas DataFrame, or `RunFileError` naming it.

    ``optional``: more columns, read where the file has them (a column added to a file
    after older runs were written)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise RunFileError(f"{path}: not found")
    try:
        if columns and optional:
            present = set(pq.read_schema(path).names)
            columns = (*columns, *(c for c in optional if c in present))
        return pq.read_table(path, columns=list(columns) if columns else None).to_pandas()
    except Exception as err:  # pyarrow raises several types for truncated or foreign files
        raise RunFileError(f"{path}: not a readable Parquet file ({type(err).__name__}: {err})") from None


def require_keys(mapping: Mapping[str, Any], keys: tuple[str, ...], path: str | os.PathLike[str]) -> None:
    """`RunFileError` naming the first of ``keys`` missing from ``mapping`` (read from ``path``)."""
    for key in keys:
        if key not in mapping:
            raise RunFileError(f"{path}: no {key!r} entry")


# ------------------------------------------------------------------------ trials

TRIAL_KEYS = ("pod_id", "step", "score")
"""The columns of ``trials.parquet`` that describe a trial; every other column is one
validation day (``YYYY-MM-DD``) holding that trial's daily return."""


def trials_frame(keys: Any, daily: list[Any]) -> Any:
    """``trials.parquet``'s table: one row per validation pass (a trial), its
    `TRIAL_KEYS` columns from the DataFrame ``keys`` (``pod_id`` only in a
    tournament), then its daily returns (``daily``, one pandas Series per trial,
    indexed by date), one column per date of their union (NaN where a trial has none)."""
    import pandas as pd

    if len(keys) != len(daily):
        raise ValueError(f"{len(keys)} trial keys for {len(daily)} return series")
    returns = pd.concat([pd.Series(d).rename(i) for i, d in enumerate(daily)], axis=1).T if daily else pd.DataFrame()
    returns.columns = [pd.Timestamp(c).strftime("%Y-%m-%d") for c in returns.columns]
    return pd.concat([keys.reset_index(drop=True), returns.reset_index(drop=True)], axis=1)


def read_trials(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """``(keys, returns)`` of a ``trials.parquet``: the `TRIAL_KEYS` columns present,
    and the daily returns [trials x days] with a DatetimeIndex of the days as columns."""
    import pandas as pd

    frame = read_parquet(path)
    key_columns = [c for c in TRIAL_KEYS if c in frame.columns]
    returns = frame.drop(columns=key_columns).astype(float)
    try:
        returns.columns = pd.DatetimeIndex(returns.columns)
    except (ValueError, TypeError) as err:
        raise RunFileError(f"{path}: a column is neither a trial key nor a date ({err})") from None
    return frame[key_columns], returns


# ------------------------------------------------------------------------ the config codec


def config_to_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as a JSON/TOML-able dict: tuples become lists, nested
    dataclass configs become nested dicts."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise ConfigError(f"expected a dataclass config instance, got {type(config).__name__}")
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_to_dict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def config_from_dict(config_cls: type, values: Mapping[str, Any]) -> Any:
    """Build ``config_cls`` from a dict; unknown keys raise `ConfigError` naming them.

    Lists are turned back into tuples for tuple-typed fields, ints into floats for
    float fields and tables into nested dataclass configs (whose missing keys take
    their defaults), so a config survives a JSON or TOML round trip unchanged."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{config_cls.__name__} must be a table of keys, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(config_cls) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown {config_cls.__name__} key(s): {', '.join(unknown)}; valid keys: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(config_cls)
    kwargs = {name: _coerce(hints.get(name), value) for name, value in values.items()}
    try:
        return config_cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"{config_cls.__name__}: {err}") from err


def _coerce(hint: Any, value: Any) -> Any:
    """Undo JSON's flattening of tuples (-> lists), whole floats (-> ints) and nested configs (-> dicts)."""
    if hint is None:
        return value
    origin = typing.get_origin(hint)
    candidates = typing.get_args(hint) if origin in (typing.Union, types.UnionType) else (hint,)
    for candidate in candidates:
        if dataclasses.is_dataclass(candidate) and isinstance(value, Mapping):
            return config_from_dict(candidate, value)
        if (candidate is tuple or typing.get_origin(candidate) is tuple) and isinstance(value, list):
            return tuple(value)
        if candidate is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
    return value


def replace_config(config: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that raises `ConfigError` for unknown keys."""
    return config_from_dict(type(config), {**config_to_dict(config), **changes})


def toml_ready(value: Any) -> Any:
    """A dict as TOML can hold it: None dropped (TOML has no null), non-finite floats as strings."""
    if isinstance(value, Mapping):
        return {str(k): toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [toml_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def json_ready(value: Any) -> Any:
    """A value as strict JSON can hold it: non-finite floats become None, tuples lists."""
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value

"""Reading a run: `run_kind` decides what a folder records (once, for the backtest and the
dashboard), `check_one_run` refuses a folder of several runs, and the readers of its parts
(checkpoints, baselines, the recorded env rules, walk-forward folds)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trader.errors import CheckpointError, ConfigError, UserError
from trader.rundir.codec import config_from_dict
from trader.rundir.files import (
    BASELINES_DIR,
    BASELINE_SIDECAR,
    BASELINE_VERSION,
    CHECKPOINTS,
    CONFIG,
    EXPERIMENT,
    EXPERIMENT_TABLE,
    TOURNAMENT,
    WF_CONFIG,
    WF_FOLD,
    WF_FOLDS_DIR,
    WF_FOLD_VERSION,
    WF_REPORT_MD,
    is_temporary,
)
from trader.rundir.reads import read_json, read_toml


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

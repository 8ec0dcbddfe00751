"""A baseline's folder: ``RUN_DIR/baselines/<library>-<algo>-s<seed>/``.

It holds the library's own model files and ``baseline.json``, the sidecar:

- ``format_version``, ``status`` ("finished" or "failed", with ``error``);
- ``library``, ``library_version`` and ``trained_with`` (the package that trained
  it: FinRL's procedure runs on SB3), ``algo``, ``label`` (the report's row label),
  ``preset``, ``hyperparameters``, ``seed``, ``num_envs``, ``vec_env``;
- ``budget`` (``terms``: "equal env steps" or "equal wall-clock", ``steps`` or
  ``seconds``), ``steps`` and ``seconds`` spent, ``samples_per_s``;
- ``dataset``, ``periods`` (train and validation, as trained), ``env_config``;
- ``models``: [{``file``, ``algo``, ``start``}]: one model, or one per window of
  FinRL's ensemble (``start``: the first timestamp it trades; null: any);
- ``selection`` (the chosen snapshot's step and validation metrics) and
  ``validation`` (every validation: step, seconds, score, ...); the ensemble adds
  ``windows`` (train, validation and trade dates, each learner's validation Sharpe,
  the one chosen).

A folder is written under a temporary name and renamed into place when complete, so
a crash never leaves a half-written baseline, and an older one of the same name is
replaced only by a finished new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from market_envs.config import EnvConfig
from trader import rundir
from trader.adapters.mlp import MLPPolicy
from trader.adapters.sb3 import SB3Policy, load_model
from trader.backtesting.strategies import ExternalPolicy
from trader.errors import CheckpointError, UserError
from trader.rundir import config_from_dict

FORMAT_VERSION = rundir.BASELINE_VERSION
SIDECAR = rundir.BASELINE_SIDECAR


def folder_name(library: str, algo: str, seed: int) -> str:
    """``<library>-<algo>-s<seed>``: the folder and the report's strategy name."""
    return f"{library}-{algo}-s{seed}"


def staging(root: Path, name: str) -> Path:
    """A fresh temporary folder beside the final one (``baselines/.tmp-<name>``)."""
    return rundir.stage_folder(root / rundir.BASELINES_DIR / name)


def commit(staged: Path, name: str) -> Path:
    """Move a complete staged folder into place, replacing an older one of that name."""
    return rundir.commit_folder(staged, staged.parent / name)


def write_sidecar(folder: Path, values: dict[str, Any]) -> Path:
    """``baseline.json``, strict JSON (NaN and infinities as null), whole or not at all."""
    return rundir.write_json(folder / SIDECAR, {"format_version": FORMAT_VERSION, **values})


def training_summary(sidecar: dict[str, Any]) -> dict[str, Any]:
    """The part of a sidecar the report carries for the row."""
    keys = (
        "library",
        "library_version",
        "trained_with",
        "algo",
        "preset",
        "seed",
        "vec_env",
        "num_envs",
        "budget",
        "steps",
        "seconds",
        "samples_per_s",
    )
    return {k: sidecar.get(k) for k in keys}


def load_strategy(folder: Path, device: str = "cpu", rules: EnvConfig | None = None) -> ExternalPolicy | None:
    """The baseline in `folder` as a backtest strategy; None when it failed to train.

    :param rules: the env rules it was trained under, when the caller holds them (a walk-forward
        fold's spec); None: those its sidecar records."""
    sidecar = rundir.read_baseline(folder)
    if sidecar.get("status") != "finished":
        return None
    models = sidecar.get("models") or []
    if not models:
        raise UserError(f"{folder / SIDECAR} lists no model files")
    for model in models:
        if not (folder / model["file"]).is_file():
            raise CheckpointError(
                f"{folder / model['file']}: not found: the baseline {folder.name!r} cannot be backtested (deleted?)"
            )
    library = sidecar.get("library")
    if library == "rllib":
        policies = tuple(MLPPolicy(folder / m["file"], device) for m in models)
    elif library in ("sb3", "sb3-dummy", "finrl"):
        policies = tuple(SB3Policy(load_model(m["algo"], folder / m["file"], device)) for m in models)
    else:
        raise UserError(f"{folder}: library {library!r} has no loader here")
    starts = tuple(None if m.get("start") is None else pd.Timestamp(m["start"]) for m in models)
    if rules is None:
        rules = config_from_dict(EnvConfig, dict(sidecar["env_config"]))
    return ExternalPolicy(policies, starts, str(sidecar["label"]), str(folder), rules, training_summary(sidecar))

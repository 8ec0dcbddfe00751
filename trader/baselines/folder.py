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

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from market_envs.env import EnvConfig
from trader.agents.base import config_from_dict
from trader.backtest.strategies import ExternalPolicy
from trader.errors import UserError

FORMAT_VERSION = 1
SIDECAR = "baseline.json"


def folder_name(library: str, algo: str, seed: int) -> str:
    """``<library>-<algo>-s<seed>``: the folder and the report's strategy name."""
    return f"{library}-{algo}-s{seed}"


def staging(root: Path, name: str) -> Path:
    """A fresh temporary folder beside the final one (``baselines/.tmp-<name>``)."""
    path = root / "baselines" / f".tmp-{name}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def commit(staged: Path, name: str) -> Path:
    """Move a complete staged folder into place, replacing an older one of that name."""
    final = staged.parent / name
    old = staged.parent / f".old-{name}"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(staged, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def write_sidecar(folder: Path, values: dict[str, Any]) -> Path:
    """``baseline.json`` (through a temporary file and a rename)."""
    path = folder / SIDECAR
    tmp = folder / f".{SIDECAR}.tmp"
    text = json.dumps(_strict({"format_version": FORMAT_VERSION, **values}), indent=2, default=str, allow_nan=False)
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _strict(value: Any) -> Any:
    """NaN and infinities as null: strict JSON, as report.json."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def read_sidecar(folder: Path) -> dict[str, Any]:
    path = folder / SIDECAR
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise UserError(f"cannot read baseline sidecar {path}: {err}") from err
    if not isinstance(values, dict) or values.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{path} is not a baseline sidecar of format {FORMAT_VERSION}")
    return values


def training_summary(sidecar: dict[str, Any]) -> dict[str, Any]:
    """The part of a sidecar the report carries for the row."""
    keys = ("library", "library_version", "trained_with", "algo", "preset", "seed", "vec_env", "num_envs", "budget", "steps",
            "seconds", "samples_per_s")  # fmt: skip
    return {k: sidecar.get(k) for k in keys}


def load_strategy(folder: Path, device: str = "cpu") -> ExternalPolicy | None:
    """The baseline in `folder` as a backtest strategy; None when it failed to train."""
    sidecar = read_sidecar(folder)
    if sidecar.get("status") != "finished":
        return None
    models = sidecar.get("models") or []
    if not models:
        raise UserError(f"{folder / SIDECAR} lists no model files")
    library = sidecar.get("library")
    if library == "rllib":
        from trader.baselines.rllib import MLPPolicy

        policies = tuple(MLPPolicy(folder / m["file"], device) for m in models)
    elif library in ("sb3", "sb3-dummy", "finrl"):
        from trader.baselines.sb3 import SB3Policy, load_model

        policies = tuple(SB3Policy(load_model(m["algo"], folder / m["file"], device)) for m in models)
    else:
        raise UserError(f"{folder}: library {library!r} has no loader here")
    starts = tuple(None if m.get("start") is None else pd.Timestamp(m["start"]) for m in models)
    rules = config_from_dict(EnvConfig, dict(sidecar["env_config"]))
    return ExternalPolicy(policies, starts, str(sidecar["label"]), str(folder), rules, training_summary(sidecar))

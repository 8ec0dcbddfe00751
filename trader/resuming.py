"""Resuming an interrupted run: its resume point, the config it recorded, its records.

A run a signal stopped (`trader.stopping`) saved ``resume/last`` at the end of its
iteration; a run killed outright keeps the point its last evaluation saved.
``train(..., resume=True)`` (`trader.training.resume`, ``trader train RUN --resume``) continues
such a run: it builds the run from the same arguments (`rerun_arguments` reads them from
config.toml; any that differ from the recorded ones are refused, `check_same_run`), takes the
last point through the mechanism of ``init_from`` (`trader.training.continue_from`: weights,
optimiser moments, normaliser, counters and the random stream: the same seed), the best
snapshot, the trials and the metrics rows up to that step (`restore_records`), the evaluation
schedule and the wall clock (`ResumePoint`), and trains on to ``steps``. What is not
restored: the training env's state (it is reset, as after ``init_from``: a PPO run resumed
where its episodes restart equals the uninterrupted run bit for bit on one worker, else
its episodes restart early). An off-policy agent's replay buffer is saved where a signal
stops the run (``resume/runner.safetensors``; not at evaluations: a full buffer is large)
and restored with it; a run resumed from an evaluation's point (one killed outright) starts
with an empty buffer, refilled by the restored policy before updates resume,
``learning_starts`` transitions later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from trader import rundir
from trader.agents import Agent
from trader.agents.checkpoint import load_checkpoint, read_metadata
from trader.agents.evaluator import Evaluator
from trader.errors import CheckpointError, ConfigError, UserError


@dataclass(frozen=True)
class ResumePoint:
    """Where a run stopped, as ``resume/last.json``'s ``info`` records it."""

    step: int
    """Transitions collected."""
    last_eval: int
    """The step of the last evaluation (the schedule of the next ones continues from it)."""
    wall_time: float
    """Seconds of training so far (``time_budget`` and ``snapshot_every`` count on from it)."""
    runner: bool = False
    """The runner's state (an off-policy replay buffer) was saved beside it (``resume/runner``:
    only where a signal stopped the run)."""

    @classmethod
    def read(cls, root: Path) -> ResumePoint:
        """The resume point of the run in ``root``; one `UserError` when it has none."""
        if not (root / rundir.CONFIG).is_file():
            raise UserError(f"--resume: {root} holds no training run (no {rundir.CONFIG})")
        sidecar = root / f"{rundir.RESUME_POINT}.json"
        if not sidecar.is_file():
            done = (root / rundir.CHECKPOINTS / "final.json").is_file()
            why = "it finished" if done else "it stopped before its first evaluation saved one"
            raise UserError(f"--resume: {root} has no point to resume from ({sidecar} is missing: {why})")
        info = read_metadata(sidecar).get("info", {})
        try:
            return cls(
                int(info["step"]), int(info["last_eval"]), float(info["wall_time"]), bool(info.get("runner", False))
            )
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{sidecar}: info lacks step, last_eval or wall_time") from None


def check_same_run(root: Path, written: dict[str, Any]) -> None:
    """A resume's resolved config must be the one the run recorded in config.toml (the
    library version aside): one `UserError` naming the keys that differ."""
    saved = rundir.read_toml(root / rundir.CONFIG)
    keys = sorted(k for k in set(saved) | set(written) if k != "library_version" and saved.get(k) != written.get(k))
    if keys:
        listing = ", ".join(f"{k} (recorded {saved.get(k)!r}, now {written.get(k)!r})" for k in keys[:2])
        raise UserError(
            f"--resume: the run in {root} was started with another config: {listing}"
            f"{', ...' if len(keys) > 2 else ''}; give no option that changes it"
        )


def restore_records(
    root: Path, point: ResumePoint, agent: Agent, evaluator: Evaluator | None
) -> list[dict[str, float]]:
    """The metrics rows of the run in ``root`` up to ``point`` (the rows past it are trained
    again), and its evaluator's best snapshot and trials up to there."""
    frame = rundir.read_parquet(root / rundir.METRICS) if (root / rundir.METRICS).is_file() else pd.DataFrame()
    rows = [
        {key: float(value) for key, value in row.items() if not pd.isna(value)}
        for row in frame.to_dict("records")
        if row["step"] <= point.step
    ]
    if evaluator is None:
        return rows
    trials = []
    if (root / rundir.TRIALS).is_file():
        keys, returns = rundir.read_trials(root / rundir.TRIALS)
        for i, (step, score) in enumerate(zip(keys["step"], keys["score"], strict=True)):
            if step <= point.step:
                trials.append((int(step), float(score), returns.iloc[i].dropna().rename(None)))
    best = None
    if (root / rundir.CHECKPOINTS / "best.json").is_file():
        state, meta = load_checkpoint(root / rundir.CHECKPOINTS / "best", agent.device)
        info = meta.get("info", {})
        metrics = {k: math.nan if v is None else float(v) for k, v in (info.get("validation") or {}).items()}
        best = (int(info["step"]), metrics, state)
    evaluator.restore(agent, best, trials)
    return rows


def rerun_arguments(values: dict[str, Any]) -> dict[str, Any]:
    """`train`'s arguments from a run's config.toml (as `train` writes it): the same call
    trains the same run again, bit for bit on one worker (same library version, device
    and data). Keys of older config.toml files that are missing take `train`'s defaults."""
    env = values.get("env")
    if not isinstance(env, dict) or env.get("kind") not in ("market", "gymnasium"):
        raise ConfigError(f"config.toml: [env] must describe a market data set or a gymnasium env, got {env!r}")
    arguments: dict[str, Any] = {"algo": values.get("algo"), "config": values.get("algo_config") or {}}
    if env["kind"] == "market":
        arguments.update(
            env=env["dataset"],
            env_config=env.get("env_config"),
            periods=env.get("periods"),
            dataset_periods=env.get("dataset_periods"),
        )
    else:
        arguments.update(env=env["id"], eval_episodes=env.get("eval_episodes", 5))
    for key in ("steps", "seed", "device", "num_envs", "eval_every", "compile", "time_budget", "init_from", "preset"):
        if values.get(key) is not None:
            arguments[key] = values[key]
    return arguments

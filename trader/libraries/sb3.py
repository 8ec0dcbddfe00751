"""Stable-Baselines3 learners on our market env, selected on the validation period as ours are.

`fit` trains one SB3 model within a `Budget`, scores a snapshot on the validation
period every ``eval_every`` env steps and at the end with the evaluator our runs use
(`trader.agents.evaluator.market_evaluator`: Sharpe ratio of the bar returns), and keeps the best
snapshot's model file. `SB3Policy` gives a model our ``act(obs, deterministic)``
signature, so the evaluator and `trader.backtest` run it like one of our agents.

Presets (hyperparameters on top of SB3's own defaults):

- ``"sb3"``: SB3's defaults as they are (SB3 2.x): nothing overridden.
- ``"finrl"``: FinRL's published hyperparameters (``finrl/config.py``: A2C_PARAMS,
  PPO_PARAMS, DDPG_PARAMS, TD3_PARAMS, SAC_PARAMS).
- ``"finrl-ensemble"``: those of FinRL's ensemble-strategy tutorial (ICAIF 2020
  notebook) for its three learners, A2C, PPO and DDPG.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from trader.libraries.budget import Budget
from trader.libraries.selection import Selection
from trader.adapters.sb3 import ALGOS, SB3Policy, algorithm_class
from trader.errors import ConfigError, UserError

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "sb3": {algo: {} for algo in ALGOS},
    "finrl": {
        "a2c": {"n_steps": 5, "ent_coef": 0.01, "learning_rate": 0.0007},
        "ppo": {"n_steps": 2048, "ent_coef": 0.01, "learning_rate": 0.00025, "batch_size": 64},
        "ddpg": {"batch_size": 128, "buffer_size": 50_000, "learning_rate": 0.001},
        "td3": {"batch_size": 100, "buffer_size": 1_000_000, "learning_rate": 0.001},
        "sac": {
            "batch_size": 64,
            "buffer_size": 100_000,
            "learning_rate": 0.0001,
            "learning_starts": 100,
            "ent_coef": "auto_0.1",
        },
    },
    "finrl-ensemble": {
        "a2c": {"n_steps": 5, "ent_coef": 0.005, "learning_rate": 0.0007},
        "ppo": {"ent_coef": 0.01, "n_steps": 2048, "learning_rate": 0.00025, "batch_size": 128},
        "ddpg": {"buffer_size": 10_000, "learning_rate": 0.0005, "batch_size": 64},
    },
}

ProgressFn = Callable[[dict[str, Any]], None]


def hyperparameters(algo: str, preset: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The preset's keyword arguments for `algo`, with `overrides` on top."""
    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}; choose from {list(PRESETS)}")
    if algo not in PRESETS[preset] and preset != "sb3":
        raise UserError(f"preset {preset!r} has no {algo!r} (it has {list(PRESETS[preset])})")
    return {**PRESETS[preset].get(algo, {}), **(overrides or {})}


def make_model(algo: str, vec_env: Any, params: dict[str, Any], seed: int, device: str) -> Any:
    """An SB3 model with an MLP policy on `vec_env` (an SB3 `VecEnv`)."""
    from stable_baselines3.common.logger import Logger

    cls = algorithm_class(algo)
    try:
        model = cls("MlpPolicy", vec_env, seed=seed, device=device, verbose=0, **params)
    except TypeError as err:
        raise ConfigError(f"SB3 {algo.upper()} does not take these hyperparameters {params}: {err}") from err
    # Without a logger of its own, each `learn` makes an empty SB3-<time> folder in the temp
    # directory (stable_baselines3.common.logger.configure); selection and history are ours.
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


@dataclass
class FitResult:
    """What `fit` did: steps, seconds, the best validation snapshot and the history."""

    steps: int
    seconds: float
    best_score: float | None
    best_step: int | None
    best_metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    """One row per validation: step, seconds, score (and the evaluator's metrics)."""


def fit(
    model: Any,
    evaluator: Any,
    budget: Budget,
    model_path: Path,
    *,
    eval_every: int = 10_000,
    progress: ProgressFn | None = None,
) -> FitResult:
    """Train `model` within `budget`; save the best validation snapshot to `model_path`.

    Validation runs every `eval_every` env steps (0: only at the end) and once at the
    end, as in `trader.train` (`trader.libraries.selection.Selection`).
    """
    from stable_baselines3.common.callbacks import BaseCallback

    selection = Selection(evaluator, budget, eval_every, progress)

    def validate(steps: int) -> None:
        selection.validate(SB3Policy(model), steps, save=lambda: model.save(str(model_path)))

    class Callback(BaseCallback):
        def _on_step(self) -> bool:  # called on every env step; False ends ``learn``
            if selection.spent(self.num_timesteps):
                return False
            if selection.due(self.num_timesteps):
                validate(self.num_timesteps)
            return True

    total = budget.steps if budget.steps is not None else 10**12  # a time budget stops through the callback
    selection.restart_clock()
    model.learn(total_timesteps=total, callback=Callback(), progress_bar=False)
    validate(int(model.num_timesteps))
    return FitResult(
        int(model.num_timesteps),
        selection.seconds,
        selection.best_score,
        selection.best_step,
        selection.best_metrics,
        selection.history,
    )

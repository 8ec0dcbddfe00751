"""The envs of a training run: the batched training env and the validation evaluator.

`build_envs` reads what ``train``'s ``env`` may be:

- a `trader.spec.MarketSpec` (a market run's data set, windows and rules);
- a gymnasium id ("Pendulum-v1", "Ant-v5"): trains on `GymVecEnv` with ``num_envs``
  sub-environments; validation plays ``eval_episodes`` episodes (mean return);
- ``warp:`` and a locomotion id ("warp:Ant-v5"): trains on `WarpMujocoEnv` (``num_envs``
  robots stepped on the device by MuJoCo Warp); validation plays its episodes on gymnasium's
  own env (MuJoCo C), so the score is the id's as gymnasium measures it;
- a data set recipe name or path, or a `MarketData` panel: trains on the panel's
  ``train`` period with `StockTradingVecEnv` and validates on its ``validation``
  period (compounded return and Sharpe of the portfolio value; score = Sharpe);
- an already built batched env (then pass ``eval_env`` for validation, or none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from market_envs.costs import NamedCosts
from trader.agents.evaluator import Evaluator, market_evaluator, mean_return_score
from trader.environments import WARP_PREFIX, load_market, resolve_env
from trader.errors import ConfigError, UserError
from trader.rundir import config_from_dict, config_to_dict
from trader.spec import MarketSpec

COMPILE_CHOICES = ("off", "validation", "all")
"""What `train`'s ``compile`` may say: nothing compiled; the market validation pass only; the
agent's forward passes and the market steps of training and validation."""


def compile_choice(compile: bool | str) -> str:
    """``compile`` as one of `COMPILE_CHOICES` (False is "off", True is "all")."""
    if isinstance(compile, bool):
        return "all" if compile else "off"
    if compile not in COMPILE_CHOICES:
        raise ConfigError(f"compile must be True, False or one of {', '.join(COMPILE_CHOICES)}; got {compile!r}")
    return compile


@dataclass
class BuiltEnvs:
    """The training env, the validation env (or None) and what describes them."""

    train: Any
    """Batched training env."""
    evaluator: Evaluator | None
    """Evaluator on the validation env; None when there is none."""
    description: dict[str, Any]
    """JSON/TOML-able description of the env (for config.toml)."""
    data_window: dict[str, Any]
    """Data periods, for checkpoint sidecars."""
    dataset_card: dict[str, Any] | None = None
    """Market envs: `MarketData.describe()`, written as dataset.json."""


def build_envs(
    env: Any,
    num_envs: int,
    device: torch.device,
    seed: int,
    eval_env: Any = None,
    eval_episodes: int = 5,
    env_config: Any = None,
    compile: bool | str = False,
    periods: dict[str, Any] | None = None,
) -> BuiltEnvs:
    """Training env + evaluator for a market spec, a gymnasium id, a recipe, a panel or a built env."""
    if isinstance(env, MarketSpec):
        if env_config is not None or periods:
            raise ConfigError(
                "a MarketSpec carries the env rules and the windows; give no env_config or periods beside it"
            )
        name = resolve_env(env.dataset)
        return _market_envs(
            env.data(), num_envs, device, env.rules, compile, recipe=name.value if name.kind == "recipe_file" else None
        )
    if isinstance(env, str):
        name = resolve_env(env)
        if name.is_gym:
            if env_config is not None or periods:
                raise ConfigError("env_config and periods apply to market envs only, not to gymnasium ids")
            return _gym_envs(name.value, num_envs, device, seed, eval_episodes)
        return _market_envs(
            load_market(name.value, periods),
            num_envs,
            device,
            env_config,
            compile,
            recipe=name.value if name.kind == "recipe_file" else None,
        )
    if is_market_data(env):
        return _market_envs(env.with_periods(periods), num_envs, device, env_config, compile)
    if periods:
        raise ConfigError("periods apply to market envs only (a recipe or a MarketData)")
    for attribute in ("num_envs", "obs_dim", "act_dim", "reset", "step"):
        if not hasattr(env, attribute):
            raise ConfigError(
                f"env must be a gymnasium id, a data set recipe, a MarketData or a batched env; "
                f"{type(env).__name__} has no '{attribute}'"
            )
    evaluator = None if eval_env is None else Evaluator(eval_env, seed=seed + 10_000)
    return BuiltEnvs(env, evaluator, {"kind": "custom", "repr": repr(env)}, {"env": repr(env)})


def is_market_data(value: Any) -> bool:
    from market_envs.data import MarketData

    return isinstance(value, MarketData)


def _gym_envs(env_id: str, num_envs: int, device: torch.device, seed: int, eval_episodes: int) -> BuiltEnvs:
    from market_envs.gym_vec import GymVecEnv

    gym_id = env_id.removeprefix(WARP_PREFIX)
    if gym_id != env_id:
        from market_envs.warp_mujoco import WarpMujocoEnv

        train_env = WarpMujocoEnv(gym_id, num_envs, device, seed)
    else:
        train_env = GymVecEnv(env_id, num_envs, device, seed)
    evaluator = gym_evaluator(env_id, eval_episodes, device, seed)
    description = {"kind": "gymnasium", "id": env_id, "eval_episodes": eval_episodes}
    return BuiltEnvs(train_env, evaluator, description, {"env": env_id})


def gym_evaluator(env_id: str, episodes: int, device: torch.device, seed: int) -> Evaluator:
    """The validation of a run of seed ``seed`` on a gymnasium env: ``episodes`` episodes seeded from
    ``seed + 10_000``, deterministic actions, score = their mean return (a ``warp:`` id's on
    gymnasium's own env: the score is the id's as gymnasium measures it)."""
    from market_envs.gym_vec import GymVecEnv

    validation = GymVecEnv(env_id.removeprefix(WARP_PREFIX), episodes, device, seed + 10_000)
    return Evaluator(validation, mean_return_score, seed=seed + 10_000)


def _market_envs(
    data: Any, num_envs: int, device: torch.device, env_config: Any, compile: bool | str, recipe: str | None = None
) -> BuiltEnvs:
    """Train on the panel's train period, validate deterministically on its validation period.

    config.toml names the data set so that the run directory finds it again: a recipe
    file by its absolute path (``recipe``), a recipe of datasets/ (or a panel) by its name."""
    from market_envs.env import EnvConfig, StockTradingVecEnv

    train_data, val_data = data.period("train"), data.period("validation")
    cfg = env_config if isinstance(env_config, EnvConfig) else config_from_dict(EnvConfig, env_config or {})
    compile = compile_choice(compile)
    train_env = StockTradingVecEnv(train_data, num_envs, device, cfg, compile=compile == "all")
    evaluator = market_evaluator(val_data, cfg, device, compile=compile != "off")
    window = {
        "dataset": data.name,
        "interval": data.interval,
        "train": [str(train_data.start), str(train_data.end)],
        "validation": [str(val_data.start), str(val_data.end)],
        "tickers": list(data.tickers),
        "env_config": config_to_dict(cfg),
    }
    card = data.describe()
    description = {
        "kind": "market",
        "dataset": recipe or data.name,
        "env_config": config_to_dict(cfg),
        "cost_model": NamedCosts.from_config(cfg).name,
        "dataset_periods": {name: [part["start"], part["end"]] for name, part in card.get("periods", {}).items()},
    }
    if "periods" in data.meta:
        description["periods"] = data.meta["periods"]
        window["periods"] = data.meta["periods"]
    return BuiltEnvs(train_env, evaluator, description, window, card)


def check_dataset_periods(found: Any, recorded: Any, description: dict[str, Any]) -> None:
    """A rerun's data set must have the periods its run recorded (``[env.dataset_periods]``
    of config.toml): otherwise the data set changed since, and the rerun would not reproduce."""
    if found != recorded:
        raise UserError(
            f"data set {description.get('dataset')!r} has other periods than the run recorded "
            f"(now {found}, recorded {recorded}): it changed since the run"
        )

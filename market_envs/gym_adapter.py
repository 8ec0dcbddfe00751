"""`GymStockTradingEnv`: one market sub-environment behind gymnasium's single-env API.

Numpy in and out, so Stable-Baselines3 and other gymnasium libraries train on it
unchanged; the trading rules are exactly those of `StockTradingVecEnv` (it runs one
on the CPU underneath). As for any single gymnasium env, the caller resets after an
episode ends: the observation returned with ``terminated`` or ``truncated`` is the
last one of the finished episode.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from market_envs.data.panel import MarketData
from market_envs.config import EnvConfig
from market_envs.env import StockTradingVecEnv
from market_envs.errors import UserError


class GymStockTradingEnv(gym.Env):
    """A single trading account over the stocks of `data` (a `gymnasium.Env`).

    :param data: the market panel (moved to the CPU).
    :param config: trading rules; see `EnvConfig`. With ``random_start`` each reset
        draws a new start bar from the env's own generator, seeded by ``reset(seed=...)``.

    ``step`` returns ``info`` with the bar index ``t`` (int), ``value``, ``cash``,
    ``turnover`` and ``costs`` (floats) and ``holdings`` (float64 array [N]).
    """

    metadata = {"render_modes": []}

    def __init__(self, data: MarketData, config: EnvConfig | None = None) -> None:
        super().__init__()
        self.vec_env = StockTradingVecEnv(data, 1, "cpu", config)
        self.config = self.vec_env.config
        self.observation_space = self.vec_env.single_observation_space
        self.action_space = self.vec_env.single_action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        obs, info = self.vec_env.reset(seed=seed, options=options)
        return obs[0].numpy(), {"t": int(info["t"][0])}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = np.asarray(action, dtype=np.float32)
        if action.shape != self.action_space.shape:
            raise UserError(
                f"GymStockTradingEnv.step: action must have shape {self.action_space.shape}, got {action.shape}"
            )
        _, reward, terminated, truncated, info = self.vec_env.step(torch.from_numpy(action.reshape(1, -1)))
        # the vector env has already restarted a finished episode; hand back its last observation
        obs = info["final_obs"][0].numpy()
        details = {
            "t": int(info["t"][0]),
            "value": float(info["value"][0]),
            "cash": float(info["cash"][0]),
            "turnover": float(info["turnover"][0]),
            "costs": float(info["costs"][0]),
            "holdings": info["holdings"][0].numpy().copy(),
        }
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), details

    def close(self) -> None:
        self.vec_env.close()
